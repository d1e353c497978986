//! The remote commands: `sluice deploy`, `invoke`, `functions` and `tenants`, which talk
//! to a running server (`--url`/`SLUICE_URL`) with a key (`--key`/`SLUICE_KEY`).

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use ureq::http::Method;

use super::client::{Client, ClientArgs};

#[derive(clap::Args, Debug)]
pub struct DeployArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// Function name.
    name: String,
    /// The component (.wasm, built for wasm32-wasip2).
    component: PathBuf,
    #[command(flatten)]
    function: FunctionArgs,
}

/// How a function runs, and its artifacts: the options `sluice deploy` and `sluice
/// bundle` share.
#[derive(clap::Args, Debug)]
pub struct FunctionArgs {
    /// Scheduling class: latency or batch.
    #[arg(long, value_parser = ["latency", "batch"])]
    pub priority: Option<String>,
    /// Fair-share weight within the tenant.
    #[arg(long)]
    pub weight: Option<u32>,
    /// Per-invocation timeout in milliseconds.
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    /// Linear-memory limit of an instance, in bytes.
    #[arg(long)]
    pub memory_limit_bytes: Option<u64>,
    /// Dynamic batching: the most rows in one batched invocation (off without it).
    #[arg(long)]
    pub max_batch_size: Option<u32>,
    /// Dynamic batching: how long a request may wait for its batch to fill, in µs
    /// (default 1000).
    #[arg(long, requires = "max_batch_size")]
    pub max_queue_delay_us: Option<u64>,
    /// An artifact, as NAME=PATH (repeatable).
    #[arg(long = "artifact", value_name = "NAME=PATH")]
    pub artifacts: Vec<String>,
}

#[derive(clap::Args, Debug)]
pub struct InvokeArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// Function name.
    name: String,
    /// The request JSON (Open Inference Protocol) file, or `-` for standard input.
    #[arg(long, short, default_value = "-")]
    input: String,
    /// Use `POST /v2/models/{name}/infer` instead of `/v1/functions/{name}/invoke`.
    #[arg(long)]
    v2: bool,
    /// Print the response on one line.
    #[arg(long)]
    compact: bool,
}

#[derive(clap::Args, Debug)]
pub struct FunctionsArgs {
    #[command(flatten)]
    client: ClientArgs,
    #[command(subcommand)]
    action: Option<FunctionsAction>,
}

#[derive(clap::Subcommand, Debug)]
enum FunctionsAction {
    /// List the tenant's functions (the default).
    List,
    /// Show one function with all its versions.
    Get { name: String },
    /// Delete a function and all its versions.
    Delete { name: String },
}

#[derive(clap::Args, Debug)]
pub struct TenantsArgs {
    #[command(flatten)]
    client: ClientArgs,
    #[command(subcommand)]
    action: Option<TenantsAction>,
}

#[derive(clap::Subcommand, Debug)]
enum TenantsAction {
    /// List tenants (the default).
    List,
    /// Create a tenant and print its first API key.
    Create {
        id: String,
        #[command(flatten)]
        policy: PolicyArgs,
    },
    /// Change a tenant's policy (admin); unnamed settings stay as they are.
    Set {
        id: String,
        #[command(flatten)]
        policy: PolicyArgs,
        /// Reset a setting to the server's default (repeatable): weight, max_priority,
        /// memory_quota_bytes or max_concurrency.
        #[arg(long, value_name = "SETTING")]
        reset: Vec<String>,
    },
    /// Show a tenant.
    Get { id: String },
    /// Delete a tenant with its keys and functions.
    Delete { id: String },
    /// Issue another API key for a tenant.
    Key { id: String },
}

/// A tenant's policy, as the admin sets it.
#[derive(clap::Args, Debug)]
struct PolicyArgs {
    /// Fair-share weight (1 to 1000).
    #[arg(long)]
    weight: Option<u32>,
    /// The highest priority class its functions may run in: batch or latency.
    #[arg(long)]
    max_priority: Option<String>,
    /// Invocations in flight at once.
    #[arg(long)]
    max_concurrency: Option<u32>,
    /// Device-memory quota in bytes.
    #[arg(long)]
    memory_quota_bytes: Option<u64>,
}

impl PolicyArgs {
    /// The settings named, as a JSON object.
    fn settings(&self) -> Value {
        let mut settings = json!({});
        if let Some(w) = self.weight {
            settings["weight"] = json!(w);
        }
        if let Some(p) = &self.max_priority {
            settings["max_priority"] = json!(p);
        }
        if let Some(c) = self.max_concurrency {
            settings["max_concurrency"] = json!(c);
        }
        if let Some(m) = self.memory_quota_bytes {
            settings["memory_quota_bytes"] = json!(m);
        }
        settings
    }
}

fn print(v: &Value, compact: bool) -> anyhow::Result<()> {
    let text = if compact { serde_json::to_string(v)? } else { serde_json::to_string_pretty(v)? };
    println!("{text}");
    Ok(())
}

