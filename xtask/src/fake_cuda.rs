//! The fake CUDA libraries (`fakecuda/`): building them with the system C++ compiler
//! into `target/fakecuda/`, and `cargo xtask test-cuda-fake`, which runs the CUDA
//! backend's tests on them under both fiber schedules.
//!
//! Layout of `target/fakecuda/`: `lib/` holds `libcuda.so.1`, `libnvrtc.so.13`,
//! `libcublas.so.13` and the unversioned names cudarc also tries (symlinks); `include/`
//! the emulation header the fake NVRTC compiles kernels with; `cache/` the compiled
//! kernel modules (content-addressed; safe to delete); `gen/` the generated stubs. The
//! libraries are rebuilt only when a source under `fakecuda/` is newer than them.
//!
//! Every driver, cuBLAS and NVRTC symbol cudarc can resolve (`fakecuda/symbols/*.txt`,
//! taken from cudarc's tables) exists: the ones the fake does not emulate are weak stubs
//! that print their name once and return "not supported".

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Instant, SystemTime};

use anyhow::{Context, Result, bail};

use crate::cmd;
use crate::host_tests::{self, HostTests, TestBinary};

mod bench_refusal;
mod serve_smoke;

/// The schedules the CUDA tests run under (values of `SLUICE_FAKE_CUDA_SCHEDULE`).
pub const SCHEDULES: [&str; 2] = ["round-robin", "lowest-first"];

/// `target/fakecuda` of this repository.
pub fn out_dir() -> PathBuf {
    cmd::repo_root().join("target").join("fakecuda")
}

/// The folder to put first on `LD_LIBRARY_PATH`.
pub fn lib_dir() -> PathBuf {
    out_dir().join("lib")
}

/// `cargo xtask test-cuda-fake [test filter and libtest args]`: the executables come
/// from the host test build ([`host_tests`]), so nothing is rebuilt with other features.
pub fn run(args: &[String]) -> Result<()> {
    build()?;
    let tests = host_tests::build()?;
    let started = Instant::now();
    let mut summary = Vec::new();
    for schedule in SCHEDULES {
        let counts = test(&tests, schedule, args)?;
        summary.push(format!("{schedule}: {counts}"));
    }
    serve_smoke::run(&host_tests::sluice_bin(), SCHEDULES[0])?;
    summary.push("sluice serve --device cuda with MiniLM f32 and f16: ok".into());
    bench_refusal::check()?;
    summary.push("bench/gpu refuses the emulator: ok".into());
    eprintln!(
        "xtask: CUDA tests on the fake device: {} ({:.0} s in all)",
        summary.join("; "),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Test counts of one run.
#[derive(Debug, Default)]
pub struct Counts {
    pub passed: usize,
    pub skipped: usize,
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ran, {} skipped", self.passed, self.skipped)
    }
}

/// The environment that makes the fake the CUDA the tests see.
pub fn env(command: &mut Command, schedule: &str) -> Result<()> {
    let mut path = std::ffi::OsString::from(lib_dir());
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|p| !p.is_empty()) {
        path.push(":");
        path.push(old);
    }
    command
        .env("LD_LIBRARY_PATH", path)
        .env("SLUICE_FAKE_CUDA", "1")
        .env("SLUICE_FAKE_CUDA_SCHEDULE", schedule)
        .env("SLUICE_REQUIRE_CUDA", "1");
    Ok(())
}

/// The CUDA backend's test executables that run on the fake (not the real-NVRTC compile
/// test, which checks real CUBINs).
const BACKEND_TESTS: [(&str, &str); 4] =
    [("lib", "sluice_backend_cuda"), ("test", "conformance"), ("test", "fake_mutations"), ("test", "device_loss")];

