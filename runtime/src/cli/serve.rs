//! `sluice serve`: the HTTP server over the embedded registry.

use std::future::IntoFuture;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use sluice_registry::{PriorityClass, RegistryLocation};

use crate::device::{DeviceChoice, DeviceSettings, OpenedDevices, open_devices};
use crate::engine::DEFAULT_LATENCY_LINGER;
use crate::platform::{
    DEFAULT_LIVE_FEEDS_PER_TENANT, DEFAULT_OLD_VERSIONS_PER_TENANT, DEFAULT_STATUS_BURST, DEFAULT_STATUS_PER_SECOND,
    DEFAULT_STREAM_BUFFER_BYTES, DEFAULT_STREAM_STALL, DEFAULT_TENANT_HOST_MEMORY_BYTES, HostMemoryLimits,
    ModelRepository, Platform, PlatformConfig, WatchLimits,
};
use crate::scheduler::{DEFAULT_KERNEL_LOG, DEFAULT_STATUS_INTERVAL, Policy, SchedulerConfig};
use crate::server::{self, BodyLimits};

use super::startup::{self, ModelInitMode};

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on for HTTP (and gRPC over h2c), as `HOST:PORT`; default
    /// `--host` and `--http-port`.
    #[arg(long, env = "SLUICE_ADDR")]
    addr: Option<String>,
    /// Address of the Open Inference Protocol's own gRPC port, as `HOST:PORT`; default
    /// `--host` and `--grpc-port`.
    #[arg(long, env = "SLUICE_GRPC_ADDR")]
    grpc_listen: Option<String>,
    /// Interface every listener binds: `127.0.0.1` by default, `0.0.0.0` when `PORT` is
    /// set (a container platform's, Knative's, contract).
    #[arg(long, env = "SLUICE_HOST")]
    host: Option<String>,
    /// Port of the HTTP API (`PORT`, as Knative and other container platforms set it).
    #[arg(long, env = "PORT", default_value_t = 8080)]
    http_port: u16,
    /// Port of the gRPC endpoint (gRPC is also served on the HTTP port).
    #[arg(long, env = "SLUICE_GRPC_PORT", default_value_t = 8081)]
    grpc_port: u16,
    /// A port serving `GET /metrics` without a key, for a Prometheus scraper inside the
    /// cluster (the HTTP port's `/metrics` needs the admin key); default: none.
    #[arg(long, env = "SLUICE_METRICS_PORT")]
    metrics_port: Option<u16>,
    /// A model repository: a directory of function bundles (`sluice.toml`, component,
    /// artifacts), or one bundle. Every bundle in it is loaded at start (the server is
    /// ready once they serve), and the repository API (`/v2/repository/...`) loads and
    /// unloads its subdirectories. Never written to.
    #[arg(long, alias = "model_dir", env = "SLUICE_MODEL_REPOSITORY")]
    model_dir: Option<PathBuf>,
    /// The function name of a bundle at the root of `--model-dir` (KServe's
    /// `{{.Name}}`); default: the name its manifest gives.
    #[arg(long, alias = "model_name")]
    model_name: Option<String>,
    /// `sync`: the model directory must be complete at start (a missing or bad bundle
    /// stops the server, naming the file); `async`: the server starts at once, unready,
    /// and loads the bundles as they appear (retrying every 500 ms).
    #[arg(long, env = "MODEL_INIT_MODE", value_enum, default_value_t = ModelInitMode::Sync)]
    model_init_mode: ModelInitMode,
    /// A directory of tenant keys, as a mounted Kubernetes Secret gives them: each file
    /// `<tenant>` holds that tenant's API key (at least 32 printable characters). The
    /// tenants are created if missing and the keys made valid.
    #[arg(long, env = "SLUICE_TENANT_KEYS_DIR")]
    tenant_keys_dir: Option<PathBuf>,
    /// Repository calls (`/v2/repository/...`) without a key from a local process that
    /// no proxy forwarded act as the admin's: KServe's model agent, a sidecar in the
    /// pod, sends none. Only for pods where nothing else local is untrusted.
    #[arg(long, env = "SLUICE_KEYLESS_LOCAL_REPOSITORY")]
    keyless_local_repository: bool,
    /// Seconds requests are still served after SIGTERM while readiness says 503, so
    /// that load balancers stop sending new ones before they are refused.
    #[arg(long, default_value_t = 0.0)]
    drain_delay_s: f64,
    /// Directory of the registry (tenants, keys, functions, compiled components).
    #[arg(long, env = "SLUICE_DATA_DIR", default_value = "./sluice-data")]
    data_dir: PathBuf,
    /// The registry's database, shared by every node: a `postgres://user:password@host/db`
    /// URL (`sslmode` as in libpq). Without it the registry is sled in the data
    /// directory (one node). See docs/fleet.md.
    #[arg(long, env = "SLUICE_REGISTRY")]
    registry: Option<String>,
    /// With a `postgres://` registry: the blob directory every node shares (a
    /// ReadWriteMany volume); default `<data-dir>/blobs`.
    #[arg(long, env = "SLUICE_BLOB_DIR", requires = "registry")]
    blob_dir: Option<PathBuf>,
    /// Device to run functions on: the GPU if one is usable (auto), or forced.
    #[arg(long, env = "SLUICE_DEVICE", value_enum, default_value_t = DeviceChoice::Auto)]
    device: DeviceChoice,
    /// Cores the CPU device's kernels may use (default: all).
    #[arg(long)]
    cpu_threads: Option<usize>,
    /// CUDA devices to serve on, as ordinals (`0,1`); default: every visible GPU. Each
    /// has its own scheduler, and function versions are placed on the least-loaded.
    #[arg(long = "cuda-devices", alias = "cuda-device", value_delimiter = ',')]
    cuda_devices: Option<Vec<usize>>,
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
    /// Microseconds batch-class guests stay paused on the host's cores after the last
    /// latency-class invocation ends (they pause while one runs; 0: only then). Trades
    /// batch throughput on the host for the latency of clients that keep a latency
    /// function busy: their next request comes within this gap.
    #[arg(long, default_value_t = DEFAULT_LATENCY_LINGER.as_micros() as u64)]
    latency_linger_us: u64,
    /// Kernel records each device keeps for the live console's feed
    /// (`/v1/devices/{index}/live`), written only while a feed is open; 0 turns it off.
    #[arg(long, default_value_t = DEFAULT_KERNEL_LOG)]
    kernel_log: usize,
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
    /// The highest priority class of a tenant whose settings name none: `batch` (the
    /// default: strict priority over others is the admin's to grant) or `latency`.
    #[arg(long, env = "SLUICE_DEFAULT_PRIORITY", default_value = "batch", value_parser = parse_priority)]
    default_priority: PriorityClass,
    /// The device-memory quota of a tenant whose settings name none: a share of the
    /// device's memory (`25%`, the default), a number of bytes (`4294967296`, `512MiB`,
    /// `4GiB`), or `unlimited`.
    #[arg(long, env = "SLUICE_DEFAULT_MEMORY_QUOTA", default_value = "25%", value_parser = MemoryQuota::parse)]
    default_memory_quota: MemoryQuota,
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
    /// Non-serving versions (an old version or a staged draft named by
    /// `/versions/{v}`) each tenant keeps loaded, most recently used first; their
    /// weights count against the tenant's memory quota. 0: each such request loads one.
    #[arg(long, default_value_t = DEFAULT_OLD_VERSIONS_PER_TENANT)]
    old_versions_per_tenant: usize,
    /// Milliseconds a device's status snapshot is shared by every caller (`/v1/status`,
    /// `/metrics`, live feeds) before the device's scheduler computes a new one.
    #[arg(long, default_value_t = DEFAULT_STATUS_INTERVAL.as_millis() as u64)]
    status_interval_ms: u64,
    /// `GET /v1/status` calls a tenant may make per second, sustained (429
    /// `status_rate_limit` beyond; the admin's key is not limited).
    #[arg(long, default_value_t = DEFAULT_STATUS_PER_SECOND)]
    status_rate_per_s: f64,
    /// `GET /v1/status` calls a tenant may make at once before the rate applies.
    #[arg(long, default_value_t = DEFAULT_STATUS_BURST)]
    status_burst: u32,
    /// Live feeds (`/v1/devices/{index}/live`) a tenant may have open at once (429
    /// `live_feed_limit` beyond).
    #[arg(long, default_value_t = DEFAULT_LIVE_FEEDS_PER_TENANT)]
    max_live_feeds_per_tenant: u32,
    /// Host memory (KiB) one tenant's requests may hold at once for their bodies,
    /// decoded inputs and encoded responses (413 `decoded_too_large` for a request
    /// that alone needs more, 429 `host_memory_budget` while its others hold the rest).
    #[arg(long, default_value_t = DEFAULT_TENANT_HOST_MEMORY_BYTES >> 10)]
    tenant_host_memory_kib: u64,
    /// Bytes (KiB) one streamed invocation may have queued towards a slow client; the
    /// function's `emit` waits beyond.
    #[arg(long, default_value_t = DEFAULT_STREAM_BUFFER_BYTES >> 10)]
    stream_buffer_kib: u64,
    /// Milliseconds a streamed invocation waits for a client that reads nothing before
    /// it is cancelled.
    #[arg(long, default_value_t = DEFAULT_STREAM_STALL.as_millis() as u64)]
    stream_stall_ms: u64,
    /// Host memory one GGUF artifact's parsed metadata and tensor index may take, in
    /// bytes; over it the guest's `metadata`/`load-tensor` call fails with `too-large`.
    #[arg(long, default_value_t = crate::engine::gguf::DEFAULT_MAX_PARSED_BYTES)]
    max_artifact_metadata_bytes: usize,
    /// Most bytes of a GGUF artifact's metadata as JSON one guest `metadata` call may
    /// read (each call renders its own copy); over it the call fails with `too-large`.
    #[arg(long, default_value_t = crate::engine::DEFAULT_MAX_METADATA_JSON_BYTES)]
    max_metadata_json_bytes: usize,
    /// Most core-module instances one component may create (deploys over it get 400
    /// `component_limit_exceeded`); sizes the instance pool.
    #[arg(long, default_value_t = crate::engine::DEFAULT_MAX_CORE_INSTANCES_PER_COMPONENT)]
    max_core_instances_per_component: u32,
    /// Most linear memories one component may define (400 `component_limit_exceeded`).
    #[arg(long, default_value_t = crate::engine::DEFAULT_MAX_MEMORIES_PER_COMPONENT)]
    max_memories_per_component: u32,
    /// Most tables one component may define (400 `component_limit_exceeded`).
    #[arg(long, default_value_t = crate::engine::DEFAULT_MAX_TABLES_PER_COMPONENT)]
    max_tables_per_component: u32,
    /// Warm instances one tenant may keep over all its functions.
    #[arg(long, default_value_t = crate::engine::DEFAULT_TENANT_MAX_WARM_INSTANCES)]
    tenant_max_warm_instances: usize,
    /// MiB of linear memory one tenant's warm instances may hold together; an instance
    /// that would take it past this is dropped when its invocation ends.
    #[arg(long, default_value_t = crate::engine::DEFAULT_TENANT_MAX_WARM_MEMORY_BYTES >> 20)]
    tenant_max_warm_memory_mib: usize,
    /// Seconds an unused warm instance is kept before its slots are released.
    #[arg(long, default_value_t = crate::engine::DEFAULT_WARM_IDLE_TIMEOUT.as_secs_f64())]
    warm_idle_s: f64,
    /// Artifact uploads in flight at once per tenant, unless the tenant's settings say
    /// otherwise (`max_uploads`); more get 429 `too_many_uploads`.
    #[arg(long, default_value_t = crate::platform::DEFAULT_TENANT_MAX_UPLOADS)]
    tenant_max_uploads: u32,
    /// An artifact upload's body must bring at least `--upload-min-bytes-per-s` over
    /// every window of this many milliseconds (so also: nothing for this long), else it
    /// is cut off with 408 `upload_stalled`.
    #[arg(long, default_value_t = server::DEFAULT_UPLOAD_READ_TIMEOUT.as_millis() as u64)]
    upload_read_timeout_ms: u64,
    /// The slowest rate an artifact upload's body may arrive at, in bytes per second,
    /// averaged over each `--upload-read-timeout-ms` window.
    #[arg(long, default_value_t = server::DEFAULT_UPLOAD_MIN_BYTES_PER_S)]
    upload_min_bytes_per_s: u64,
    /// The disk quota of a tenant whose settings name none (`disk_quota_bytes`), in MiB:
    /// bytes of the distinct blobs its versions reference; 0: unlimited. Writes above it
    /// get 429 `disk_quota_exceeded`.
    #[arg(long, default_value_t = crate::platform::DEFAULT_TENANT_DISK_QUOTA_BYTES >> 20)]
    default_disk_quota_mib: u64,
    /// Versions kept per function of a tenant whose settings name no count
    /// (`keep_versions`), besides the serving one, a staged draft and pinned ones; older
    /// ones are pruned (and their blobs reclaimed) at the next write.
    #[arg(long, default_value_t = crate::platform::DEFAULT_KEEP_VERSIONS)]
    keep_versions: u32,
}

