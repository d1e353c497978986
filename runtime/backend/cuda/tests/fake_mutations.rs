//! Planted kernel bugs the fake CUDA device must catch (issue 11's mutation check, the
//! kernel half; the bugs planted in the backend's own GEMM planning and lane ordering are
//! the unit test `mutants::tests` of the crate).
//!
//! Runs only on the fake device (`SLUICE_FAKE_CUDA=1` with `target/fakecuda/lib` first on
//! `LD_LIBRARY_PATH`, as `cargo xtask test-cuda-fake` sets up); anywhere else it prints
//! why, records the skip in the run's skip log (`tests/src/skip.rs`) and passes. Each case takes the exact source the backend compiles
//! ([`Module::source`]), plants one bug by a textual replacement (which must apply, so a
//! change to the kernels cannot silently turn a case into a no-op), compiles it through
//! the fake NVRTC and runs it through cudarc on inputs with a known answer:
//! - the unmodified source is right under both schedules (so a catch is the bug's doing);
//! - a removed `__syncthreads` in `block_reduce` is right under round robin and wrong
//!   under "lowest thread first" (why the suite runs both schedules);
//! - a wrong shuffle offset gives wrong sums;
//! - an off-by-one loop bound writes past the buffer: an illegal-address launch failure;
//! - a shuffle that half of warp 0 skips deadlocks: a launch failure naming the threads;
//! - a consumer stream that does not wait for its producer stream reads stale data (the
//!   fake runs a stream's work only when something waits on it), and reads the right
//!   data with the event wait;
//! - a GEMM with a leading dimension smaller than its rows is refused by the fake cuBLAS;
//! - a row kernel without its `__launch_bounds__` is refused a 1024-thread block.
//!
//! A launch failure is sticky (it poisons the device, as on a GPU), so those cases run
//! in a child process (this test binary again, with `SLUICE_MUTATION_CHILD` set).

use std::sync::{Arc, Mutex, MutexGuard};

#[path = "../../../../tests/src/skip.rs"]
mod skip;