/// Runs the CUDA backend's unit tests and conformance suite on the fake with `schedule`.
fn test(tests: &HostTests, schedule: &str, extra: &[String]) -> Result<Counts> {
    let skip_log = out_dir().join(format!("skipped-{schedule}.tsv"));
    std::fs::write(&skip_log, "").with_context(|| format!("creating {}", skip_log.display()))?;
    eprintln!("xtask: running the CUDA tests on the fake device, schedule {schedule}");
    let mut stdout = String::new();
    for (kind, target) in BACKEND_TESTS {
        let mut c = tests.find("sluice-backend-cuda", kind, target)?.command();
        c.args(extra).arg("--nocapture");
        env(&mut c, schedule)?;
        c.env("SLUICE_SKIP_LOG", &skip_log);
        stdout.push_str(&run_test(c, &format!("the CUDA backend's {target} tests (schedule {schedule})"))?);
    }
    // The runtime's CUDA device recovering from a lost GPU, alone in its process: the
    // second kernel launch of the process fails (a sticky error, process-wide).
    let runtime_lib = tests.find("sluice-runtime", "lib", "sluice_runtime")?;
    let lost_stdout = alone(schedule, &skip_log, runtime_lib, &["device::cuda::tests::"], 2, "CUDA device-loss")?;
    // An engine invocation losing the GPU through the scheduler, which resets it; the
    // next invocations run (the mlp component: build it if needed).
    crate::build_functions::run(&[])?;
    let reset = tests.find("sluice-runtime", "test", "cuda_device_loss")?;
    let reset_stdout = alone(schedule, &skip_log, reset, &[], 3, "scheduler's device-reset")?;
    let lost_stdout = format!("{lost_stdout}\n{reset_stdout}");
    let skipped = std::fs::read_to_string(&skip_log).unwrap_or_default().lines().count();
    let counts = count(&format!("{stdout}\n{lost_stdout}"), skipped);
    eprintln!("xtask: schedule {schedule}: {counts}");
    Ok(counts)
}

/// Runs the tests of `binary` selected by `filter` alone in a process whose
/// `fail_launch`-th kernel launch fails with an illegal address; returns their output.
fn alone(
    schedule: &str,
    skip_log: &Path,
    binary: &TestBinary,
    filter: &[&str],
    fail_launch: u32,
    what: &str,
) -> Result<String> {
    let mut c = binary.command();
    c.args(filter).args(["--nocapture", "--test-threads=1"]);
    env(&mut c, schedule)?;
    c.env("SLUICE_SKIP_LOG", skip_log).env("SLUICE_FAKE_CUDA_FAIL_LAUNCH", fail_launch.to_string());
    run_test(c, &format!("the runtime's {what} test (schedule {schedule})"))
}

/// Runs a test executable; its standard output, or an error with both its outputs.
fn run_test(mut c: Command, what: &str) -> Result<String> {
    let out = c.output().with_context(|| format!("could not start {c:?}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        print!("{stdout}");
        bail!("{what} failed on the fake device ({})", out.status);
    }
    Ok(stdout)
}

/// Sums libtest's "N passed" lines; `skipped` of them skipped (the run's skip log).
pub fn count(stdout: &str, skipped: usize) -> Counts {
    let mut c = Counts::default();
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("test result: ")
            && let Some(n) = rest.split(';').find_map(|p| p.trim().strip_suffix(" passed"))
        {
            c.passed += n.trim_start_matches("ok. ").trim_start_matches("FAILED. ").parse::<usize>().unwrap_or(0);
        }
    }
    c.skipped = skipped;
    c.passed = c.passed.saturating_sub(c.skipped);
    c
}

fn newest_mtime(dir: &Path) -> Result<SystemTime> {
    let mut newest = SystemTime::UNIX_EPOCH;
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let meta = entry.metadata()?;
        let t = if meta.is_dir() { newest_mtime(&entry.path())? } else { meta.modified()? };
        newest = newest.max(t);
    }
    Ok(newest)
}