pub fn deploy(args: DeployArgs) -> anyhow::Result<ExitCode> {
    let client = Client::new(&args.client);
    let wasm = std::fs::read(&args.component).with_context(|| format!("reading {}", args.component.display()))?;
    let mut query = Vec::new();
    if let Some(p) = &args.function.priority {
        query.push(format!("priority={p}"));
    }
    if let Some(w) = args.function.weight {
        query.push(format!("weight={w}"));
    }
    if let Some(t) = args.function.timeout_ms {
        query.push(format!("timeout_ms={t}"));
    }
    if let Some(m) = args.function.memory_limit_bytes {
        query.push(format!("memory_limit_bytes={m}"));
    }
    if let Some(b) = args.function.max_batch_size {
        query.push(format!("max_batch_size={b}"));
    }
    if let Some(d) = args.function.max_queue_delay_us {
        query.push(format!("max_queue_delay_us={d}"));
    }
    // With artifacts, the component is staged and the artifacts join that version in
    // place; publishing it makes the whole one version serve. Nothing serves half-made.
    let mut artifacts = Vec::new();
    for a in &args.function.artifacts {
        let Some((name, path)) = a.split_once('=') else { bail!("--artifact takes NAME=PATH, got {a:?}") };
        artifacts.push((name, path));
    }
    if !artifacts.is_empty() {
        query.push("staged=true".into());
    }
    let q = if query.is_empty() { String::new() } else { format!("?{}", query.join("&")) };
    let reply =
        client.send(Method::PUT, &format!("/v1/functions/{}{q}", args.name), Some(("application/wasm", wasm)))?.ok()?;
    let mut last = reply.json()?;
    for (name, path) in artifacts.iter().copied() {
        let bytes = std::fs::read(path).with_context(|| format!("reading {path}"))?;
        let path = format!("/v1/functions/{}/artifacts/{name}", args.name);
        last = client.send(Method::PUT, &path, Some(("application/octet-stream", bytes)))?.ok()?.json()?;
    }
    if !artifacts.is_empty() {
        let version = last["version"].as_u64().context("the server's reply names no version")?;
        let path = format!("/v1/functions/{}/versions/{version}/publish", args.name);
        last = client.send(Method::POST, &path, None)?.ok()?.json()?;
    }
    print(&last, false)?;
    Ok(ExitCode::SUCCESS)
}

pub fn invoke(args: InvokeArgs) -> anyhow::Result<ExitCode> {
    let client = Client::new(&args.client);
    let body = if args.input == "-" {
        let mut b = Vec::new();
        std::io::stdin().read_to_end(&mut b).context("reading the request from standard input")?;
        b
    } else {
        std::fs::read(&args.input).with_context(|| format!("reading {}", args.input))?
    };
    let path =
        if args.v2 { format!("/v2/models/{}/infer", args.name) } else { format!("/v1/functions/{}/invoke", args.name) };
    let reply = client.send(Method::POST, &path, Some(("application/json", body)))?.ok()?;
    let timing: Vec<String> = ["x-sluice-queue-us", "x-sluice-instantiate-us", "x-sluice-execute-us"]
        .iter()
        .filter_map(|h| Some(format!("{}={}µs", &h[9..h.len() - 3], reply.header(h)?)))
        .collect();
    print(&reply.json()?, args.compact)?;
    eprintln!("timing: {}", timing.join(" "));
    Ok(ExitCode::SUCCESS)
}

pub fn functions(args: FunctionsArgs) -> anyhow::Result<ExitCode> {
    let client = Client::new(&args.client);
    match args.action.unwrap_or(FunctionsAction::List) {
        FunctionsAction::List => {
            let v = client.json(Method::GET, "/v1/functions", None)?;
            for f in v["functions"].as_array().into_iter().flatten() {
                let digest = f["digest"].as_str().unwrap_or("");
                println!(
                    "{:<24} v{:<4} {} host-api {:<7} {}",
                    f["name"].as_str().unwrap_or("?"),
                    f["version"],
                    &digest[..12.min(digest.len())],
                    f["host_api"].as_str().unwrap_or("-"),
                    f["options"]["priority"].as_str().unwrap_or("")
                );
            }
        }
        FunctionsAction::Get { name } => {
            print(&client.json(Method::GET, &format!("/v1/functions/{name}"), None)?, false)?
        }
        FunctionsAction::Delete { name } => {
            client.json(Method::DELETE, &format!("/v1/functions/{name}"), None)?;
            println!("deleted {name}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn tenants(args: TenantsArgs) -> anyhow::Result<ExitCode> {
    let client = Client::new(&args.client);
    match args.action.unwrap_or(TenantsAction::List) {
        TenantsAction::List => {
            let v = client.json(Method::GET, "/v1/tenants", None)?;
            for t in v["tenants"].as_array().into_iter().flatten() {
                println!("{:<24} {}", t["id"].as_str().unwrap_or("?"), t["settings"]);
            }
        }
        TenantsAction::Create { id, policy } => {
            let body = json!({ "id": id, "settings": policy.settings() });
            print(&client.json(Method::POST, "/v1/tenants", Some(&body))?, false)?;
        }
        TenantsAction::Set { id, policy, reset } => {
            let mut patch = policy.settings();
            for setting in reset {
                patch[setting.as_str()] = Value::Null;
            }
            if patch.as_object().is_some_and(|m| m.is_empty()) {
                bail!("name at least one setting to change (see `sluice tenants set --help`)");
            }
            print(&client.json(Method::PATCH, &format!("/v1/tenants/{id}"), Some(&patch))?, false)?;
        }
        TenantsAction::Get { id } => print(&client.json(Method::GET, &format!("/v1/tenants/{id}"), None)?, false)?,
        TenantsAction::Delete { id } => {
            client.json(Method::DELETE, &format!("/v1/tenants/{id}"), None)?;
            println!("deleted tenant {id}");
        }
        TenantsAction::Key { id } => {
            print(&client.json(Method::POST, &format!("/v1/tenants/{id}/keys"), None)?, false)?
        }
    }
    Ok(ExitCode::SUCCESS)
}