use cudarc::driver::{CudaContext, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use sluice_backend_cuda::kernels::Module;
use sluice_backend_cuda::nvrtc_cache::{Target, arch_for, compile_cubin, nvrtc_version};

/// Whether the fake device is the CUDA this process sees; prints why not.
fn on_fake() -> bool {
    let fake = std::env::var("SLUICE_FAKE_CUDA").as_deref() == Ok("1");
    if !fake || sluice_backend_cuda::probe::libraries().check().is_err() {
        skip::skip("CUDA mutation check", "runs on the fake CUDA device only (cargo xtask test-cuda-fake)");
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

/// Held by each test that uses the device in this process. The tests share the primary
/// context, and a free or a module unload on one test's thread runs every stream's queue
/// (the fake's rule: pending work may still use the memory), which would run the
/// producer's copy before the consumer's in the stream-wait case and hide the missing
/// wait (seen in CI: the consumer read the producer's 7s).
static DEVICE: Mutex<()> = Mutex::new(());

fn device_alone() -> MutexGuard<'static, ()> {
    DEVICE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
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

/// Largest error of `layernorm_f32` (gamma 1, beta 0, blocks of `threads`) against an
/// f64 reference, or the driver's error.
fn layernorm_error_with(gpu: &Gpu, source: &str, threads: u32) -> Result<f64, String> {
    let module = compile(gpu, "layernorm", source);
    let f = module.load_function("layernorm_f32").map_err(|e| format!("{e:?}"))?;
    let s = &gpu.stream;
    let x = layernorm_input();
    let dx = s.clone_htod(&x).map_err(|e| format!("{e:?}"))?;
    let dg = s.clone_htod(&vec![1.0f32; LEN]).map_err(|e| format!("{e:?}"))?;
    let db = s.clone_htod(&vec![0.0f32; LEN]).map_err(|e| format!("{e:?}"))?;
    let mut out = s.alloc_zeros::<f32>(ROWS * LEN).map_err(|e| format!("{e:?}"))?;
    let (rows, len, eps) = (ROWS as u64, LEN as u64, 1e-5f32);
    let cfg = LaunchConfig { grid_dim: (ROWS as u32, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 };
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

/// [`layernorm_error_with`] blocks of 128 threads.
fn layernorm_error(gpu: &Gpu, source: &str) -> Result<f64, String> {
    layernorm_error_with(gpu, source, 128)
}

const FIRST_BARRIER: &str = "    __syncthreads();\n    if (lane == 0) shared[warp] = v;";
const BUTTERFLY: &str = "for (int o = 16; o > 0; o >>= 1) v = F::combine(v, __shfl_xor_sync(0xffffffffu, v, o));";

#[test]
fn kernel_mutations_are_caught() {
    if std::env::var_os("SLUICE_MUTATION_CHILD").is_some() || !on_fake() {
        return;
    }
    let _alone = device_alone();
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

    // A row kernel without its `__launch_bounds__` cannot be sure to fit 1024 threads.
    let err = layernorm_error_with(&gpu, &clean, 1024).unwrap();
    assert!(err < 1e-4, "the unmodified layer norm in 1024-thread blocks is off by {err}");
    let unbounded = plant(&clean, "__launch_bounds__(ROW_THREADS) ", "");
    let refused = layernorm_error_with(&gpu, &unbounded, 1024).expect_err("an unbounded 1024-thread launch");
    eprintln!("removed __launch_bounds__: {refused}");
    assert!(refused.contains("LAUNCH_OUT_OF_RESOURCES"), "{refused}");

    // Each caught by the failure it must cause, not by any failure.
    for (case, expected) in
        [("off_by_one", "CUDA_ERROR_ILLEGAL_ADDRESS"), ("divergent_shuffle", "CUDA_ERROR_LAUNCH_FAILED")]
    {
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
        assert!(verdict.ends_with("caught") && verdict.contains(expected), "{case}: {stderr}");
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
            // One block of 64 threads (an unbounded kernel may have at most 256).
            let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (64, 1, 1), shared_mem_bytes: 0 };
            unsafe { b.launch(cfg) }.and_then(|_| gpu.stream.synchronize()).map_err(|e| format!("{e:?}"))
        }
        "divergent_shuffle" => {
            let source =
                plant(&Module::LayerNorm.source(), "    if (warp == 0) {", "    if (warp == 0 && lane < 16) {");
            match layernorm_error(&gpu, &source) {
                Ok(err) => {
                    eprintln!("mutation {case}: ran with error {err:e}: missed");
                    return;
                }
                Err(e) => Err(e),
            }
        }
        other => panic!("unknown case {other}"),
    };
    match result {
        Ok(()) => eprintln!("mutation {case}: the launch succeeded: missed"),
        Err(e) => eprintln!("mutation {case}: launch failed ({e}): caught"),
    }
}

/// Raw driver helpers for the stream and cuBLAS cases (no cudarc slices: they would add
/// the cross-stream waits themselves).
mod raw {
    use cudarc::driver::result;
    use cudarc::driver::sys::{CUdeviceptr, CUevent_flags, CUevent_wait_flags, CUstream};

    pub fn alloc(bytes: usize) -> CUdeviceptr {
        // SAFETY: the fake device is open and its context bound to this thread.
        unsafe { result::malloc_sync(bytes) }.unwrap()
    }

    pub fn upload(dst: CUdeviceptr, v: &[f32], stream: CUstream) {
        // SAFETY: `dst` holds at least `v.len()` floats; pageable memory is staged.
        unsafe { result::memcpy_htod_async(dst, v, stream) }.unwrap()
    }

    pub fn download(src: CUdeviceptr, n: usize, stream: CUstream) -> Vec<f32> {
        let mut v = vec![0f32; n];
        // SAFETY: `src` holds `n` floats; the copy into pageable memory completes first.
        unsafe { result::memcpy_dtoh_async(&mut v, src, stream) }.unwrap();
        // SAFETY: a live stream.
        unsafe { result::stream::synchronize(stream) }.unwrap();
        v
    }

    /// `stream` waits for everything queued on `on` so far.
    pub fn wait(stream: CUstream, on: CUstream) {
        let e = result::event::create(CUevent_flags::CU_EVENT_DISABLE_TIMING).unwrap();
        // SAFETY: live event and streams of the bound context.
        unsafe {
            result::event::record(e, on).unwrap();
            result::stream::wait_event(stream, e, CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT).unwrap();
        }
    }
}

#[test]
fn missing_stream_waits_and_bad_gemm_parameters_are_caught() {
    if std::env::var_os("SLUICE_MUTATION_CHILD").is_some() || !on_fake() {
        return;
    }
    let _alone = device_alone();
    let g = gpu();
    let other = g.ctx.new_stream().unwrap();
    let (producer, consumer) = (g.stream.cu_stream(), other.cu_stream());
    let (buf, out) = (raw::alloc(16), raw::alloc(16));
    // The producer writes `value` on one stream, the consumer copies it on another.
    let run = |value: f32, wait: bool| {
        raw::upload(out, &[0.0; 4], consumer);
        raw::upload(buf, &[value; 4], producer);
        if wait {
            raw::wait(consumer, producer);
        }
        // SAFETY: both buffers hold 16 bytes.
        unsafe { cudarc::driver::result::memcpy_dtod_async(out, buf, 16, consumer) }.unwrap();
        let got = raw::download(out, 4, consumer);
        g.stream.synchronize().unwrap();
        got
    };
    let without = run(7.0, false);
    eprintln!("missing cross-stream wait: the consumer read {without:?} instead of 7s");
    assert!(without.iter().all(|&v| v != 7.0), "a missing cross-stream wait went unnoticed: {without:?}");
    assert_eq!(run(9.0, true), vec![9.0; 4], "with the wait the consumer must see the producer's data");

    use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
    let blas = cudarc::cublas::CudaBlas::new(g.stream.clone()).unwrap();
    let (a, b, c) = (raw::alloc(16), raw::alloc(16), raw::alloc(16));
    raw::upload(a, &[1.0, 2.0, 3.0, 4.0], producer); // column-major [[1, 3], [2, 4]]
    raw::upload(b, &[1.0, 0.0, 0.0, 1.0], producer); // identity
    let gemm = |lda: i32| {
        let (alpha, beta) = (1.0f32, 0.0f32);
        let n = cublasOperation_t::CUBLAS_OP_N;
        let f32_ = cudaDataType::CUDA_R_32F;
        // SAFETY: 2x2 f32 operands in live device buffers; host scalars.
        unsafe {
            cudarc::cublas::result::gemm_ex(
                *blas.handle(),
                n,
                n,
                2,
                2,
                2,
                (&alpha as *const f32).cast(),
                a as *const _,
                f32_,
                lda,
                b as *const _,
                f32_,
                2,
                (&beta as *const f32).cast(),
                c as *mut _,
                f32_,
                2,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
    };
    gemm(2).expect("a well-formed GEMM");
    assert_eq!(raw::download(c, 4, producer), vec![1.0, 2.0, 3.0, 4.0]);
    let err = gemm(1).expect_err("lda 1 < m 2 must be refused");
    eprintln!("wrong leading dimension: {err:?}");
    assert!(format!("{err:?}").contains("INVALID_VALUE"), "{err:?}");
}
