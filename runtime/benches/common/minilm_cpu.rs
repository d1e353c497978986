//! The CPU MiniLM benchmark's comparisons beyond NumPy: the CPU backend's GEMM
//! throughput at MiniLM's linear shapes next to the machine's measured FMA peak, and
//! the peers a user would compare with, sentence-transformers on PyTorch (eager) and
//! ONNX Runtime's BERT-optimised graph, run by `bench/peers/run.sh` (which sets up their
//! virtual environment) with the same threads and token ids, case by case.
//!
//! `SLUICE_BENCH_PEERS=0` skips the peers (they need PyPI once, for the environment).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_backend_cpu::{CpuBuffer, launch};
use sluice_host_api::{DType, MatmulArgs, Op, TensorMeta, UnaryOp, infer};

use crate::common::print_rows;

/// MiniLM-L6's hidden and feed-forward widths.
const HIDDEN: u32 = 384;
const FFN: u32 = 1536;

/// Peak f32 GFLOP/s of `threads` cores running independent FMAs at the widest vector
/// width the CPU has (AVX-512, else AVX2 + FMA), the best of three 20 ms rounds.
pub fn fma_peak_gflops(threads: usize) -> f64 {
    let round = || {
        let iters = 200_000;
        let t0 = Instant::now();
        let flops: f64 = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads).map(|_| s.spawn(move || fma_loop(iters))).collect();
            handles.into_iter().map(|h| h.join().expect("fma loop")).sum()
        });
        flops / t0.elapsed().as_secs_f64() / 1e9
    };
    (0..3).map(|_| round()).fold(0.0, f64::max)
}

/// Runs `iters` rounds of 16 independent FMA chains; returns the flops done.
fn fma_loop(iters: usize) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F.
            let (sink, lanes) = unsafe { fma_avx512(iters) };
            std::hint::black_box(sink);
            return (iters * 16 * lanes * 2) as f64;
        }
        if is_x86_feature_detected!("fma") && is_x86_feature_detected!("avx") {
            // SAFETY: the CPU has AVX and FMA.
            let (sink, lanes) = unsafe { fma_avx2(iters) };
            std::hint::black_box(sink);
            return (iters * 16 * lanes * 2) as f64;
        }
    }
    let mut acc = [1.0f32; 16];
    for _ in 0..iters {
        for a in acc.iter_mut() {
            *a = a.mul_add(0.999_999, 1e-7);
        }
    }
    std::hint::black_box(acc);
    (iters * 16 * 2) as f64
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn fma_avx512(iters: usize) -> (f32, usize) {
    use std::arch::x86_64::*;
    let (a, b) = (_mm512_set1_ps(0.999_999), _mm512_set1_ps(1e-7));
    let mut acc = [_mm512_set1_ps(1.0); 16];
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm512_fmadd_ps(*x, a, b);
        }
    }
    let mut out = [0.0f32; 16];
    let sum = acc.iter().fold(_mm512_setzero_ps(), |s, &x| _mm512_add_ps(s, x));
    // SAFETY: `out` holds 16 floats.
    unsafe { _mm512_storeu_ps(out.as_mut_ptr(), sum) };
    (out.iter().sum(), 16)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,fma")]
fn fma_avx2(iters: usize) -> (f32, usize) {
    use std::arch::x86_64::*;
    let (a, b) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
    let mut acc = [_mm256_set1_ps(1.0); 16];
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm256_fmadd_ps(*x, a, b);
        }
    }
    let mut out = [0.0f32; 8];
    let sum = acc.iter().fold(_mm256_setzero_ps(), |s, &x| _mm256_add_ps(s, x));
    // SAFETY: `out` holds 8 floats.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), sum) };
    (out.iter().sum(), 8)
}

