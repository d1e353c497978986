//! Planted kernel bugs the fake CUDA device must catch (issue 11's mutation check, the
//! kernel half: the GEMM and cross-lane cases need backend hooks and are not here).
//!
//! Runs only on the fake device (`SLUICE_FAKE_CUDA=1` with `target/fakecuda/lib` first on
//! `LD_LIBRARY_PATH`, as `cargo xtask test-cuda-fake` sets up); anywhere else it prints
//! "skipping: ..." and passes. Each case takes the exact source the backend compiles
//! ([`Module::source`]), plants one bug by a textual replacement (which must apply, so a
//! change to the kernels cannot silently turn a case into a no-op), compiles it through
//! the fake NVRTC and runs it through cudarc on inputs with a known answer:
//! - the unmodified source is right under both schedules (so a catch is the bug's doing);
//! - a removed `__syncthreads` in `block_reduce` is right under round robin and wrong
//!   under "lowest thread first" (why the suite runs both schedules);
//! - a wrong shuffle offset gives wrong sums;
//! - an off-by-one loop bound writes past the buffer: an illegal-address launch failure;
//! - a shuffle that half of warp 0 skips deadlocks: a launch failure naming the threads.
//!
//! A launch failure is sticky (it poisons the device, as on a GPU), so those cases run
//! in a child process (this test binary again, with `SLUICE_MUTATION_CHILD` set).

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use sluice_backend_cuda::kernels::Module;
use sluice_backend_cuda::nvrtc_cache::{Target, arch_for, compile_cubin, nvrtc_version};

/// Whether the fake device is the CUDA this process sees; prints why not.
fn on_fake() -> bool {
    let fake = std::env::var("SLUICE_FAKE_CUDA").as_deref() == Ok("1");
    if !fake || sluice_backend_cuda::probe::libraries().check().is_err() {
        eprintln!("skipping: the mutation check runs on the fake CUDA device only (cargo xtask test-cuda-fake)");
        return false;
    }
    true
}

/// `source` with `from` replaced by `to` once; panics if `from` is not there.
fn plant(source: &str, from: &str, to: &str) -> String {
    assert!(source.contains(from), "the kernel source no longer contains {from:?}: update the mutation");
    source.replacen(from, to, 1)
}

/// Sets the fiber schedule of the fake (0 round robin, 1 lowest thread first).
fn set_schedule(schedule: i32) {
    // SAFETY: the fake libcuda exports this hook with this signature; the driver is loaded.
    unsafe {
        let f = cudarc::driver::sys::culib()
            .get::<unsafe extern "C" fn(i32) -> i32>(b"sluice_fake_set_schedule")
            .expect("the fake libcuda has sluice_fake_set_schedule");
        f(schedule);
    }
}

struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
}

fn gpu() -> Gpu {
    let ctx = CudaContext::new(0).expect("fake device 0");
    let stream = ctx.new_stream().expect("stream");
    Gpu { ctx, stream }
}

fn compile(gpu: &Gpu, name: &str, source: &str) -> Arc<cudarc::driver::CudaModule> {
    let target = Target { arch: arch_for(9, 0), driver_version: 13000, nvrtc_version: nvrtc_version().unwrap() };
    let cubin = compile_cubin(name, source, &target).expect("compiles");
    gpu.ctx.load_module(Ptx::from_binary(cubin)).expect("loads")
}

const ROWS: usize = 4;
const LEN: usize = 100;

fn layernorm_input() -> Vec<f32> {
    (0..ROWS * LEN).map(|i| ((i * 37) % 11) as f32 + (i / LEN) as f32 * 5.0).collect()
}

/// Largest error of `layernorm_f32` (gamma 1, beta 0) against an f64 reference, or the
/// driver's error.
fn layernorm_error(gpu: &Gpu, source: &str) -> Result<f64, String> {
    let module = compile(gpu, "layernorm", source);
    let f = module.load_function("layernorm_f32").map_err(|e| format!("{e:?}"))?;
    let s = &gpu.stream;
    let x = layernorm_input();
    let dx = s.clone_htod(&x).map_err(|e| format!("{e:?}"))?;
    let dg = s.clone_htod(&vec![1.0f32; LEN]).map_err(|e| format!("{e:?}"))?;
    let db = s.clone_htod(&vec![0.0f32; LEN]).map_err(|e| format!("{e:?}"))?;
    let mut out = s.alloc_zeros::<f32>(ROWS * LEN).map_err(|e| format!("{e:?}"))?;
    let (rows, len, eps) = (ROWS as u64, LEN as u64, 1e-5f32);
    let cfg = LaunchConfig { grid_dim: (ROWS as u32, 1, 1), block_dim: (128, 1, 1), shared_mem_bytes: 0 };
    let mut b = s.launch_builder(&f);
    b.arg(&dx).arg(&dg).arg(&db).arg(&mut out).arg(&rows).arg(&len).arg(&eps);
    // SAFETY: the arguments match layernorm_f32's signature and sizes.
    unsafe { b.launch(cfg) }.map_err(|e| format!("{e:?}"))?;
    let got = s.clone_dtoh(&out).map_err(|e| format!("{e:?}"))?;
    let mut worst = 0f64;
    for r in 0..ROWS {
        let row = &x[r * LEN..(r + 1) * LEN];
        let mean = row.iter().map(|&v| v as f64).sum::<f64>() / LEN as f64;
        let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / LEN as f64;
        for j in 0..LEN {
            let want = (row[j] as f64 - mean) / (var + 1e-5).sqrt();
            worst = worst.max((want - got[r * LEN + j] as f64).abs());
        }
    }
    Ok(worst)
}

