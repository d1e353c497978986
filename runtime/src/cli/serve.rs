//! `sluice serve`: the HTTP server over the embedded registry.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::device::{DeviceChoice, DeviceSettings, OpenedDevice, open_device};
use crate::platform::{Platform, PlatformConfig};
use crate::scheduler::{Policy, SchedulerConfig};
use crate::server::{self, BodyLimits};

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "SLUICE_ADDR", default_value = "127.0.0.1:8080")]
    addr: String,
    /// Address of the Open Inference Protocol's gRPC endpoint.
    #[arg(long, env = "SLUICE_GRPC_ADDR", default_value = "127.0.0.1:8081")]
    grpc_listen: String,
    /// Directory of the registry (tenants, keys, functions, compiled components).
    #[arg(long, env = "SLUICE_DATA_DIR", default_value = "./sluice-data")]
    data_dir: PathBuf,
    /// Device to run functions on: the GPU if one is usable (auto), or forced.
    #[arg(long, env = "SLUICE_DEVICE", value_enum, default_value_t = DeviceChoice::Auto)]
    device: DeviceChoice,
    /// Cores the CPU device's kernels may use (default: all).
    #[arg(long)]
    cpu_threads: Option<usize>,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    cuda_device: usize,
    /// Let f32 GEMMs on the GPU use TF32 tensor cores (faster, ~1e-3 relative error).
    #[arg(long)]
    allow_tf32: bool,
    /// How each device orders work between invocations: `priority` (latency before
    /// batch, weighted fair share, preemption) or `fifo` (arrival order).
    #[arg(long, value_enum, default_value_t = Policy::Priority)]
    policy: Policy,
    /// While latency work is active, the most best-effort work (µs, estimated) that may
    /// run or sit on the device ahead of it; longer kernels are sliced.
    #[arg(long, default_value_t = 100)]
    preemption_budget_us: u64,
    /// Best-effort work (µs, estimated) a GPU may hold in flight while no latency work
    /// is active.
    #[arg(long, default_value_t = 2000)]
    fill_depth_us: u64,
    /// Milliseconds after the last latency-class invocation ended during which
    /// best-effort work stays preemptible (sliced) as if latency work were active (0:
    /// only while latency work is active). Trades best-effort throughput for the
    /// first-kernel wait of latency tenants that send requests with think time.
    #[arg(long, default_value_t = 0)]
    latency_hold_ms: u64,
    /// SMs of the GPU reserved for latency-class functions (a CUDA green-context
    /// partition, rounded up to the hardware's granularity: 8 SMs on Hopper); best-effort
    /// work uses the rest while latency work is active and the whole GPU otherwise.
    /// 0: no partition (priorities and preemption only).
    #[arg(long, env = "SLUICE_RESERVED_SMS", default_value_t = 0)]
    reserved_sms: u32,
    /// Instances of a function version kept warm between invocations (0: a fresh
    /// instance for every invocation).
    #[arg(long, default_value_t = 4)]
    warm_instances: usize,
    /// Invocations in flight at once, server-wide (more get 429).
    #[arg(long, default_value_t = 64)]
    max_concurrency: u32,
    /// Invocations in flight at once per tenant, unless the tenant's settings say otherwise.
    #[arg(long, default_value_t = 16)]
    tenant_max_concurrency: u32,
    /// Seconds in-flight requests may take to finish after SIGINT/SIGTERM.
    #[arg(long, default_value_t = 30.0)]
    grace_period_s: f64,
    /// Largest component upload, in MiB.
    #[arg(long, default_value_t = 64)]
    max_component_mib: usize,
    /// Largest artifact upload, in MiB.
    #[arg(long, default_value_t = 1024)]
    max_artifact_mib: u64,
    /// Largest invocation request body, in MiB.
    #[arg(long, default_value_t = 16)]
    max_request_mib: usize,
}

pub fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    if !(args.grace_period_s.is_finite() && args.grace_period_s >= 0.0) {
        bail!("--grace-period-s must be a non-negative number");
    }
    let settings = DeviceSettings {
        cpu_threads: args.cpu_threads,
        cuda_ordinal: args.cuda_device,
        kernel_cache_dir: Some(args.data_dir.join("kernels")),
        allow_tf32: args.allow_tf32,
        reserved_sms: args.reserved_sms,
    };
    let OpenedDevice { device, reason } = open_device(args.device, &settings)?;
    println!("device: {reason}");
    let config = PlatformConfig {
        data_dir: args.data_dir.clone(),
        max_concurrency: args.max_concurrency,
        tenant_max_concurrency: args.tenant_max_concurrency,
        scheduler: SchedulerConfig {
            policy: args.policy,
            preemption_budget: Duration::from_micros(args.preemption_budget_us),
            fill_depth: Duration::from_micros(args.fill_depth_us),
            latency_hold: Duration::from_millis(args.latency_hold_ms),
            ..SchedulerConfig::default()
        },
        warm_instances_per_function: args.warm_instances,
        ..PlatformConfig::default()
    };
    let limits = BodyLimits {
        component_bytes: args.max_component_mib << 20,
        artifact_bytes: args.max_artifact_mib << 20,
        invoke_bytes: args.max_request_mib << 20,
        ..BodyLimits::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("sluice-http")
        .max_blocking_threads((args.max_concurrency as usize).saturating_add(64))
        .build()?;
    let result = runtime.block_on(async move {
        let started = Instant::now();
        let platform = Platform::open(config, vec![device])
            .with_context(|| format!("opening the data directory {}", args.data_dir.display()))?;
        let admin_key = std::env::var("SLUICE_ADMIN_KEY").ok().filter(|k| !k.is_empty());
        let generated = platform.registry().ensure_admin_key(admin_key).context("setting up the admin key")?;
        let warm = {
            let p = platform.clone();
            tokio::task::spawn_blocking(move || p.warm_up()).await??
        };
        let listener =
            tokio::net::TcpListener::bind(&args.addr).await.with_context(|| format!("listening on {}", args.addr))?;
        let addr = listener.local_addr()?;
        let device = platform.device();
        println!("sluice {} listening on http://{addr}", env!("CARGO_PKG_VERSION"));
        let grpc = tokio::net::TcpListener::bind(&args.grpc_listen)
            .await
            .with_context(|| format!("listening for gRPC on {}", args.grpc_listen))?;
        println!("gRPC (Open Inference Protocol) listening on {}", grpc.local_addr()?);
        tokio::spawn(server::grpc::run(grpc, platform.clone(), limits.invoke_bytes));
        println!("data dir: {}", platform.registry().data_dir().display());
        println!("device: {} ({:?})", device.name, device.kind);
        println!(
            "functions: {} loaded from compiled cache, {} compiled, {} failed",
            warm.from_cache, warm.compiled, warm.failed
        );
        if let Some(key) = generated {
            println!("admin key (shown once, store it now): {key}");
        }
        tracing::info!(%addr, startup_ms = started.elapsed().as_millis() as u64, "ready");
        let grace = Duration::from_secs_f64(args.grace_period_s);
        server::serve(listener, platform, limits, grace).await?;
        anyhow::Ok(())
    });
    // Abandoned invocations (after the grace period) must not keep the process alive.
    runtime.shutdown_timeout(Duration::from_millis(100));
    result.map(|()| ExitCode::SUCCESS)
}
