//! The real SmolLM2-135M-Instruct GGUF file (`cargo xtask fetch-llm`) through the host's
//! GGUF reader and its artifacts: the tensor index (30 blocks, shapes and types), the
//! tokenizer and hyper-parameters in the metadata, the metadata's JSON for the guest,
//! and `load-tensor` of an f32 norm onto the CPU device, byte for byte; a guest's KV
//! cache (`tensor.zeros`, `write-rows`) and the refused writes into a weight and a view
//! (by `write-rows` and by `kv-attention`, which also refuses a cache given twice). Skips (class
//! "SmolLM2 model") when the file has not been fetched, except under CI.

use std::collections::HashMap;
use std::path::Path;

use sluice_host_api::DType;
use sluice_runtime::device::CpuDevice;
use sluice_runtime::engine::ArtifactSet;
use sluice_runtime::engine::gguf::{Array, GgmlType, Gguf, Value};
use sluice_runtime::scheduler::{DeviceQueue, MemoryAccount};
use sluice_tests::fixtures::llm_gguf;

/// An f16 from its two little-endian bytes, widened.
fn half_f16(lo: u8, hi: u8) -> f32 {
    let bits = u16::from_le_bytes([lo, hi]);
    let (sign, exp, frac) = ((bits >> 15) as i32, ((bits >> 10) & 31) as i32, (bits & 1023) as f32);
    let mag = if exp == 0 { frac * 2f32.powi(-24) } else { (1.0 + frac / 1024.0) * 2f32.powi(exp - 15) };
    if sign == 1 { -mag } else { mag }
}

fn parse(path: &Path) -> (Vec<u8>, Gguf) {
    let bytes = std::fs::read(path).unwrap();
    let g = Gguf::parse(&bytes).unwrap();
    (bytes, g)
}

#[test]
fn the_tensor_index_has_30_llama_blocks_of_the_right_shapes_and_types() {
    let Some(path) = llm_gguf() else { return };
    let (bytes, g) = parse(&path);
    assert_eq!((g.version, g.alignment), (3, 32));
    // 30 blocks × 9 tensors, token_embd and output_norm; the output head is tied.
    assert_eq!(g.tensors.len(), 30 * 9 + 2);
    assert!(g.tensor("output.weight").is_none());
    let check = |name: &str, shape: &[u64], t: GgmlType| {
        let info = g.tensor(name).unwrap_or_else(|| panic!("no tensor {name}"));
        assert_eq!((info.shape().as_slice(), info.ggml_type), (shape, t), "{name}");
    };
    check("token_embd.weight", &[49152, 576], GgmlType::Q8_0);
    check("output_norm.weight", &[576], GgmlType::F32);
    for b in 0..30 {
        let n = |t: &str| format!("blk.{b}.{t}.weight");
        check(&n("attn_norm"), &[576], GgmlType::F32);
        check(&n("ffn_norm"), &[576], GgmlType::F32);
        check(&n("attn_q"), &[576, 576], GgmlType::Q4_1);
        check(&n("attn_k"), &[192, 576], GgmlType::Q4_1);
        check(&n("attn_v"), &[192, 576], GgmlType::Q4_1);
        check(&n("attn_output"), &[576, 576], GgmlType::Q4_1);
        check(&n("ffn_gate"), &[1536, 576], GgmlType::Q4_1);
        check(&n("ffn_up"), &[1536, 576], GgmlType::Q4_1);
        check(&n("ffn_down"), &[576, 1536], GgmlType::Q4_1);
    }
    let count = |t: GgmlType| g.tensors.iter().filter(|i| i.ggml_type == t).count();
    assert_eq!((count(GgmlType::Q4_1), count(GgmlType::Q8_0), count(GgmlType::F32)), (210, 1, 61));
    // The tensors tile the data section in order, without overlap, up to the end.
    let mut infos: Vec<_> = g.tensors.iter().collect();
    infos.sort_by_key(|i| i.offset);
    for pair in infos.windows(2) {
        assert!(pair[0].offset + pair[0].byte_len <= pair[1].offset, "{} overlaps {}", pair[0].name, pair[1].name);
    }
    let last = infos.last().unwrap();
    assert!(last.offset + last.byte_len <= bytes.len() as u64);
    let weight_bytes: u64 = g.tensors.iter().map(|i| i.byte_len).sum();
    assert!((95_000_000..98_362_432).contains(&weight_bytes), "{weight_bytes} bytes of weights");
}