/// Median time of `op` on the CPU backend over `runs` runs (after one warm-up).
fn time_op(op: &Op, shapes: &[&[u32]], runs: usize) -> Duration {
    let metas: Vec<TensorMeta> = shapes.iter().map(|s| TensorMeta::new(DType::F32, s.to_vec()).unwrap()).collect();
    let bufs: Vec<CpuBuffer> = metas
        .iter()
        .enumerate()
        .map(|(i, m)| {
            CpuBuffer::from_f32((0..m.numel()).map(|j| ((j * 31 + i * 7) % 97) as f32 / 97.0 - 0.5).collect())
        })
        .collect();
    let out = infer(op, &metas.iter().collect::<Vec<_>>()).expect("infer");
    let inputs: Vec<(&CpuBuffer, &TensorMeta)> = bufs.iter().zip(&metas).collect();
    launch(op, &inputs, &out).expect("launch");
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let t0 = Instant::now();
            std::hint::black_box(launch(op, &inputs, &out).expect("launch"));
            t0.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

/// Median time of the `gemm` crate's product `[m, k] · [n, k]ᵀ` over `runs` runs, on
/// `threads` rayon threads, the weight repacked by each call: the CPU backend's GEMM
/// before the panel kernels, for comparison.
fn time_gemm_crate(m: usize, k: usize, n: usize, threads: usize, runs: usize) -> Duration {
    let a: Vec<f32> = (0..m * k).map(|j| (j % 97) as f32 / 97.0 - 0.5).collect();
    let b: Vec<f32> = (0..n * k).map(|j| (j % 89) as f32 / 89.0 - 0.5).collect();
    let mut dst = vec![0.0f32; m * n];
    let parallelism = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
    let mut run = || {
        let t0 = Instant::now();
        // SAFETY: `a` is m × k (row stride k), `b` holds n rows of k (read as k × n with
        // row stride 1, column stride k), `dst` is m × n (row stride n).
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                dst.as_mut_ptr(),
                1,
                n as isize,
                false,
                a.as_ptr(),
                1,
                k as isize,
                b.as_ptr(),
                k as isize,
                1,
                0.0f32,
                1.0f32,
                false,
                false,
                false,
                parallelism,
            );
        }
        t0.elapsed()
    };
    run();
    let mut times: Vec<Duration> = (0..runs).map(|_| run()).collect();
    times.sort();
    times[times.len() / 2]
}

/// Prints the CPU backend's GFLOP/s at MiniLM's linear shapes (the product alone, and
/// the fused linear with bias and activation, its weight packed once) next to the
/// `gemm` crate's per-call product and the measured FMA peak.
pub fn print_gemm_throughput() {
    let threads = rayon::current_num_threads();
    let peak = fma_peak_gflops(threads);
    println!(
        "CPU GEMM at MiniLM's shapes (f32, {threads} rayon threads, vector width {}): GFLOP/s of the product \
         alone (matmul, W transposed, packed per call) and of the fused linear (+ bias, + GELU on the \
         1536-wide one; W packed once), beside the gemm crate's product (W repacked per call; the kernel \
         before the panel GEMM); measured peak {peak:.0} GFLOP/s ({threads} threads of independent FMAs)",
        sluice_backend_cpu::vector_width()
    );
    let mut rows = vec![[
        "m × k × n".to_owned(),
        "gemm crate".into(),
        "% of peak".into(),
        "matmul".into(),
        "% of peak".into(),
        "linear".into(),
        "% of peak".into(),
    ]];
    let shapes = [(HIDDEN, HIDDEN, None), (HIDDEN, FFN, Some(UnaryOp::Gelu)), (FFN, HIDDEN, None)];
    for m in [128u32, 256, 16 * 256] {
        for &(k, n, act) in &shapes {
            let runs = if m > 1024 { 5 } else { 21 };
            let flops = 2.0 * m as f64 * k as f64 * n as f64;
            let mm = Op::Matmul(MatmulArgs { transpose_a: false, transpose_b: true });
            let lin = Op::Linear { transpose_w: true, activation: act };
            let t_mm = time_op(&mm, &[&[m, k], &[n, k]], runs);
            let t_lin = time_op(&lin, &[&[m, k], &[n, k], &[n]], runs);
            let t_crate = time_gemm_crate(m as usize, k as usize, n as usize, threads, runs);
            let gf = |t: Duration| flops / t.as_secs_f64() / 1e9;
            rows.push([
                format!("{m} × {k} × {n}{}", if act.is_some() { " (GELU)" } else { "" }),
                format!("{:.0} GFLOP/s", gf(t_crate)),
                format!("{:.0}%", 100.0 * gf(t_crate) / peak),
                format!("{:.0} GFLOP/s", gf(t_mm)),
                format!("{:.0}%", 100.0 * gf(t_mm) / peak),
                format!("{:.0} GFLOP/s", gf(t_lin)),
                format!("{:.0}%", 100.0 * gf(t_lin) / peak),
            ]);
        }
    }
    print_rows(&rows);
}

