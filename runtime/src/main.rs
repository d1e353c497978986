//! The `sluice` command: server, local runner and HTTP client in one binary.

fn main() -> std::process::ExitCode {
    sluice_runtime::cli::main()
}