#[test]
fn the_metadata_holds_the_hyper_parameters_and_the_tokenizer() {
    let Some(path) = llm_gguf() else { return };
    let (_, g) = parse(&path);
    let u = |k: &str| g.get(k).and_then(Value::as_u64).unwrap_or_else(|| panic!("no integer {k}"));
    let f = |k: &str| g.get(k).and_then(Value::as_f64).unwrap_or_else(|| panic!("no float {k}"));
    assert_eq!(g.get("general.architecture").and_then(Value::as_str), Some("llama"));
    assert_eq!(u("llama.block_count"), 30);
    assert_eq!(u("llama.embedding_length"), 576);
    assert_eq!(u("llama.feed_forward_length"), 1536);
    assert_eq!(u("llama.attention.head_count"), 9);
    assert_eq!(u("llama.attention.head_count_kv"), 3);
    assert_eq!(u("llama.context_length"), 8192);
    assert_eq!(f("llama.rope.freq_base"), 100000.0);
    assert!((f("llama.attention.layer_norm_rms_epsilon") - 1e-5).abs() < 1e-9);
    assert_eq!(g.get("tokenizer.ggml.model").and_then(Value::as_str), Some("gpt2"));
    let strings = |k: &str| g.get(k).and_then(Value::as_array).and_then(Array::strings).unwrap();
    let tokens = strings("tokenizer.ggml.tokens");
    assert_eq!(tokens.len(), 49152);
    assert_eq!(tokens.get(2), Some("<|im_end|>"));
    let merges = strings("tokenizer.ggml.merges");
    assert_eq!(merges.len(), 48900);
    assert!(merges.iter().all(|m| m.split(' ').count() == 2));
    // Packed, the metadata and index take about what they take in the file.
    let header = g.data_offset as usize;
    assert!(g.heap_bytes() < 2 * header, "{} bytes parsed from a {header}-byte header", g.heap_bytes());
    assert_eq!(u("tokenizer.ggml.eos_token_id"), 2);
    let template = g.get("tokenizer.chat_template").and_then(Value::as_str).unwrap();
    assert!(template.contains("<|im_start|>"), "{template}");
}

#[test]
fn the_guest_gets_the_metadata_as_json_and_the_tensors_load_on_the_device() {
    let Some(path) = llm_gguf() else { return };
    let account = MemoryAccount::new("weights", None, None);
    let set = ArtifactSet::new(HashMap::from([("model".to_owned(), path.clone())]), account.clone());
    let json: serde_json::Value = serde_json::from_str(&set.metadata("model", 64 << 20).unwrap()).unwrap();
    assert_eq!(json["llama.block_count"], 30);
    assert_eq!(json["tokenizer.ggml.tokens"].as_array().unwrap().len(), 49152);
    assert_eq!(json["tokenizer.ggml.merges"][0].as_str().map(|m| m.contains(' ')), Some(true));
    let e = set.metadata("model", 1000).unwrap_err();
    assert!(e.message.contains("more than the 1000"), "{e:?}");

    let queue = DeviceQueue::start(Box::new(CpuDevice::with_threads(1)));
    let (bytes, g) = parse(&path);
    let (lease, meta) = set.load_tensor(&queue, "model", "blk.7.ffn_norm.weight", None).unwrap();
    assert_eq!(meta.shape, vec![576]);
    let want = g.data(&bytes, g.tensor("blk.7.ffn_norm.weight").unwrap());
    assert_eq!(queue.read_blocking(lease.id(), meta).unwrap(), want);
    // A Q4_1 weight stays quantized on the device: 1536 × 576 elements in 20-byte blocks.
    let (lease, meta) = set.load_tensor(&queue, "model", "blk.0.ffn_up.weight", None).unwrap();
    assert_eq!((meta.dtype, meta.shape.clone(), meta.byte_len()), (DType::Q4_1, vec![1536, 576], 1536 * 18 * 20));
    let info = g.tensor("blk.0.ffn_up.weight").unwrap();
    assert_eq!(queue.read_blocking(lease.id(), meta).unwrap(), g.data(&bytes, info));
    // The Q8_0 embedding asked for as f32 is dequantized on the device at load.
    let (lease, meta) = set.load_tensor(&queue, "model", "token_embd.weight", Some(DType::F32)).unwrap();
    assert_eq!((meta.dtype, meta.shape.clone()), (DType::F32, vec![49152, 576]));
    let f32s = queue.read_blocking(lease.id(), meta).unwrap();
    let row1: Vec<f32> =
        f32s[576 * 4..2 * 576 * 4].chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    // Row 1 starts at block 18 (576 / 32 blocks per row).
    let block = &g.data(&bytes, g.tensor("token_embd.weight").unwrap())[18 * 34..19 * 34];
    let d = half_f16(block[0], block[1]);
    for j in 0..32 {
        assert_eq!(row1[j], d * f32::from(block[2 + j] as i8), "element {j}");
    }
    assert_eq!(account.used() as usize, 576 * 4 + 1536 * 18 * 20 + 49152 * 576 * 4);
    let Err(e) = set.load_tensor(&queue, "model", "no.such.weight", None) else { panic!("loaded a missing tensor") };
    assert!(e.message.contains("no tensor named"), "{e:?}");
    let Err(e) = set.load_tensor(&queue, "model", "blk.0.ffn_up.weight", Some(DType::F16)) else {
        panic!("cast a block format to f16")
    };
    assert!(e.message.contains("block"), "{e:?}");
}