pub fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    if !(args.grace_period_s.is_finite() && args.grace_period_s >= 0.0) {
        bail!("--grace-period-s must be a non-negative number");
    }
    if !(args.drain_delay_s.is_finite() && (0.0..=3600.0).contains(&args.drain_delay_s)) {
        bail!("--drain-delay-s must be between 0 and 3600 seconds");
    }
    let listen = Listen::resolve(&args);
    if !(args.status_rate_per_s.is_finite() && args.status_rate_per_s >= 0.0) || args.status_burst == 0 {
        bail!("--status-rate-per-s must be a non-negative number and --status-burst at least 1");
    }
    if !(args.warm_idle_s.is_finite() && args.warm_idle_s > 0.0 && args.warm_idle_s <= 1e9) {
        bail!("--warm-idle-s must be a positive number of seconds");
    }
    crate::platform::heap::bound_arenas();
    let settings = DeviceSettings {
        cpu_threads: args.cpu_threads,
        cuda_ordinal: args.cuda_devices.as_deref().and_then(|d| d.first().copied()).unwrap_or(0),
        kernel_cache_dir: Some(args.data_dir.join("kernels")),
        allow_tf32: args.allow_tf32,
        reserved_sms: args.reserved_sms,
    };
    let OpenedDevices(opened) = open_devices(args.device, &settings, args.cuda_devices.as_deref())?;
    let mut devices = Vec::new();
    let count = opened.len();
    for d in opened {
        println!("device: {}", d.reason);
        devices.push(d.device);
    }
    // The default quota is a share of the smallest device's memory, so it fits on any of them.
    let smallest = devices.iter().map(|d| d.info().memory_bytes).min().unwrap_or(0);
    let default_memory_quota_bytes = args.default_memory_quota.bytes(smallest);
    let config = PlatformConfig {
        data_dir: args.data_dir.clone(),
        registry: args.registry.clone(),
        blob_dir: args.blob_dir.clone(),
        max_concurrency: args.max_concurrency,
        tenant_max_concurrency: args.tenant_max_concurrency,
        default_priority: args.default_priority,
        default_memory_quota_bytes,
        scheduler: SchedulerConfig {
            policy: args.policy,
            preemption_budget: Duration::from_micros(args.preemption_budget_us),
            fill_depth: Duration::from_micros(args.fill_depth_us),
            latency_hold: Duration::from_millis(args.latency_hold_ms),
            kernel_log: args.kernel_log,
            status_interval: Duration::from_millis(args.status_interval_ms),
            ..SchedulerConfig::default()
        },
        warm_instances_per_function: args.warm_instances,
        latency_linger: Duration::from_micros(args.latency_linger_us),
        old_versions_per_tenant: args.old_versions_per_tenant,
        watch: WatchLimits {
            status_per_second: args.status_rate_per_s,
            status_burst: args.status_burst,
            live_feeds_per_tenant: args.max_live_feeds_per_tenant,
        },
        host_memory: HostMemoryLimits {
            tenant_budget_bytes: args.tenant_host_memory_kib << 10,
            stream_buffer_bytes: args.stream_buffer_kib << 10,
            stream_stall: Duration::from_millis(args.stream_stall_ms),
        },
        max_artifact_metadata_bytes: args.max_artifact_metadata_bytes,
        max_metadata_json_bytes: args.max_metadata_json_bytes,
        max_core_instances_per_component: args.max_core_instances_per_component,
        max_memories_per_component: args.max_memories_per_component,
        max_tables_per_component: args.max_tables_per_component,
        tenant_max_warm_instances: args.tenant_max_warm_instances,
        tenant_max_warm_memory_bytes: args.tenant_max_warm_memory_mib.saturating_mul(1 << 20),
        warm_idle_timeout: Duration::from_secs_f64(args.warm_idle_s),
        tenant_max_uploads: args.tenant_max_uploads,
        model_repository: args
            .model_dir
            .clone()
            .map(|root| ModelRepository { root, root_name: args.model_name.clone() }),
        keyless_local_repository: args.keyless_local_repository,
        default_disk_quota_bytes: (args.default_disk_quota_mib > 0).then_some(args.default_disk_quota_mib << 20),
        default_keep_versions: args.keep_versions,
        ..PlatformConfig::default()
    };
    let limits = BodyLimits {
        component_bytes: args.max_component_mib << 20,
        artifact_bytes: args.max_artifact_mib << 20,
        invoke_bytes: args.max_request_mib << 20,
        upload_read_timeout: Duration::from_millis(args.upload_read_timeout_ms.max(1)),
        upload_min_bytes_per_s: args.upload_min_bytes_per_s,
        ..BodyLimits::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("sluice-http")
        .max_blocking_threads((args.max_concurrency as usize).saturating_add(64))
        .build()?;
    let result = runtime.block_on(async move {
        let started = Instant::now();
        let location = RegistryLocation::from_args(args.registry.as_deref(), &args.data_dir, args.blob_dir.as_deref());
        let platform =
            Platform::open(config, devices).with_context(|| format!("opening the registry {}", location.redacted()))?;
        platform.follow_changes().context("following the shared registry's changes")?;
        let admin_key = std::env::var("SLUICE_ADMIN_KEY").ok().filter(|k| !k.is_empty());
        let generated = platform.registry().ensure_admin_key(admin_key).context("setting up the admin key")?;
        if let Some(dir) = &args.tenant_keys_dir {
            startup::provision_tenant_keys(&platform, dir)?;
        }
        let bundles = startup::Bundles::check(&platform, args.model_init_mode)?;
        // Listen first: liveness answers while functions load; readiness waits for them.
        let listener = tokio::net::TcpListener::bind(&listen.http)
            .await
            .with_context(|| format!("listening on {}", listen.http))?;
        let addr = listener.local_addr()?;
        println!("sluice {} listening on http://{addr} (HTTP and gRPC)", env!("CARGO_PKG_VERSION"));
        let drain_delay = Duration::from_secs_f64(args.drain_delay_s);
        let grpc = tokio::net::TcpListener::bind(&listen.grpc)
            .await
            .with_context(|| format!("listening for gRPC on {}", listen.grpc))?;
        println!("gRPC (Open Inference Protocol) listening on {}", grpc.local_addr()?);
        tokio::spawn(server::grpc::run(grpc, platform.clone(), limits.invoke_bytes, drain_delay));
        if let Some(metrics) = &listen.metrics {
            let l = tokio::net::TcpListener::bind(metrics)
                .await
                .with_context(|| format!("listening for metrics on {metrics}"))?;
            println!("metrics (no key) on http://{}/metrics", l.local_addr()?);
            tokio::spawn(axum::serve(l, server::metrics_app(platform.clone())).into_future());
        }
        println!("data dir: {}", platform.registry().data_dir().display());
        if location.is_shared() {
            println!("registry: {} (shared; changes followed)", location.redacted());
        }
        let more = if count > 1 { format!(" and {} more", count - 1) } else { String::new() };
        let device = platform.device();
        println!("device: {} ({:?}){more}", device.name, device.kind);
        if let Some(key) = generated {
            println!("admin key (shown once, store it now): {key}");
        }
        let failed = startup::load_in_background(platform.clone(), bundles, started);
        let lifecycle = server::Lifecycle { grace: Duration::from_secs_f64(args.grace_period_s), drain_delay };
        tokio::select! {
            served = server::serve_with(listener, platform, limits, lifecycle) => served?,
            e = failed => return Err(e),
        }
        anyhow::Ok(())
    });
    // Abandoned invocations (after the grace period) must not keep the process alive.
    runtime.shutdown_timeout(Duration::from_millis(100));
    result.map(|()| ExitCode::SUCCESS)
}

