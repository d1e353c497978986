//! `cargo xtask bench`: the CPU benchmarks, from a fresh machine.
//!
//! Set-up first (the guest components, the model), then
//! `cargo bench -p sluice-runtime --bench engine --bench minilm --bench scheduling --bench
//! guest_languages` with `SLUICE_MODEL_DIR`
//! set. `engine` measures the host-side cost of an op launch and the instantiation
//! time; `minilm` runs all-MiniLM-L6-v2 through sluice on the CPU side by side with a
//! NumPy reference (it creates `target/bench-venv` with numpy on first use);
//! `scheduling` co-locates a latency and a best-effort tenant under each policy and
//! measures the scheduler's overhead; `guest_languages` sets Rust, Python and JavaScript
//! functions side by side (size, compile, instantiation, op launch, MiniLM 1 × 128);
//! `cargo bench -p sluice-backend-cpu --bench quant` times the quantized linear on
//! SmolLM2's shapes beside f32. Extra
//! arguments go to `cargo bench`. Then the Open Inference Protocol's transports through
//! a real server (`cargo run --release -p sluice-tests --bin oip-bench`: JSON HTTP, binary
//! HTTP and gRPC on `echo` and MiniLM batch 32, with the server's decode and encode time),
//! dynamic batching (`--bin batch-bench`: MiniLM one sentence per request at 1, 4 and
//! 16 clients, unbatched and batched) and continuous batching (`--bin llm-batch-bench`:
//! SmolLM2 at 1, 4 and 8 streams, unbatched, batched and llama.cpp's batched decode; the
//! GGUF fetched first, llama-cpp-python built once by `bench/llm/run_peer.sh`), and the
//! control plane's cost on an invocation (`--bin fleet-bench`: one node on sled, one on
//! PostgreSQL, three behind haproxy; Debian's haproxy and PostgreSQL installed first). Results
//! are recorded by hand in `bench/RESULTS.md`.

use anyhow::Result;

use crate::{build_functions, cmd, debian, fetch_llm, fetch_model, postgres};

pub fn run(args: &[String]) -> Result<()> {
    build_functions::run(&[])?;
    let model_dir = fetch_model::fetch()?;
    cmd::run(
        cmd::cargo()
            .current_dir(cmd::repo_root())
            .args(["bench", "-p", "sluice-runtime", "--bench", "engine", "--bench", "minilm", "--bench", "scheduling"])
            .args(["--bench", "guest_languages"])
            .args(args)
            .env("SLUICE_MODEL_DIR", &model_dir),
    )?;
    cmd::run(cmd::cargo().current_dir(cmd::repo_root()).args([
        "bench",
        "-p",
        "sluice-backend-cpu",
        "--bench",
        "quant",
    ]))?;
    cmd::run(
        cmd::cargo()
            .current_dir(cmd::repo_root())
            .args(["run", "--release", "-q", "-p", "sluice-tests", "--bin", "oip-bench"])
            .env("SLUICE_MODEL_DIR", &model_dir),
    )?;
    cmd::run(
        cmd::cargo()
            .current_dir(cmd::repo_root())
            .args(["run", "--release", "-q", "-p", "sluice-tests", "--bin", "batch-bench"])
            .env("SLUICE_MODEL_DIR", &model_dir),
    )?;
    let llm_dir = fetch_llm::fetch()?;
    cmd::run(
        cmd::cargo()
            .current_dir(cmd::repo_root())
            .args(["run", "--release", "-q", "-p", "sluice-tests", "--bin", "llm-batch-bench"])
            .env(fetch_llm::DIR_VAR, &llm_dir),
    )?;
    let haproxy = debian::ensure(&debian::HAPROXY)?;
    let mut fleet = cmd::cargo();
    fleet
        .current_dir(cmd::repo_root())
        .args(["run", "--release", "-q", "-p", "sluice-tests", "--bin", "fleet-bench"])
        .env(debian::HAPROXY_VAR, haproxy);
    if let Some(bin) = postgres::ensure_for_tests()? {
        fleet.env(postgres::BIN_VAR, bin);
    }
    cmd::run(&mut fleet)
}