/// The elements of a Q4_1 or Q8_0 tensor's bytes, decoded here from the format's
/// definition (see `DType::Q4_1`), in f64.
fn dequantize(dtype: DType, bytes: &[u8]) -> Vec<f64> {
    let mut out = Vec::new();
    match dtype {
        DType::Q4_1 => {
            for b in bytes.chunks_exact(20) {
                let (d, m) = (f64::from(half_f16(b[0], b[1])), f64::from(half_f16(b[2], b[3])));
                out.extend(b[4..20].iter().map(|&q| d * f64::from(q & 15) + m));
                out.extend(b[4..20].iter().map(|&q| d * f64::from(q >> 4) + m));
            }
        }
        DType::Q8_0 => {
            for b in bytes.chunks_exact(34) {
                let d = f64::from(half_f16(b[0], b[1]));
                out.extend(b[2..34].iter().map(|&q| d * f64::from(q as i8)));
            }
        }
        other => panic!("{other} is not a block format"),
    }
    out
}

/// Activations as a quantized linear multiplies them (the host API's `linear-args`): per
/// block of 32 the scale `d = max|x| / 127` and each value `d · q`, `q` the nearest
/// integer to `x · (1 / d)` (ties to even), computed in f32 as the host does.
fn q8_blocks(x: &[f32]) -> Vec<f64> {
    x.chunks(32)
        .flat_map(|block| {
            let d = block.iter().map(|v| v.abs()).fold(0.0f32, f32::max) / 127.0;
            let inverse = if d == 0.0 { 0.0 } else { 1.0 / d };
            block.iter().map(move |&v| f64::from(d) * f64::from((v * inverse).round_ties_even()))
        })
        .collect()
}