/// The addresses to listen on.
struct Listen {
    http: String,
    grpc: String,
    metrics: Option<String>,
}

impl Listen {
    fn resolve(args: &ServeArgs) -> Listen {
        let host = args.host.clone().unwrap_or_else(|| {
            if std::env::var_os("PORT").is_some() { "0.0.0.0".to_owned() } else { "127.0.0.1".to_owned() }
        });
        // An IPv6 address is written in brackets before a port.
        let host = if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host };
        Listen {
            http: args.addr.clone().unwrap_or_else(|| format!("{host}:{}", args.http_port)),
            grpc: args.grpc_listen.clone().unwrap_or_else(|| format!("{host}:{}", args.grpc_port)),
            metrics: args.metrics_port.map(|p| format!("{host}:{p}")),
        }
    }
}

fn parse_priority(s: &str) -> Result<PriorityClass, String> {
    match s {
        "batch" => Ok(PriorityClass::Batch),
        "latency" => Ok(PriorityClass::Latency),
        _ => Err(format!("{s:?} is no priority class (batch or latency)")),
    }
}

/// `--default-memory-quota`: a share of the device's memory, a size, or none.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MemoryQuota {
    /// Percent of the device's memory, 0 < p ≤ 100.
    Percent(f64),
    /// Bytes, ≥ 1.
    Bytes(u64),
    /// No default quota.
    Unlimited,
}

