//! The quantized linear of the CPU backend on SmolLM2-135M's shapes, beside the f32
//! linear on the same (dequantized) weights: decode of one sequence (one row) and of
//! eight at once (8 rows), and a prompt (64 rows), for a Q4_1 FFN projection
//! `[1536, 576]` and the Q8_0 output head `[49152, 576]`, on a kernel team of all the
//! cores as the device runs them. Prints the median time of each and the weight bytes
//! streamed per second; asserts nothing about time. `cargo bench -p sluice-backend-cpu
//! --bench quant` (part of `cargo xtask bench`).

use std::time::{Duration, Instant};

use sluice_backend_cpu::{CpuBuffer, Team, launch, vector_width};
use sluice_host_api::{DType, Op, TensorMeta, infer};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Median of `reps` runs of `op` (after two warm-up runs).
fn time(op: &Op, inputs: &[(&CpuBuffer, &TensorMeta)], reps: usize) -> Duration {
    let metas: Vec<&TensorMeta> = inputs.iter().map(|(_, m)| *m).collect();
    let out = infer(op, &metas).expect("valid shapes");
    let mut times = Vec::with_capacity(reps);
    for i in 0..reps + 2 {
        let t = Instant::now();
        std::hint::black_box(launch(op, inputs, &out).expect("runs"));
        if i >= 2 {
            times.push(t.elapsed());
        }
    }
    median(times)
}

fn main() {
    let threads = rayon::current_num_threads();
    let team = Team::new(threads, "bench-team").expect("a kernel team");
    team.enter(|| run(threads));
}

fn run(threads: usize) {
    println!(
        "quantized linear, CPU backend ({} threads, {} vectors); median of runs; GB/s = weight bytes / time",
        threads,
        vector_width()
    );
    println!(
        "{:<34} {:>6} {:>12} {:>9} {:>12} {:>9} {:>8}",
        "weight", "rows", "quantized", "GB/s", "f32", "GB/s", "speed-up"
    );
    let op = Op::Linear { transpose_w: true, activation: None };
    for (name, dtype, n) in
        [("ffn_up Q4_1 [1536, 576]", DType::Q4_1, 1536u32), ("token_embd Q8_0 [49152, 576]", DType::Q8_0, 49152)]
    {
        let k = 576u32;
        let values: Vec<f32> =
            (0..n as usize * k as usize).map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 4000.0).collect();
        let wq = CpuBuffer::from_f32_as(dtype, &values);
        let wq_meta = TensorMeta::new(dtype, vec![n, k]).unwrap();
        let wf = CpuBuffer::from_f32(wq.to_f32_vec());
        let wf_meta = TensorMeta::new(DType::F32, vec![n, k]).unwrap();
        for m in [1u32, 8, 64] {
            let x = CpuBuffer::from_f32((0..(m * k) as usize).map(|i| (i % 13) as f32 / 13.0 - 0.5).collect());
            let x_meta = TensorMeta::new(DType::F32, vec![m, k]).unwrap();
            let reps = if n > 10_000 { 15 } else { 101 };
            let tq = time(&op, &[(&x, &x_meta), (&wq, &wq_meta)], reps);
            let tf = time(&op, &[(&x, &x_meta), (&wf, &wf_meta)], reps);
            let gbs = |bytes: usize, t: Duration| bytes as f64 / t.as_secs_f64() / 1e9;
            println!(
                "{name:<34} {m:>6} {:>10.1}µs {:>9.1} {:>10.1}µs {:>9.1} {:>7.2}×",
                tq.as_secs_f64() * 1e6,
                gbs(wq_meta.byte_len(), tq),
                tf.as_secs_f64() * 1e6,
                gbs(wf_meta.byte_len(), tf),
                tf.as_secs_f64() / tq.as_secs_f64()
            );
        }
    }
}