#[test]
fn a_guest_reads_the_metadata_and_runs_linears_on_quantized_weights() {
    use sluice_runtime::engine::{Engine, EngineConfig, FunctionLimits, InvocationContext, IoData, IoTensor};
    use sluice_runtime::scheduler::{PriorityClass, SchedulingInfo};

    let Some(path) = llm_gguf() else { return };
    let (bytes, g) = parse(&path);
    let engine = Engine::new(EngineConfig::default()).unwrap();
    let queue = DeviceQueue::start(Box::new(CpuDevice::with_threads(2)));
    let component = engine.compile(&sluice_tests::function_wasm("gguf_probe")).unwrap();
    let weights = MemoryAccount::new("weights", None, None);
    let set = ArtifactSet::new(HashMap::from([("model".to_owned(), path.clone())]), weights.clone());
    let image = engine.prepare("gguf-probe", &component, set, FunctionLimits::default()).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let m = 2usize;
    let x: Vec<f32> = (0..m * 576).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
    for (name, dtype) in [
        ("blk.0.ffn_up.weight", DType::Q4_1),
        ("blk.29.attn_k.weight", DType::Q4_1),
        ("token_embd.weight", DType::Q8_0),
    ] {
        let info = g.tensor(name).unwrap();
        let n = info.shape()[0] as usize;
        let inputs = vec![
            IoTensor { name: "tensor".into(), shape: vec![1], data: IoData::Bytes(vec![name.as_bytes().to_vec()]) },
            IoTensor { name: "x".into(), shape: vec![m as u64, 576], data: IoData::F32(x.clone()) },
        ];
        let scheduling = SchedulingInfo {
            tenant: "t".into(),
            function: "gguf-probe".into(),
            class: PriorityClass::Latency,
            weight: 1,
        };
        let account = MemoryAccount::new("inv", None, None);
        let ctx = InvocationContext {
            queue: queue.clone(),
            account: account.clone(),
            scheduling,
            timeout: None,
            caller: Default::default(),
            serving: None,
        };
        let out = rt.block_on(engine.invoke(&image, ctx, &inputs)).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(account.used(), 0, "{name}: the cache and its writes are given back");
        assert_eq!(out.launches, 5, "{name}: the linear, two slices and two writes; a reshape is a view, no kernel");
        let find = |n: &str| &out.outputs.iter().find(|t| t.name == n).unwrap_or_else(|| panic!("no output {n}")).data;
        let IoData::Bytes(d) = find("dtype") else { panic!("dtype is not BYTES") };
        assert_eq!(d[0], dtype.name().as_bytes(), "{name} stays quantized on the device");
        let IoData::Bytes(meta) = find("metadata") else { panic!("metadata is not BYTES") };
        let json: serde_json::Value = serde_json::from_slice(&meta[0]).unwrap();
        assert_eq!(
            (json["llama.attention.head_count_kv"].as_u64(), json["tokenizer.ggml.tokens"][2].as_str()),
            (Some(3), Some("<|im_end|>"))
        );
        // The KV cache: x's rows written in place at 2.. and x's first row at 5; the
        // weight and an op's output cannot be written.
        let IoData::F32(cache) = find("cache") else { panic!("cache is not FP32") };
        let mut want = vec![0.0f32; 6 * 192];
        for r in 0..m {
            want[(2 + r) * 192..(3 + r) * 192].copy_from_slice(&x[r * 576..r * 576 + 192]);
        }
        want[5 * 192..].copy_from_slice(&x[..192]);
        assert_eq!(cache, &want, "{name}: the cache after its writes");
        let IoData::Bytes(refusals) = find("refusals") else { panic!("refusals is not BYTES") };
        assert_eq!(refusals.len(), 4);
        for (r, what) in refusals.iter().zip([
            "a write into a weight",
            "a write into a view",
            "a kv-attention into a weight",
            "a kv-attention given one cache twice",
        ]) {
            assert_eq!(String::from_utf8_lossy(r), "Some(InvalidArgument)", "{name}: {what}");
        }
        let IoData::F32(y) = find("y") else { panic!("y is not FP32") };
        assert_eq!(y.len(), m * n);
        // Against dequantize-then-f64, with x as the linear multiplies it (its Q8
        // blocks); the bound scales with the sum of |terms|.
        let w = dequantize(dtype, g.data(&bytes, info));
        let xq = q8_blocks(&x);
        for (i, &got) in y.iter().enumerate() {
            let (r, c) = (i / n, i % n);
            let terms = (0..576).map(|p| xq[r * 576 + p] * w[c * 576 + p]);
            let (want, mag) = terms.fold((0.0, 0.0), |(s, a), t| (s + t, a + t.abs()));
            assert!((f64::from(got) - want).abs() <= 1e-5 * mag.max(1e-3), "{name}[{r}, {c}]: got {got}, want {want}");
        }
    }
    // The quantized weights are charged at their quantized size.
    let quantized: usize = ["blk.0.ffn_up.weight", "blk.29.attn_k.weight", "token_embd.weight"]
        .iter()
        .map(|n| g.tensor(n).unwrap().byte_len as usize)
        .sum();
    assert_eq!(weights.used() as usize, quantized);
}
