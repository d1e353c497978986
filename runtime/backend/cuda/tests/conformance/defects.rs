//! Regression tests for the GPU defects of issue 11 that a run on the fake CUDA device
//! shows: row kernels launched with up to 1024 threads without `__launch_bounds__`
//! (defect 3: the fake lets a kernel without a bound have 256 threads a block, as many as
//! surely fit if it needs 255 registers a thread), f16 attention whose raw scores overflow f16 (defect 6), and data-dependent
//! faults (an embedding id out of range, an integer division by zero) that the CPU
//! backend reports as errors and the GPU must report too (defect 7). Defect 4 (cuBLAS on
//! a green-context lane without an SM-count target) is shown by
//! `rows_and_lanes::partitioned_lanes_match_the_cpu_backend`: the fake cuBLAS refuses a
//! GEMM on a green-context stream whose handle's target is unset or larger than the
//! green context.
//!
//! Defect 5 (scratch memory not charged to the quota): the backend predicts each op's
//! scratch ([`sluice_backend_cuda::scratch_bytes`]) for the host to charge, checked here
//! against what the op takes from the pool.

use sluice_backend_cpu::CpuBuffer;
use sluice_backend_cuda::alloc::bucket_size;
use sluice_backend_cuda::{CudaBuffer, CudaDevice, CudaOptions, scratch_bytes};
use sluice_host_api::{BinaryOp, Conv2dArgs, DType, KvAttentionArgs, KvSpan, MatmulArgs, Op, TensorMeta, infer};

use super::{compare, device};

fn meta(d: DType, shape: &[u32]) -> TensorMeta {
    TensorMeta::new(d, shape.to_vec()).unwrap()
}

