//! `sluice run`: one local invocation of a component, no server involved.

use std::collections::HashMap;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};

use crate::device::CpuDevice;
use crate::engine::{ArtifactSet, Engine, EngineConfig, FunctionLimits, InvocationContext};
use crate::oip;
use crate::scheduler::{DeviceQueue, MemoryAccount, PriorityClass, SchedulingInfo};

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The function component (.wasm, built for wasm32-wasip2).
    component: PathBuf,
    /// The request JSON file, or `-` for standard input.
    #[arg(long, short, default_value = "-")]
    input: String,
    /// An artifact the function may load, as NAME=PATH (repeatable).
    #[arg(long = "artifact", value_name = "NAME=PATH")]
    artifacts: Vec<String>,
    /// Wall-clock limit of the invocation, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    timeout_ms: u64,
    /// Linear-memory limit of the sandbox, in MiB.
    #[arg(long, default_value_t = 256)]
    memory_mib: usize,
    /// Print the response on one line instead of pretty-printed.
    #[arg(long)]
    compact: bool,
}

pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let wasm = std::fs::read(&args.component).with_context(|| format!("reading {}", args.component.display()))?;
    let body = if args.input == "-" {
        let mut b = Vec::new();
        std::io::stdin().read_to_end(&mut b).context("reading the request from standard input")?;
        b
    } else {
        std::fs::read(&args.input).with_context(|| format!("reading {}", args.input))?
    };
    let request = oip::json::parse_request(&body).context("invalid request")?;
    let mut files = HashMap::new();
    for a in &args.artifacts {
        let Some((name, path)) = a.split_once('=') else { bail!("--artifact takes NAME=PATH, got {a:?}") };
        files.insert(name.to_owned(), PathBuf::from(path));
    }
    let name = args.component.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();

    let engine = Engine::new(EngineConfig::default())?;
    let queue = DeviceQueue::start(Box::new(CpuDevice::new()));
    let component = engine.compile(&wasm)?;
    let account = MemoryAccount::new("local", None, None);
    let mut limits = FunctionLimits { timeout: Duration::from_millis(args.timeout_ms), ..FunctionLimits::default() };
    limits.sandbox.memory_bytes = args.memory_mib << 20;
    let image = engine.prepare(&name, &component, ArtifactSet::new(files, account.clone()), limits)?;

    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let scheduling =
        SchedulingInfo { tenant: "local".into(), function: "run".into(), class: PriorityClass::Latency, weight: 1 };
    let ctx = InvocationContext {
        queue,
        account: MemoryAccount::new("invocation", None, Some(account)),
        scheduling,
        timeout: None,
        caller: Default::default(),
        serving: None,
    };
    let output = rt.block_on(engine.invoke(&image, ctx, &request.inputs))?;
    let outputs = oip::select_outputs(output.outputs, &request.outputs)?;
    let response = oip::json::response_json(&oip::InferResponse {
        model_name: name,
        model_version: None,
        id: request.id,
        outputs,
        timing: oip::InferTiming::default(),
    });
    let text = if args.compact { serde_json::to_string(&response)? } else { serde_json::to_string_pretty(&response)? };
    println!("{text}");
    tracing::debug!(
        instantiate_us = output.instantiate.as_micros() as u64,
        execute_us = output.execute.as_micros() as u64,
        launches = output.launches,
        "invocation finished"
    );
    Ok(ExitCode::SUCCESS)
}