/// Runs case `case` of `bench/peers/run.sh`; `None` (with the reason on stderr) when
/// the peers are skipped or cannot run.
pub fn run_peers(root: &Path, case: &str, runs: usize, batch_runs: usize, warmup: usize) -> Option<Value> {
    if std::env::var("SLUICE_BENCH_PEERS").is_ok_and(|v| v == "0") {
        return None;
    }
    let threads = rayon::current_num_threads().to_string();
    eprintln!("minilm bench: peers {case} (bench/peers/run.sh, {threads} threads) …");
    let out = Command::new(root.join("bench/peers/run.sh"))
        .args(["--threads", &threads, "--runs", &runs.to_string(), "--batch-runs", &batch_runs.to_string()])
        .args(["--warmup", &warmup.to_string(), "--cases", case])
        .stderr(Stdio::inherit())
        .output();
    match out {
        Ok(o) if o.status.success() => serde_json::from_slice(&o.stdout).ok(),
        Ok(o) => {
            eprintln!("minilm bench: the peers failed ({}); no peer columns", o.status);
            None
        }
        Err(e) => {
            eprintln!("minilm bench: could not start bench/peers/run.sh ({e}); no peer columns");
            None
        }
    }
}

/// The peers' table: sluice's p50 (from `sluice_ms`, by case name) beside each peer's,
/// with the ratios, the peers' environment above it.
pub fn print_peers(peers: &Value, cases: &[(&str, String, usize, f64)]) {
    println!(
        "peers (bench/peers/run.sh), same run, same token ids, {} threads each: torch {} eager \
         (sentence-transformers {}, CPU capability {}), ONNX Runtime {} on the onnxruntime.transformers \
         BERT-optimised graph (fused: {}); transformers {}, Python {}, OPENBLAS_CORETYPE unset; CPU {} ({})",
        peers["threads"],
        peers["torch"].as_str().unwrap_or("?"),
        peers["sentence_transformers"].as_str().unwrap_or("?"),
        peers["torch_cpu_capability"].as_str().unwrap_or("?"),
        peers["onnxruntime"].as_str().unwrap_or("?"),
        peers["ort_fused_ops"],
        peers["transformers"].as_str().unwrap_or("?"),
        peers["python"].as_str().unwrap_or("?"),
        peers["cpu"].as_str().unwrap_or("?"),
        peers["vector_width"].as_str().unwrap_or("?"),
    );
    let mut rows = vec![[
        "case (p50)".to_owned(),
        "sluice".into(),
        "torch eager".into(),
        "ORT optimised".into(),
        "sluice / torch".into(),
        "sluice / ORT".into(),
        "peers' max abs diff".into(),
    ]];
    for (name, label, batch, sluice_ms) in cases {
        let c = &peers["cases"][*name];
        let p50 = |peer: &str| c[peer]["p50_ms"].as_f64().unwrap_or(f64::NAN);
        let (torch, ort) = (p50("torch_eager"), p50("ort_optimized"));
        let cell = |t: f64| {
            if *batch > 1 { format!("{:.1} sent/s ({t:.0} ms)", *batch as f64 * 1e3 / t) } else { format!("{t:.2} ms") }
        };
        rows.push([
            label.clone(),
            cell(*sluice_ms),
            cell(torch),
            cell(ort),
            format!("{:.2}×", sluice_ms / torch),
            format!("{:.2}×", sluice_ms / ort),
            format!(
                "{:.1e} / {:.1e}",
                c["torch_eager"]["max_abs_diff"].as_f64().unwrap_or(f64::NAN),
                c["ort_optimized"]["max_abs_diff"].as_f64().unwrap_or(f64::NAN)
            ),
        ]);
    }
    print_rows(&rows);
}