const FIRST_BARRIER: &str = "    __syncthreads();\n    if (lane == 0) shared[warp] = v;";
const BUTTERFLY: &str = "for (int o = 16; o > 0; o >>= 1) v = F::combine(v, __shfl_xor_sync(0xffffffffu, v, o));";

#[test]
fn kernel_mutations_are_caught() {
    if std::env::var_os("SLUICE_MUTATION_CHILD").is_some() || !on_fake() {
        return;
    }
    let gpu = gpu();
    let clean = Module::LayerNorm.source();
    for schedule in [0, 1] {
        set_schedule(schedule);
        let err = layernorm_error(&gpu, &clean).unwrap();
        assert!(err < 1e-4, "the unmodified layer norm is off by {err} under schedule {schedule}");
    }

    let no_barrier = plant(&clean, FIRST_BARRIER, "    if (lane == 0) shared[warp] = v;");
    set_schedule(0);
    let rr = layernorm_error(&gpu, &no_barrier).unwrap();
    set_schedule(1);
    let lowest = layernorm_error(&gpu, &no_barrier).unwrap();
    eprintln!("missing __syncthreads: error {rr:e} round robin, {lowest:e} lowest thread first");
    assert!(rr < 1e-4, "round robin is expected to hide the missing barrier (error {rr})");
    assert!(lowest > 1e-2, "lowest thread first must expose the missing barrier (error {lowest})");

    let wrong_offset = plant(&clean, BUTTERFLY, &BUTTERFLY.replace("o = 16", "o = 8"));
    for schedule in [0, 1] {
        set_schedule(schedule);
        let err = layernorm_error(&gpu, &wrong_offset).unwrap();
        eprintln!("wrong shuffle offset, schedule {schedule}: error {err:e}");
        assert!(err > 1e-2, "a wrong shuffle offset went unnoticed under schedule {schedule}");
    }
    set_schedule(0);

    for case in ["off_by_one", "divergent_shuffle"] {
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args(["sticky_case", "--exact", "--nocapture", "--test-threads=1"])
            .env("SLUICE_MUTATION_CHILD", case)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "child for {case} failed:\n{stderr}");
        let verdict = stderr.lines().find(|l| l.starts_with("mutation ")).unwrap_or("no verdict");
        eprintln!("{verdict}");
        assert!(verdict.ends_with("caught"), "{case}: {stderr}");
    }
}

/// One sticky case (run as a child by `kernel_mutations_are_caught`): prints
/// "mutation <case>: ... caught" when the planted bug failed the launch.
#[test]
fn sticky_case() {
    let Ok(case) = std::env::var("SLUICE_MUTATION_CHILD") else { return };
    let gpu = gpu();
    let result = match case.as_str() {
        "off_by_one" => {
            let source = plant(
                &Module::Unary.source(),
                "i < (u64)(n); i += (u64)blockDim.x * gridDim.x)",
                "i <= (u64)(n); i += (u64)blockDim.x * gridDim.x)",
            );
            let module = compile(&gpu, "unary", &source);
            let f = module.load_function("relu_f32").unwrap();
            // 64 floats: 256 bytes, so the element past the end is on the guard page.
            let x = gpu.stream.clone_htod(&[1.0f32; 64]).unwrap();
            let mut y = gpu.stream.alloc_zeros::<f32>(64).unwrap();
            let n = 64u64;
            let mut b = gpu.stream.launch_builder(&f);
            b.arg(&x).arg(&mut y).arg(&n);
            // SAFETY: matches relu_f32's signature (the planted bug is the point).
            unsafe { b.launch(LaunchConfig::for_num_elems(64)) }.and_then(|_| gpu.stream.synchronize())
        }
        "divergent_shuffle" => {
            let source =
                plant(&Module::LayerNorm.source(), "    if (warp == 0) {", "    if (warp == 0 && lane < 16) {");
            match layernorm_error(&gpu, &source) {
                Ok(err) => {
                    eprintln!("mutation {case}: ran with error {err:e}: missed");
                    return;
                }
                Err(e) => Err(cudarc::driver::DriverError(cudarc::driver::sys::CUresult::CUDA_ERROR_UNKNOWN))
                    .inspect_err(|_| eprintln!("(layer norm failed: {e})")),
            }
        }
        other => panic!("unknown case {other}"),
    };
    match result {
        Ok(()) => eprintln!("mutation {case}: the launch succeeded: missed"),
        Err(e) => eprintln!("mutation {case}: launch failed ({e:?}): caught"),
    }
}