/// Runs `op` on the GPU over host inputs given as f32 values in `dtypes`.
fn on_gpu(dev: &CudaDevice, op: &Op, inputs: &[(&[f32], &TensorMeta)]) -> Result<CpuBuffer, String> {
    let metas: Vec<&TensorMeta> = inputs.iter().map(|(_, m)| *m).collect();
    let out = infer(op, &metas).unwrap();
    let bufs: Vec<CudaBuffer> = inputs
        .iter()
        .map(|(v, m)| dev.upload(m, &CpuBuffer::from_f32_as(m.dtype, v).to_le_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let args: Vec<(&CudaBuffer, &TensorMeta)> = bufs.iter().zip(metas.iter().copied()).collect();
    let y = dev.launch(op, &args, &out).map_err(|e| e.to_string())?;
    let bytes = dev.download(&y, &out).map_err(|e| e.to_string())?;
    Ok(CpuBuffer::from_le_bytes(out.dtype, &bytes))
}

/// Runs `op` on the CPU backend over the same kind of inputs.
fn on_cpu(op: &Op, inputs: &[(&[f32], &TensorMeta)]) -> Result<CpuBuffer, String> {
    let metas: Vec<&TensorMeta> = inputs.iter().map(|(_, m)| *m).collect();
    let out = infer(op, &metas).unwrap();
    let host: Vec<CpuBuffer> = inputs.iter().map(|(v, m)| CpuBuffer::from_f32_as(m.dtype, v)).collect();
    let args: Vec<(&CpuBuffer, &TensorMeta)> = host.iter().zip(metas.iter().copied()).collect();
    sluice_backend_cpu::launch(op, &args, &out).map_err(|e| e.to_string())
}

/// Defect 3: every row kernel (softmax, layer norm, add-layer-norm, a row reduction)
/// on rows of 1000 elements, one 1024-thread block a row, matches the CPU backend. Without
/// `__launch_bounds__(ROW_THREADS)` the launch fails with "too many resources".
#[test]
fn row_kernels_launch_1024_thread_blocks() {
    let Some(dev) = device() else { return };
    let len = 1000u32;
    let x: Vec<f32> = (0..3 * len).map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0).collect();
    let g: Vec<f32> = (0..len).map(|i| 1.0 + (i % 7) as f32 / 8.0).collect();
    let b: Vec<f32> = (0..len).map(|i| (i % 5) as f32 / 4.0 - 0.5).collect();
    let (xm, vm) = (meta(DType::F32, &[3, len]), meta(DType::F32, &[len]));
    let sum = Op::Reduce(sluice_host_api::ReduceArgs { op: sluice_host_api::ReduceOp::Sum, axis: 1, keep_dim: false });
    type Inputs<'a> = Vec<(&'a [f32], &'a TensorMeta)>;
    let cases: Vec<(Op, Inputs)> = vec![
        (Op::Softmax { scale: 0.5 }, vec![(&x, &xm)]),
        (Op::LayerNorm { eps: 1e-5 }, vec![(&x, &xm), (&g, &vm), (&b, &vm)]),
        (Op::AddLayerNorm { eps: 1e-5 }, vec![(&x, &xm), (&x, &xm), (&g, &vm), (&b, &vm)]),
        (sum, vec![(&x, &xm)]),
    ];
    for (op, inputs) in cases {
        let got = on_gpu(dev, &op, &inputs).unwrap_or_else(|e| panic!("{}: {e}", op.name()));
        let want = on_cpu(&op, &inputs).unwrap();
        compare(DType::F32, len as u64, &got, &want).unwrap_or_else(|e| panic!("{}: {e}", op.name()));
    }
}

/// Defect 6: raw `q·k` of 80000 to 96000 (beyond f16's 65504) scaled by 1/16000 to
/// scores of 5 to 6. Stored raw, the f16 scores are inf and the softmax NaN; with the
/// scale as the GEMM's alpha they are moderate. The reference is the CPU backend on the
/// same (f16-exact) values in f32. One batch element (strided GEMMs over the heads) and
/// two (pointer-array GEMMs).
#[test]
fn f16_attention_with_raw_scores_beyond_f16_matches_f32() {
    let Some(dev) = device() else { return };
    let (heads, d, sq, sk) = (2u32, 4u32, 2u32, 3u32);
    let e = heads * d;
    let scale = 1.0 / 16000.0;
    for b in [1u32, 2] {
        // q rows ±200, k row j = 100 + 10j (+1 per head), v small and distinct.
        let q: Vec<f32> =
            (0..b * sq * e).map(|i| if (i / e) % 2 == 0 { 200.0 } else { -200.0 } + (i % d) as f32).collect();
        let k: Vec<f32> = (0..b * sk * e).map(|i| 100.0 + 10.0 * ((i / e) % sk) as f32 + (i % e / d) as f32).collect();
        let v: Vec<f32> = (0..b * sk * e).map(|i| ((i * 7) % 11) as f32 * 0.25 - 1.0).collect();
        let op = Op::Attention { heads, scale };
        let shapes = [[b, sq, e], [b, sk, e], [b, sk, e]];
        let f16: Vec<TensorMeta> = shapes.iter().map(|s| meta(DType::F16, s)).collect();
        let f32m: Vec<TensorMeta> = shapes.iter().map(|s| meta(DType::F32, s)).collect();
        let got = on_gpu(dev, &op, &[(&q, &f16[0]), (&k, &f16[1]), (&v, &f16[2])]).unwrap();
        let want = on_cpu(&op, &[(&q, &f32m[0]), (&k, &f32m[1]), (&v, &f32m[2])]).unwrap();
        let want = CpuBuffer::from_f32_as(DType::F16, &want.to_f32_vec());
        compare(DType::F16, d.max(sk) as u64, &got, &want).unwrap_or_else(|err| panic!("batch {b}: {err}"));
    }
}

/// Defect 7: an embedding id outside the table is an error on both backends (the GPU
/// used to return a row of zeros), for both id dtypes; in-range ids still work after it.
#[test]
fn embedding_id_out_of_range_is_an_error_on_both_backends() {
    let Some(dev) = device() else { return };
    let table: Vec<f32> = (0..5 * 3).map(|i| i as f32).collect();
    let tm = meta(DType::F32, &[5, 3]);
    for ids_dtype in [DType::I32, DType::I64] {
        let im = meta(ids_dtype, &[4]);
        for bad in [5.0f32, -1.0] {
            let ids = [0.0, 4.0, bad, 1.0];
            let cpu = on_cpu(&Op::Embedding, &[(&table, &tm), (&ids, &im)]);
            let gpu = on_gpu(dev, &Op::Embedding, &[(&table, &tm), (&ids, &im)]);
            let cpu_err = cpu.expect_err("the CPU backend refuses the id");
            let gpu_err = gpu.map(|g| g.to_f32_vec()).expect_err("the GPU must refuse the id too");
            assert!(cpu_err.contains("embedding id") && gpu_err.contains("embedding id"), "{cpu_err} / {gpu_err}");
            assert!(gpu_err.contains(&format!("{bad}")), "the GPU error names the id: {gpu_err}");
        }
        let ids = [4.0, 0.0, 2.0, 2.0];
        let got = on_gpu(dev, &Op::Embedding, &[(&table, &tm), (&ids, &im)]).expect("in-range ids work after a fault");
        let want = on_cpu(&Op::Embedding, &[(&table, &tm), (&ids, &im)]).unwrap();
        compare(DType::F32, 1, &got, &want).unwrap();
    }
}

/// Defect 7: integer division by zero is an error on both backends (the GPU used to
/// return 0), for every integer dtype; a division without a zero still works after it.
#[test]
fn integer_division_by_zero_is_an_error_on_both_backends() {
    let Some(dev) = device() else { return };
    let op = Op::Binary(BinaryOp::Div);
    for dt in DType::ALL.into_iter().filter(|d| !d.is_float()) {
        let m = meta(dt, &[4]);
        let (a, zero, ok) = ([7.0f32, 8.0, 9.0, 10.0], [1.0f32, 2.0, 0.0, 3.0], [1.0f32, 2.0, 4.0, 3.0]);
        if infer(&op, &[&m, &m]).is_err() {
            continue;
        }
        let cpu_err = on_cpu(&op, &[(&a, &m), (&zero, &m)]).expect_err("the CPU backend refuses");
        let gpu_err =
            on_gpu(dev, &op, &[(&a, &m), (&zero, &m)]).map(|g| g.to_f32_vec()).expect_err("the GPU must refuse too");
        assert!(cpu_err.contains("division by zero") && gpu_err.contains("division by zero"), "{cpu_err} / {gpu_err}");
        let got = on_gpu(dev, &op, &[(&a, &m), (&ok, &m)]).expect("a division without zero works after a fault");
        compare(dt, 1, &got, &on_cpu(&op, &[(&a, &m), (&ok, &m)]).unwrap()).unwrap();
    }
}

/// Defect 5: for every op that takes scratch (attention with one and several batch
/// elements, kv-attention's table, a matmul with partially broadcast operands, a grouped
/// convolution, an integer division, an embedding) and some that take none, [`scratch_bytes`] is exactly
/// what the op takes from the pool besides its output, measured on a device of its own
/// (so no other test's buffers count).
#[test]
fn scratch_bytes_are_what_an_op_takes_besides_its_output() {
    let Some(_) = device() else { return };
    let dev = CudaDevice::open(CudaOptions::default()).expect("a second handle on the device");
    let conv = Conv2dArgs { stride: (2, 1), padding: (1, 0), dilation: (1, 2), groups: 2 };
    let att = |heads| Op::Attention { heads, scale: 0.5 };
    let f = DType::F32;
    // Two spans (a decode step and a prompt of 3): the table of spans and rows.
    let spans = vec![KvSpan { rows: 1, position: 5 }, KvSpan { rows: 3, position: 0 }];
    let kv = Op::KvAttention(Box::new(KvAttentionArgs { rope_base: 1e4, scale: 0.5, spans }));
    let kv_metas = [&[4, 4, 8][..], &[4, 2, 8], &[4, 2, 8], &[8, 2, 8], &[8, 2, 8], &[3, 2, 8], &[3, 2, 8]]
        .map(|s| meta(f, s))
        .to_vec();
    let cases: Vec<(Op, Vec<TensorMeta>, bool)> = vec![
        (att(2), vec![meta(f, &[1, 5, 8]), meta(f, &[1, 7, 8]), meta(f, &[1, 7, 8])], true),
        (att(3), vec![meta(f, &[2, 3, 12]), meta(f, &[2, 5, 12]), meta(f, &[2, 5, 12]), meta(f, &[2, 1, 1, 5])], true),
        (att(2), vec![meta(DType::F16, &[2, 4, 8]); 3], true),
        (Op::Matmul(MatmulArgs::default()), vec![meta(f, &[2, 1, 3, 17]), meta(f, &[3, 17, 5])], true),
        (Op::Matmul(MatmulArgs::default()), vec![meta(f, &[2, 3, 17]), meta(f, &[17, 5])], false),
        (Op::Conv2d(conv), vec![meta(f, &[2, 4, 7, 6]), meta(f, &[6, 2, 3, 3]), meta(f, &[6])], true),
        (Op::Binary(BinaryOp::Div), vec![meta(DType::I32, &[4]), meta(DType::I32, &[4])], true),
        (Op::Binary(BinaryOp::Div), vec![meta(f, &[4]), meta(f, &[4])], false),
        (Op::Embedding, vec![meta(f, &[11, 7]), meta(DType::I64, &[2, 3])], true),
        (Op::Softmax { scale: 1.0 }, vec![meta(f, &[2, 3, 37])], false),
        (kv, kv_metas, true),
    ];
    for (op, metas, takes_scratch) in cases {
        let refs: Vec<&TensorMeta> = metas.iter().collect();
        let out = infer(&op, &refs).unwrap();
        // Ones: valid ids, non-zero divisors.
        let bufs: Vec<CudaBuffer> = metas
            .iter()
            .map(|m| dev.upload(m, &CpuBuffer::from_f32_as(m.dtype, &vec![1.0; m.numel()]).to_le_bytes()).unwrap())
            .collect();
        let args: Vec<(&CudaBuffer, &TensorMeta)> = bufs.iter().zip(&metas).collect();
        let before = dev.reset_memory_peak();
        let y = dev.launch(&op, &args, &out).unwrap();
        let taken = dev.memory_stats().peak_in_use - before.in_use - bucket_size(out.byte_len()) as u64;
        let predicted = scratch_bytes(&op, &refs, &out);
        let what = format!("{op:?} {:?}", metas.iter().map(|m| &m.shape).collect::<Vec<_>>());
        assert_eq!(predicted, taken, "{what}: predicted scratch vs what the op took from the pool");
        assert_eq!(taken > 0, takes_scratch, "{what}: takes {taken} bytes of scratch");
        dev.download(&y, &out).unwrap();
    }
}
