//! Command-line interface: argument parsing and one module per subcommand.

mod bundle;
pub mod client;
mod remote;
mod run;
mod serve;
mod startup;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// sluice: serverless inference functions on shared GPUs.
#[derive(Parser, Debug)]
#[command(name = "sluice", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a function component once on an Open Inference Protocol request and print the response.
    Run(run::RunArgs),
    /// Serve the HTTP API (functions, tenants, Open Inference Protocol).
    Serve(serve::ServeArgs),
    /// Make a function bundle (sluice.toml, component, artifacts) for a model directory.
    Bundle(bundle::BundleArgs),
    /// Deploy a component (a new version) to a server, optionally with artifacts.
    Deploy(remote::DeployArgs),
    /// Invoke a function on a server with an Open Inference Protocol request.
    Invoke(remote::InvokeArgs),
    /// List, show or delete the tenant's functions on a server.
    Functions(remote::FunctionsArgs),
    /// Manage tenants and their API keys (admin key).
    Tenants(remote::TenantsArgs),
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    let result = match cli.command {
        Command::Run(args) => run::run(args),
        Command::Serve(args) => serve::serve(args),
        Command::Bundle(args) => bundle::run(args),
        Command::Deploy(args) => remote::deploy(args),
        Command::Invoke(args) => remote::invoke(args),
        Command::Functions(args) => remote::functions(args),
        Command::Tenants(args) => remote::tenants(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr, filtered by `SLUICE_LOG` (default `info`); colours only when
/// stderr is a terminal (a file or a pipe gets plain text).
fn init_tracing() {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("SLUICE_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
}
