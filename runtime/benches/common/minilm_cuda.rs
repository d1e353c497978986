//! The CUDA run of the MiniLM benchmark (`SLUICE_BENCH_DEVICE=cuda`); see the header of
//! `minilm.rs`, which includes this file (it is not shared with the other benchmarks).

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_runtime::device::DeviceChoice;
use sluice_runtime::engine::{FunctionImage, InvocationOutput, IoData};

use super::common::{self, ms, print_rows};
use super::http::HttpBench;
use super::{Bench, HIDDEN, MIN_COSINE, cosine};

/// Precisions and batch sizes of the CUDA run (every row the same 128-token text).
const GPU_PRECISIONS: [&str; 2] = ["f32", "f16"];
const GPU_BATCHES: [usize; 3] = [1, 8, 32];
const CASE_SECONDS: Duration = Duration::from_secs(15);

/// The CUDA run (see the file header); returns the exit status.
pub fn cuda_main(reference: &Value, choice: DeviceChoice) -> i32 {
    let runs = common::env_usize("SLUICE_BENCH_RUNS", 100).max(1);
    let warmup = common::env_usize("SLUICE_BENCH_WARMUP", 10);
    let gpu_device = common::open("minilm bench", choice, None); // first: fails fast without a GPU
    // The text and the reference embedding come from the CPU device (the tokenizer is
    // the same on every device), so a CUDA failure costs only the cases it hits.
    let cpu = Bench::new(common::open("minilm bench", DeviceChoice::Cpu, None));
    let cpu_image = cpu.prepare();
    let records = reference["records"].as_array().expect("records");
    let long = records
        .iter()
        .find(|r| r["input_ids_max_len_128"].as_array().is_some_and(|a| a.len() == 128))
        .expect("a record with input_ids_max_len_128");
    let text = cpu.fit_prefix(&cpu_image, long["text"].as_str().expect("text"), 128);
    let ids = cpu.token_ids(&cpu_image, &text);
    eprintln!("minilm bench: the text tokenizes to {} tokens", ids.len());
    // The CPU device's f32 embedding of the same text and weights: the reference.
    let want: Vec<f64> = embedding(&cpu.invoke(&cpu_image, std::slice::from_ref(&text), false))
        .map(|e| e[..HIDDEN].iter().map(|&x| f64::from(x)).collect())
        .expect("the CPU device's embedding");
    drop((cpu_image, cpu));

    let gpu = Bench::new(gpu_device);
    let info = gpu.queue.info().clone();
    let image = gpu.prepare();

    let mut rows = vec![
        ["precision", "batch", "p50", "p99", "mean", "sent/s", "launches/inv", "cos vs CPU f32", "check"]
            .map(String::from)
            .to_vec(),
    ];
    let (mut failed, mut dump) = (false, json!({ "text": text, "input_ids": ids, "cpu_f32": want }));
    write_dump(&dump);
    for precision in GPU_PRECISIONS {
        for batch in GPU_BATCHES {
            eprintln!("minilm bench: {} {precision} batch {batch} ({runs} runs) …", info.name);
            let texts = vec![text.clone(); batch];
            let record = match gpu_case(&gpu, &image, &texts, precision, (warmup, runs), &want) {
                Ok((record, first_row)) => {
                    if batch == 1 {
                        dump[precision] = json!(first_row);
                        write_dump(&dump);
                    }
                    record
                }
                Err(e) => json!({ "error": e, "ok": false }),
            };
            let mut record = record;
            record["bench"] = json!("sluice-minilm");
            record["device"] = json!(info.name);
            record["precision"] = json!(precision);
            record["batch"] = json!(batch);
            record["seq"] = json!(ids.len());
            println!("{record}");
            let ok = record["ok"].as_bool().unwrap_or(false);
            failed |= !ok;
            let num = |k: &str, digits: usize| record[k].as_f64().map_or("—".to_owned(), |v| format!("{v:.digits$}"));
            rows.push(vec![
                precision.to_owned(),
                batch.to_string(),
                format!("{} ms", num("p50_ms", 3)),
                format!("{} ms", num("p99_ms", 3)),
                format!("{} ms", num("mean_ms", 3)),
                num("sentences_per_s", 0),
                num("launches", 1),
                num("min_cosine", 6),
                if ok { "ok".into() } else { record["error"].as_str().unwrap_or("FAILED").chars().take(80).collect() },
            ]);
        }
    }
    write_dump(&dump);
    drop((image, gpu));

    // The same text over HTTP, batch 1, on a fresh device behind a server in this process.
    let mut http_rows = vec![
        ["precision", "batch", "client p50", "client p99", "server p50", "cos vs CPU f32", "check"]
            .map(String::from)
            .to_vec(),
    ];
    match HttpBench::start(common::open("minilm bench (HTTP)", choice, None)) {
        Err(e) => {
            failed = true;
            println!("{}", json!({ "bench": "sluice-minilm-http", "ok": false, "error": format!("{e:#}") }));
            http_rows.push(vec!["—".into(), "1".into(), format!("server failed: {e:#}")]);
        }
        Ok(http) => {
            for precision in GPU_PRECISIONS {
                eprintln!("minilm bench: over HTTP, {precision} batch 1 ({runs} runs) …");
                let mut record = http.case(&text, precision, (warmup, runs), &want);
                record["bench"] = json!("sluice-minilm-http");
                record["device"] = json!(info.name);
                record["precision"] = json!(precision);
                record["batch"] = json!(1);
                record["seq"] = json!(ids.len());
                println!("{record}");
                let ok = record["ok"].as_bool().unwrap_or(false);
                failed |= !ok;
                let num =
                    |k: &str, digits: usize| record[k].as_f64().map_or("—".to_owned(), |v| format!("{v:.digits$}"));
                http_rows.push(vec![
                    precision.to_owned(),
                    "1".into(),
                    format!("{} ms", num("p50_ms", 3)),
                    format!("{} ms", num("p99_ms", 3)),
                    format!("{} ms", num("server_p50_ms", 3)),
                    num("min_cosine", 6),
                    if ok {
                        "ok".into()
                    } else {
                        record["error"].as_str().unwrap_or("FAILED").chars().take(80).collect()
                    },
                ]);
            }
        }
    }
    println!();
    println!(
        "MiniLM-L6 shape (weights from {}) through sluice on {} ({} SMs, {} GiB): {} tokens per row, \
         whole invocations in-process (tokenizer in the guest included), {runs} runs after {warmup} warm-up",
        common::model_dir().display(),
        info.name,
        info.compute_units,
        info.memory_bytes >> 30,
        ids.len(),
    );
    println!("the NumPy comparison is CPU-only; on the GPU PyTorch is the baseline (bench/gpu/minilm_torch.py)");
    println!();
    print_rows(&rows);
    println!();
    println!("over HTTP (OIP /v2/models/minilm-embed/infer, one keep-alive client on loopback, JSON both ways):");
    print_rows(&http_rows);
    i32::from(failed)
}