impl MemoryQuota {
    fn parse(s: &str) -> Result<MemoryQuota, String> {
        let s = s.trim();
        if s == "unlimited" {
            return Ok(MemoryQuota::Unlimited);
        }
        if let Some(p) = s.strip_suffix('%') {
            return match p.trim().parse::<f64>() {
                Ok(p) if p > 0.0 && p <= 100.0 => Ok(MemoryQuota::Percent(p)),
                _ => Err(format!("{s:?}: a share must be above 0% and at most 100%")),
            };
        }
        let units = [("KiB", 1u64 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30), ("TiB", 1 << 40), ("", 1)];
        let (number, unit) = units.iter().find_map(|(u, m)| Some((s.strip_suffix(u)?, *m))).unwrap_or((s, 1));
        match number.trim().parse::<u64>().ok().and_then(|n| n.checked_mul(unit)) {
            Some(n) if n > 0 => Ok(MemoryQuota::Bytes(n)),
            _ => Err(format!("{s:?} is no quota: give N%, a size (bytes, KiB, MiB, GiB, TiB) above 0, or unlimited")),
        }
    }

    /// The quota on a device of `device_bytes`, at least one byte.
    fn bytes(self, device_bytes: u64) -> Option<u64> {
        match self {
            MemoryQuota::Percent(p) => Some(((device_bytes as f64 * p / 100.0) as u64).max(1)),
            MemoryQuota::Bytes(n) => Some(n),
            MemoryQuota::Unlimited => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_quotas_parse_and_resolve() {
        assert_eq!(MemoryQuota::parse("25%").unwrap().bytes(1000), Some(250));
        assert_eq!(MemoryQuota::parse("512MiB").unwrap(), MemoryQuota::Bytes(512 << 20));
        assert_eq!(MemoryQuota::parse("4096").unwrap(), MemoryQuota::Bytes(4096));
        assert_eq!(MemoryQuota::parse("unlimited").unwrap().bytes(1000), None);
        for bad in ["0", "0%", "101%", "-5", "lots", "5PiB", "99999999999TiB"] {
            assert!(MemoryQuota::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_priority("latency"), Ok(PriorityClass::Latency));
        assert!(parse_priority("urgent").is_err());
    }
}