/// C++ stubs for every name of `list` (one a line): weak, so the real definitions win.
fn stubs(list: &Path, reporter: &str, ret: &str) -> Result<String> {
    let names = std::fs::read_to_string(list).with_context(|| format!("reading {}", list.display()))?;
    let mut s = format!(
        "// Generated by `cargo xtask` from {}: weak stubs for entry points the fake does not emulate.\n\
         extern \"C\" int {reporter}(const char*);\n",
        list.display()
    );
    for name in names.lines().map(str::trim).filter(|n| !n.is_empty()) {
        s.push_str(&format!(
            "extern \"C\" __attribute__((weak, visibility(\"default\"))) int {name}() {{ {reporter}(\"{name}\"); return {ret}; }}\n"
        ));
    }
    Ok(s)
}

/// Builds the fakes into `target/fakecuda` if any source is newer than the libraries.
pub fn build() -> Result<()> {
    let src = cmd::repo_root().join("fakecuda");
    let out = out_dir();
    let (lib, include, generated) = (out.join("lib"), out.join("include"), out.join("gen"));
    let stamp = lib.join("libcublas.so.13");
    let newest = newest_mtime(&src)?;
    if stamp.exists() && std::fs::metadata(&stamp)?.modified()? >= newest {
        return Ok(());
    }
    for d in [&lib, &include, &generated] {
        std::fs::create_dir_all(d)?;
    }
    for h in ["sluice_cuda_emu.h", "sluice_cuda_emu_abi.h"] {
        std::fs::copy(src.join("include").join(h), include.join(h))?;
    }
    let cxx = std::env::var("SLUICE_FAKE_CXX").unwrap_or_else(|_| "g++".into());
    let s = src.join("src");
    let g = |name: &str, list: &str, reporter: &str, ret: &str| -> Result<PathBuf> {
        let p = generated.join(name);
        std::fs::write(&p, stubs(&src.join("symbols").join(list), reporter, ret)?)?;
        Ok(p)
    };
    let driver_stubs = g("driver_stubs.cpp", "driver.txt", "sluice_fake_unsupported", "801")?;
    let blas_stubs = g("cublas_stubs.cpp", "cublas.txt", "sluice_fake_blas_unsupported", "15")?;
    let nvrtc_stubs = g("nvrtc_stubs.cpp", "nvrtc.txt", "sluice_fake_nvrtc_unsupported", "11")?;
    let compile = |soname: &str, sources: &[PathBuf], extra: &[&str]| -> Result<()> {
        let mut c = Command::new(&cxx);
        c.args(["-std=c++17", "-O3", "-g", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall", "-Wno-unused-function"])
            .arg(format!("-Wl,-soname,{soname}"))
            .arg("-o")
            .arg(lib.join(soname))
            .args(sources)
            .args(extra);
        cmd::run(&mut c)
    };
    compile(
        "libcuda.so.1",
        &[s.join("driver_core.cpp"), s.join("driver_exec.cpp"), s.join("driver_green.cpp"), driver_stubs],
        &["-ldl", "-lpthread"],
    )?;
    compile("libnvrtc.so.13", &[s.join("nvrtc.cpp"), nvrtc_stubs], &["-ldl"])?;
    let link_cuda = format!("-L{}", lib.display());
    compile(
        "libcublas.so.13",
        &[s.join("cublas.cpp"), blas_stubs],
        &[&link_cuda, "-l:libcuda.so.1", "-Wl,-rpath,$ORIGIN"],
    )?;
    for (link, target) in
        [("libcuda.so", "libcuda.so.1"), ("libnvrtc.so", "libnvrtc.so.13"), ("libcublas.so", "libcublas.so.13")]
    {
        let p = lib.join(link);
        let _ = std::fs::remove_file(&p);
        std::os::unix::fs::symlink(target, &p)?;
    }
    eprintln!("xtask: built the fake CUDA libraries in {}", lib.display());
    Ok(())
}