/// One CUDA case: check, warm up, time. Returns its JSON record and the first row's
/// embedding, or why it failed.
fn gpu_case(
    bench: &Bench,
    image: &FunctionImage,
    texts: &[String],
    precision: &str,
    (warmup, runs): (usize, usize),
    want: &[f64],
) -> Result<(Value, Vec<f32>), String> {
    let out = bench.try_invoke(image, texts, Some(precision), false)?;
    let got = embedding(&out).ok_or("no FP32 output `embedding`")?;
    if got.len() != texts.len() * HIDDEN {
        return Err(format!("embedding has {} values, expected {}", got.len(), texts.len() * HIDDEN));
    }
    let first = got[..HIDDEN].to_vec();
    let first_f64: Vec<f64> = first.iter().map(|&x| f64::from(x)).collect();
    let min_cosine = cosine(&first, want);
    let rows_agree = got.chunks(HIDDEN).map(|row| cosine(row, &first_f64)).fold(f64::INFINITY, f64::min);
    let bound = if precision == "f32" { MIN_COSINE } else { 0.995 };
    let mut problems = Vec::new();
    if !got.iter().all(|x| x.is_finite()) {
        problems.push("non-finite values".to_owned());
    }
    if min_cosine.is_nan() || min_cosine < bound {
        problems.push(format!("cosine {min_cosine:.6} to the CPU's f32 < {bound}"));
    }
    if rows_agree.is_nan() || rows_agree < 0.9999 {
        problems.push(format!("rows of the batch differ (cosine {rows_agree:.6})"));
    }

    for _ in 0..warmup {
        bench.try_invoke(image, texts, Some(precision), false)?;
    }
    // At most CASE_SECONDS of timed runs (at least 5), so a slow case cannot eat the others' time.
    let (mut walls, mut launches, mut instantiate) = (Vec::with_capacity(runs), 0u64, Duration::ZERO);
    let series = Instant::now();
    while walls.len() < runs && (walls.len() < 5 || series.elapsed() < CASE_SECONDS) {
        let t0 = Instant::now();
        let out = bench.try_invoke(image, texts, Some(precision), false)?;
        walls.push(ms(t0.elapsed()));
        launches += out.launches;
        instantiate += out.instantiate;
    }
    let runs = walls.len();
    let mean = walls.iter().sum::<f64>() / runs as f64;
    walls.sort_by(f64::total_cmp);
    let p50 = common::percentile(&walls, 0.5);
    let record = json!({
        "ok": problems.is_empty(),
        "error": (!problems.is_empty()).then(|| problems.join("; ")),
        "runs": runs,
        "p50_ms": p50,
        "p99_ms": common::percentile(&walls, 0.99),
        "mean_ms": mean,
        "min_ms": walls[0],
        "sentences_per_s": texts.len() as f64 * 1e3 / p50,
        "launches": launches as f64 / runs as f64,
        "instantiate_us": instantiate.as_secs_f64() * 1e6 / runs as f64,
        "min_cosine": min_cosine,
        "rows_min_cosine": rows_agree,
    });
    Ok((record, first))
}

/// Writes `dump` to `$SLUICE_BENCH_DUMP` (if set): after each batch-1 case, so a run
/// stopped by its time limit still leaves the PyTorch side what it has.
fn write_dump(dump: &Value) {
    if let Some(path) = std::env::var_os("SLUICE_BENCH_DUMP")
        && let Err(e) = std::fs::write(&path, dump.to_string())
    {
        eprintln!("minilm bench: writing {}: {e}", Path::new(&path).display());
    }
}

fn embedding(out: &InvocationOutput) -> Option<&[f32]> {
    match &out.outputs.iter().find(|t| t.name == "embedding")?.data {
        IoData::F32(v) => Some(v),
        _ => None,
    }
}
