//! `cargo xtask lint`: the checks that need no test run, cheapest first.
//!
//! 1. `cargo fmt --all --check` in the host workspace and in the guest workspace
//!    (`functions/`, with `guest-sdk/` as a member);
//! 2. the module-cycle check over `runtime/src` ([`module_cycles`]);
//! 3. the released host API versions are unchanged ([`frozen_wit`]);
//! 4. unused dependencies in both workspaces ([`machete`], `cargo-machete`);
//! 5. `docs/openapi.yaml` against the OpenAPI schema ([`openapi`], `openapi-spec-validator`);
//! 6. clippy with warnings denied: the host workspace (`--all-targets`) and the guest
//!    workspace for `wasm32-wasip2`;
//! 7. `cargo doc --workspace --no-deps` with `RUSTDOCFLAGS=-D warnings`.
//!
//! Every step runs even when an earlier one failed, and clippy and rustdoc go on past a
//! crate that fails (`--keep-going`), so one run lists every problem.
//! `cargo xtask lint clippy doc` runs only the steps named (keys in [`LINT_STEPS`]).
//! `cargo xtask test` runs all of them before the tests.

mod frozen_wit;
mod machete;
mod module_cycles;
mod openapi;
mod rust_tokens;

use std::process::Command;

use anyhow::{Result, bail};

use crate::cmd;
use crate::setup::{self, WASM_TARGET};
use crate::steps::Steps;

/// The crate roots whose modules must not depend on each other in a cycle.
const CYCLE_CHECKED_CRATES: &[&str] = &["runtime/src/lib.rs"];

/// One lint step: the name `cargo xtask lint <key>` selects it by, what it checks, and
/// the check.
struct LintStep {
    key: &'static str,
    name: &'static str,
    check: fn() -> Result<()>,
}

/// Every lint step, in the order run (cheapest first).
const LINT_STEPS: &[LintStep] = &[
    LintStep { key: "fmt", name: "rustfmt --check: host workspace", check: fmt_host },
    LintStep { key: "fmt", name: "rustfmt --check: guest workspace (functions/, guest-sdk/)", check: fmt_guest },
    LintStep { key: "cycles", name: "module cycles: runtime/src", check: check_module_cycles },
    LintStep { key: "frozen", name: "frozen host API versions: host-api/wit-released", check: frozen_wit::run },
    LintStep { key: "machete", name: "unused dependencies (cargo-machete): both workspaces", check: machete::run },
    LintStep { key: "openapi", name: "OpenAPI spec: docs/openapi.yaml", check: openapi::run },
    LintStep { key: "clippy", name: "clippy -D warnings: host workspace, all targets", check: clippy_host },
    LintStep { key: "clippy", name: "clippy -D warnings: guest workspace (wasm32-wasip2)", check: clippy_guest },
    LintStep { key: "doc", name: "rustdoc -D warnings: host workspace", check: doc_host },
];

/// How many steps [`add_steps`] runs.
pub const STEP_COUNT: usize = LINT_STEPS.len();

/// Runs `cargo xtask lint [STEP…]`: every lint step, or those whose key is named
/// (`fmt`, `cycles`, `frozen`, `machete`, `openapi`, `clippy`, `doc`).
pub fn run(args: &[String]) -> Result<()> {
    if let Some(unknown) = args.iter().find(|a| !LINT_STEPS.iter().any(|s| s.key == a.as_str())) {
        let keys: Vec<&str> = LINT_STEPS.iter().map(|s| s.key).collect();
        bail!("lint: unknown step `{unknown}` (steps: {})", keys.join(", "));
    }
    let chosen: Vec<&LintStep> =
        LINT_STEPS.iter().filter(|s| args.is_empty() || args.iter().any(|a| a == s.key)).collect();
    let mut steps = Steps::new(chosen.len());
    for step in chosen {
        steps.run(step.name, step.check);
    }
    steps.finish("lint")
}

/// Runs the [`STEP_COUNT`] lint steps.
pub fn add_steps(steps: &mut Steps) {
    for step in LINT_STEPS {
        steps.run(step.name, step.check);
    }
}

fn fmt_host() -> Result<()> {
    cmd::run(cmd::cargo().current_dir(cmd::repo_root()).args(FMT_CHECK))
}

fn fmt_guest() -> Result<()> {
    cmd::run(cmd::cargo().current_dir(cmd::repo_root().join("functions")).args(FMT_CHECK))
}

fn clippy_host() -> Result<()> {
    let clippy = ["clippy", "--workspace", "--all-targets", "--keep-going", "--", "-D", "warnings"];
    cmd::run(cmd::cargo().current_dir(cmd::repo_root()).args(clippy))
}

fn clippy_guest() -> Result<()> {
    setup::ensure_wasm_target()?;
    let clippy =
        ["clippy", "--workspace", "--all-targets", "--keep-going", "--target", WASM_TARGET, "--", "-D", "warnings"];
    cmd::run(guest_cargo(&cmd::repo_root().join("functions")).args(clippy))
}

fn doc_host() -> Result<()> {
    // `--examples` (there are none) makes cargo resolve features with the
    // dev-dependencies', as clippy's `--all-targets` and the tests do, so the
    // dependencies clippy checked are reused rather than checked again (3 minutes on
    // CI's two cores; see host_tests.rs).
    let doc = ["doc", "--workspace", "--no-deps", "--keep-going", "--lib", "--bins", "--examples"];
    cmd::run(cmd::cargo().current_dir(cmd::repo_root()).args(doc).env("RUSTDOCFLAGS", "-D warnings"))
}

/// `cargo fmt` arguments: check every member, change nothing.
const FMT_CHECK: [&str; 3] = ["fmt", "--all", "--check"];

/// cargo in the guest workspace at `dir`, without the host's flags and target.
pub fn guest_cargo(dir: &std::path::Path) -> Command {
    let mut cargo = cmd::cargo();
    cargo
        .current_dir(dir)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET");
    cargo
}

/// Fails if two sibling modules of a checked crate depend on each other.
fn check_module_cycles() -> Result<()> {
    let root = cmd::repo_root();
    let mut found = 0;
    for krate in CYCLE_CHECKED_CRATES {
        let report = module_cycles::check(&root.join(krate), &root)?;
        eprintln!(
            "xtask: {krate}: {} modules, {} references, {} cycles",
            report.modules,
            report.references,
            report.cycles.len()
        );
        for cycle in &report.cycles {
            eprint!("{cycle}");
        }
        found += report.cycles.len();
    }
    if found > 0 {
        bail!("{found} module cycles (each pair of siblings above references the other)");
    }
    Ok(())
}
