//! The service layer: everything `sluice serve` does, without HTTP.
//!
//! A [`Platform`] owns the durable [`Registry`], the wasmtime [`Engine`], the device's
//! [`DeviceQueue`], the cache of loaded functions, one memory account and one
//! concurrency limit per tenant, and a server-wide concurrency limit.
//!
//! - `config`: the platform's settings ([`PlatformConfig`]) and their defaults;
//! - `cache`: the loaded functions (the newest version of each `(tenant, name)`,
//!   compiled, pre-instantiated and with its shared weights, and a few other versions
//!   per tenant); a load racing a delete never installs;
//! - `weights`: each tenant's placed weights, bounded by its device-memory quota;
//! - `revocation`: open streams and feeds check their key again after a revocation;
//! - `key_cache`: the keys this node has checked, so a request reads no registry;
//! - `propagation`: other nodes' changes (a shared registry's notifications) in force here;
//! - `admission`: the concurrency limits (a full server answers 429 at once instead
//!   of queueing);
//! - `functions`: deploy (validate → precompile → durable store → load), artifacts,
//!   list/get/delete, and warm-up at start-up from the stored compiled forms;
//! - `invoke`: admission, then one invocation on a host thread of its class (`guest_threads`);
//! - `tenants`: the admin operations, and changes of a tenant's policy;
//! - `policy`: the admin-owned tenant policy and its clamp at each invocation;
//! - `heap`: the allocator's free memory back to the OS when idle after bursts;
//! - `metrics`: Prometheus metrics of invocations, plus the status at scrape time;
//! - `stats`: the same invocations per function, as Triton's statistics extension reports them;
//! - `live`: one device as the live console shows it to a caller (kernel records, status);
//! - `watching`: the per-tenant limits on status calls and live feeds;
//! - `host_memory`: the per-tenant host-memory budget of request decoding and response
//!   encoding, and the rooms of streamed invocations.
//! - `uploads`: artifact uploads, each tenant's cap on them in flight and its disk quota
//!   while the bytes arrive, without any lock held for a slow client.
//! - [`bundle`]: the function bundle format (`sluice.toml`, a component, artifacts);
//!   `repository`: bundles loaded from a model directory, and the repository
//!   extension's index, load and unload.
//! - `lifecycle`: readiness (held back while start-up work runs), the drain after
//!   SIGTERM and the shutdown.
//!
//! Methods that touch the disk or compile are synchronous: the HTTP layer calls them on
//! the blocking pool. Errors are [`PlatformError`]s with stable codes.

mod admission;
mod batch_tensors;
mod batcher;
pub mod bundle;
mod cache;
mod config;
mod error;
mod functions;
mod guest_threads;
pub(crate) mod heap;
mod host_memory;
mod invoke;
mod key_cache;
mod lifecycle;
mod live;
mod metrics;
mod policy;
mod propagation;
mod repository;
mod revocation;
mod serving;
mod stats;
mod tenants;
mod uploads;
mod watching;
mod weights;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::Mutex;
use serde::Serialize;
use sluice_registry::{Principal, PriorityClass, Registry, RegistryLocation};

use crate::device::{Device, DeviceInfo};
use crate::engine::{Engine, EngineConfig};
use crate::scheduler::{DevicePool, DeviceStatus};
use crate::scheduler::{DeviceQueue, MemoryAccount};

use admission::ConcurrencyLimit;
use cache::FunctionCache;
pub use config::{
    DEFAULT_KEEP_VERSIONS, DEFAULT_OLD_VERSIONS_PER_TENANT, DEFAULT_TENANT_DISK_QUOTA_BYTES,
    DEFAULT_TENANT_MAX_UPLOADS, DEFAULT_TENANT_MEMORY_QUOTA_BYTES, PlatformConfig,
};
pub use error::{LimitScope, PlatformError, Result};
pub use functions::{FunctionInfo, LoadedFunction, WarmReport};
use guest_threads::GuestThreads;
pub use host_memory::{
    DEFAULT_STREAM_BUFFER_BYTES, DEFAULT_STREAM_STALL, DEFAULT_TENANT_HOST_MEMORY_BYTES, HostMemoryLimits,
    HostMemoryRefusal, HostMemoryStatus, HostReservation, TenantHostMemory,
};
pub use invoke::{Invocation, InvokeOptions, UNKNOWN_FUNCTION};
pub use lifecycle::ReadinessHold;
pub use live::{FunctionLatency, LiveKernels, LiveStatus, OTHER_TENANT, QueueDepth, TenantMemory};
pub use metrics::{DURATION_BUCKETS, Metrics};
pub use policy::{TenantPolicy, TenantView, clamp_class, clamp_weight, merge_settings};
pub use repository::{IndexEntry, LOAD_PARAMETERS, Loaded, ModelRepository, UNLOAD_PARAMETERS, check_parameters};
pub use revocation::KeyCheck;
pub use stats::{FunctionStats, Timed};
pub use tenants::IssuedKey;
pub use uploads::ArtifactUpload;
use uploads::UploadSlots;
pub use watching::{
    DEFAULT_LIVE_FEEDS_PER_TENANT, DEFAULT_STATUS_BURST, DEFAULT_STATUS_PER_SECOND, FeedPermit, TenantFeeds,
    WatchLimits, WatchStatus,
};
pub use weights::OverQuota;
use weights::WeightLedger;

/// A tenant's run-time state: its device-memory account and its concurrency limit,
/// built from its policy; replaced when the admin changes the policy.
pub(crate) struct TenantRuntime {
    pub(crate) account: Arc<MemoryAccount>,
    pub(crate) concurrency: ConcurrencyLimit,
    /// The weight bytes its loaded versions placed on devices, within its quota.
    pub(crate) weights: Arc<WeightLedger>,
    /// The policy in force (settings with the server's defaults).
    pub(crate) policy: TenantPolicy,
    /// Its artifact uploads in flight.
    pub(crate) uploads: UploadSlots,
    /// Bytes of the blobs its versions reference, as of its last write or delete.
    pub(crate) disk_used: AtomicU64,
}

/// Counters for `/v1/status` and for tests ("restarted without recompiling").
#[derive(Default)]
struct Counters {
    compilations: AtomicU64,
    compiled_loads: AtomicU64,
    invocations: AtomicU64,
    invocation_errors: AtomicU64,
    rejected: AtomicU64,
    in_flight: AtomicU64,
}

/// A snapshot of the platform's state and counters.
#[derive(Clone, Debug, Serialize)]
pub struct Status {
    pub version: &'static str,
    pub ready: bool,
    pub device: DeviceInfo,
    pub engine_fingerprint: String,
    pub data_dir: String,
    pub functions_loaded: usize,
    /// Components compiled by this process (deploys, and start-up without a stored compiled form).
    pub compilations: u64,
    /// Components loaded from their stored compiled form (no compilation).
    pub compiled_cache_loads: u64,
    /// Times batch-class guests computing in Wasm yielded their core at an epoch tick
    /// (see `engine::epoch`).
    pub batch_guest_yields: u64,
    /// Times batch-class guests paused while latency work needed their core (see
    /// `engine::give_way`).
    pub batch_guest_pauses: u64,
    pub invocations: u64,
    pub invocation_errors: u64,
    /// Invocations refused by a concurrency limit (429).
    pub rejected: u64,
    pub in_flight: u64,
    pub max_concurrency: u32,
    pub tenant_max_concurrency: u32,
    pub uptime_ms: u64,
    /// Each device's scheduler: queues, device time per tenant, preemptions, partition.
    pub devices: Vec<DeviceStatus>,
    /// Device memory and policy of every tenant.
    pub tenants: Vec<TenantUsage>,
    /// Every function's recent latency (and, for a streaming one, its time to first
    /// token and time per output token).
    pub functions: Vec<FunctionLatency>,
    /// Status calls and live feeds: the limits, the refusals, the feeds open per tenant.
    pub watching: WatchStatus,
    /// Host memory of requests and streams: the limits, every tenant's use and refusals.
    pub host_memory: HostMemoryStatus,
    /// The instance pool's slots in use and capacity, the warm instances kept and their caps.
    pub instance_pool: crate::engine::PoolStatus,
    /// Host memory the parsed GGUF metadata of every loaded artifact takes, and the cap
    /// of one artifact's.
    pub artifact_metadata_bytes: u64,
    pub max_artifact_metadata_bytes: u64,
    /// Most bytes of metadata JSON one guest call may read.
    pub max_metadata_json_bytes: u64,
}

/// What a tenant's key sees of the status: the server's identity and health, and its own
/// usage only. Device-wide and server-wide counters would show other tenants' activity.
#[derive(Clone, Debug, Serialize)]
pub struct OwnStatus {
    pub version: &'static str,
    pub ready: bool,
    pub device: DeviceInfo,
    pub uptime_ms: u64,
    /// The caller's invocations running now.
    pub in_flight: u64,
    /// Each device with the caller's own queues and device time.
    pub devices: Vec<OwnDeviceStatus>,
    /// The caller's device memory, quota, concurrency and policy (one entry once it has run or deployed).
    pub tenants: Vec<TenantUsage>,
    /// The caller's functions' recent latency (see [`Status::functions`]).
    pub functions: Vec<FunctionLatency>,
    /// The limits on status calls and live feeds, and the caller's feeds open.
    pub watching: WatchStatus,
    /// The host-memory limits, and the caller's use and refusals.
    pub host_memory: HostMemoryStatus,
}

/// One device as a tenant sees it.
#[derive(Clone, Debug, Serialize)]
pub struct OwnDeviceStatus {
    pub device: DeviceInfo,
    pub policy: crate::scheduler::Policy,
    pub partition: crate::device::PartitionState,
    /// The caller's rows (one per priority class it used).
    pub tenants: Vec<crate::scheduler::TenantStatus>,
}

/// One tenant's device memory, concurrency and policy.
#[derive(Clone, Debug, Serialize)]
pub struct TenantUsage {
    pub tenant: String,
    pub memory_used_bytes: u64,
    pub memory_quota_bytes: Option<u64>,
    pub concurrency_limit: u32,
    /// Its invocations running now.
    pub in_flight: u64,
    pub weight: u32,
    pub max_priority: PriorityClass,
    /// Artifact bytes its loaded versions placed on devices (within its memory quota).
    pub weights_placed_bytes: u64,
    /// Its non-serving versions kept loaded (at most `old_versions_per_tenant`).
    pub old_versions_loaded: usize,
    /// Warm instances its functions keep (at most `instance_pool.tenant_max_warm_instances`).
    pub warm_instances: usize,
    /// Bytes of linear memory they hold (at most
    /// `instance_pool.tenant_max_warm_memory_bytes`).
    pub warm_memory_bytes: u64,
    /// Bytes of the distinct blobs its versions reference (a blob shared with another
    /// tenant counts for each).
    pub disk_used_bytes: u64,
    pub disk_quota_bytes: Option<u64>,
    /// Its artifact uploads in flight, and the most it may have.
    pub uploads_in_flight: u32,
    pub upload_limit: u32,
    /// Versions kept per function.
    pub keep_versions: u32,
}

/// The service. Share it as `Arc<Platform>`.
pub struct Platform {
    registry: Registry,
    engine: Engine,
    fingerprint: String,
    devices: Arc<DevicePool>,
    config: PlatformConfig,
    functions: FunctionCache<LoadedFunction>,
    tenants: Mutex<HashMap<String, Arc<TenantRuntime>>>,
    global: ConcurrencyLimit,
    counters: Counters,
    metrics: Metrics,
    ready: AtomicBool,
    /// Start-up work that must end before the server is ready (bundles to load).
    readiness_holds: AtomicUsize,
    /// Set on SIGTERM: not ready any more, though requests are still served.
    draining: AtomicBool,
    shutting_down: AtomicBool,
    started: Instant,
    guest_threads: GuestThreads,
    /// Keys revoked and tenants deleted since the start (see `revocation`).
    revocations: AtomicU64,
    /// The keys checked so far (cleared by every key or tenant change).
    keys: key_cache::KeyCache,
    watching: watching::Watching,
    host_memory: host_memory::HostBudgets,
    /// Requests of batched functions waiting for their batch.
    batcher: Arc<batcher::Batcher>,
    /// The queues of serving functions (continuous batching).
    serving: serving::ServingQueues,
}

impl Platform {
    /// Opens the registry in `config.data_dir`, creates the engine and starts a
    /// scheduler per device. Call [`Platform::warm_up`] before serving.
    pub fn open(config: PlatformConfig, devices: Vec<Box<dyn Device>>) -> Result<Arc<Platform>> {
        if devices.is_empty() {
            return Err(PlatformError::InvalidRequest("at least one device is needed".into()));
        }
        if config.max_concurrency == 0 || config.tenant_max_concurrency == 0 {
            return Err(PlatformError::InvalidRequest("concurrency limits must be at least 1".into()));
        }
        if config.tenant_max_uploads == 0 || config.default_keep_versions == 0 {
            return Err(PlatformError::InvalidRequest("upload and version limits must be at least 1".into()));
        }
        let registry = Registry::open_location(RegistryLocation::from_args(
            config.registry.as_deref(),
            &config.data_dir,
            config.blob_dir.as_deref(),
        ))?;
        // Room for every invocation in flight plus as many warm instances (the engine
        // keeps at most half of its instances warm).
        let engine = Engine::new(EngineConfig {
            max_instances: config.max_concurrency.clamp(1, 1000) * 2,
            max_memory_bytes: config.max_memory_bytes,
            warm_instances_per_function: config.warm_instances_per_function,
            latency_linger: config.latency_linger,
            max_core_instances_per_component: config.max_core_instances_per_component,
            max_memories_per_component: config.max_memories_per_component,
            max_tables_per_component: config.max_tables_per_component,
            tenant_max_warm_instances: config.tenant_max_warm_instances,
            tenant_max_warm_memory_bytes: config.tenant_max_warm_memory_bytes,
            warm_idle_timeout: config.warm_idle_timeout,
            ..EngineConfig::default()
        })
        .map_err(|e| PlatformError::internal("creating the engine", format!("{e:#}")))?;
        let fingerprint = engine.fingerprint();
        let queues = devices.into_iter().map(|d| DeviceQueue::start_with(d, config.scheduler.clone())).collect();
        let devices = DevicePool::new(queues);
        let platform = Arc::new(Platform {
            registry,
            engine,
            fingerprint,
            devices,
            global: ConcurrencyLimit::new(LimitScope::Global, config.max_concurrency),
            watching: watching::Watching::new(config.watch),
            host_memory: host_memory::HostBudgets::new(config.host_memory),
            batcher: Arc::default(),
            serving: Default::default(),
            config,
            functions: FunctionCache::default(),
            tenants: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            metrics: Metrics::default(),
            ready: AtomicBool::new(false),
            readiness_holds: AtomicUsize::new(0),
            draining: AtomicBool::new(false),
            shutting_down: AtomicBool::new(false),
            started: Instant::now(),
            guest_threads: GuestThreads::default(),
            revocations: AtomicU64::new(0),
            keys: key_cache::KeyCache::default(),
        });
        heap::trim_when_idle(&platform);
        Ok(platform)
    }

    /// The registry (tenants, keys, functions).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The settings it runs with.
    pub fn config(&self) -> &PlatformConfig {
        &self.config
    }

    /// The (first) device it runs on.
    pub fn device(&self) -> &DeviceInfo {
        self.devices.queues()[0].info()
    }

    /// Who `key` authenticates as (`None`: unknown or revoked).
    /// The answer comes from the node's key cache once the key has been seen, so a
    /// request costs no registry read (see `key_cache`).
    pub fn authenticate(&self, key: &str) -> Result<Option<Principal>> {
        match self.keys.get(key) {
            Ok(found) => Ok(found),
            Err(lookup) => {
                let found = self.registry.authenticate(key)?;
                self.keys.install(lookup, found.clone());
                Ok(found)
            }
        }
    }

    /// The priority class the host work of `key`'s requests runs in: its tenant's
    /// `max_priority` (no invocation of the tenant can run above it). The admin, and a key
    /// that does not authenticate (its request is refused at once), are `Latency`.
    pub fn class_of_key(&self, key: &str) -> PriorityClass {
        match self.authenticate(key) {
            Ok(Some(Principal::Tenant(tenant))) => {
                self.tenant_runtime(&tenant).map_or(PriorityClass::Latency, |t| t.policy.max_priority)
            }
            _ => PriorityClass::Latency,
        }
    }

    /// Inference statistics of `tenant`'s function `function` (of all its functions when
    /// `None`), by name; functions never invoked since the start are absent.
    pub fn function_stats(&self, tenant: &str, function: Option<&str>) -> Vec<(String, FunctionStats)> {
        self.metrics.stats.get(tenant, function)
    }

    /// Invocations running now.
    pub fn in_flight(&self) -> u64 {
        self.counters.in_flight.load(Ordering::Relaxed)
    }

    /// The metrics text for `GET /metrics`: every tenant's series (admin only).
    pub async fn render_metrics(&self) -> String {
        self.metrics.render(&self.status().await)
    }

    /// What `tenant`'s key sees: its own usage, no device-wide or server-wide counters.
    pub async fn own_status(&self, tenant: &str) -> OwnStatus {
        let mut devices = Vec::new();
        for q in self.devices.queues() {
            let d = q.shared_status().await;
            devices.push(OwnDeviceStatus {
                device: d.device.clone(),
                policy: d.policy,
                partition: d.partition.clone(),
                tenants: d.tenants.iter().filter(|t| t.tenant == tenant).cloned().collect(),
            });
        }
        let tenants: Vec<TenantUsage> = self.tenant_usage().into_iter().filter(|u| u.tenant == tenant).collect();
        OwnStatus {
            version: env!("CARGO_PKG_VERSION"),
            ready: self.is_ready(),
            device: self.device().clone(),
            uptime_ms: self.started.elapsed().as_millis() as u64,
            in_flight: tenants.first().map_or(0, |u| u.in_flight),
            devices,
            tenants,
            functions: self.metrics.stats.recent_latency(Some(tenant)),
            watching: self.watching.status(Some(tenant)),
            host_memory: self.host_memory.status(Some(tenant)),
        }
    }

    fn tenant_usage(&self) -> Vec<TenantUsage> {
        let mut usage: Vec<TenantUsage> = self
            .tenants
            .lock()
            .iter()
            .map(|(id, t)| {
                let (warm_instances, warm_memory_bytes) = self.engine.warm_instances_of(id);
                TenantUsage {
                    tenant: id.clone(),
                    memory_used_bytes: t.account.used(),
                    memory_quota_bytes: t.account.limit(),
                    concurrency_limit: t.concurrency.limit(),
                    in_flight: t.concurrency.in_use() as u64,
                    weight: t.policy.weight,
                    max_priority: t.policy.max_priority,
                    weights_placed_bytes: t.weights.placed(),
                    old_versions_loaded: self.functions.other_versions(id),
                    warm_instances,
                    warm_memory_bytes: warm_memory_bytes as u64,
                    disk_used_bytes: t.disk_used.load(Ordering::Relaxed),
                    disk_quota_bytes: t.policy.disk_quota_bytes,
                    uploads_in_flight: t.uploads.in_use(),
                    upload_limit: t.uploads.limit(),
                    keep_versions: t.policy.keep_versions,
                }
            })
            .collect();
        usage.sort_by(|a, b| a.tenant.cmp(&b.tenant));
        usage
    }

    /// State and counters of the whole server, every device and every tenant (the admin's view).
    pub async fn status(&self) -> Status {
        let mut devices = Vec::new();
        for q in self.devices.queues() {
            devices.push(DeviceStatus::clone(&*q.shared_status().await));
        }
        let tenants = self.tenant_usage();
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Status {
            version: env!("CARGO_PKG_VERSION"),
            ready: self.is_ready(),
            device: self.device().clone(),
            engine_fingerprint: self.fingerprint.clone(),
            data_dir: self.registry.data_dir().display().to_string(),
            functions_loaded: self.functions.len(),
            compilations: get(&c.compilations),
            compiled_cache_loads: get(&c.compiled_loads),
            batch_guest_yields: self.engine.batch_guest_yields(),
            batch_guest_pauses: self.engine.batch_guest_pauses(),
            invocations: get(&c.invocations),
            invocation_errors: get(&c.invocation_errors),
            rejected: get(&c.rejected),
            in_flight: get(&c.in_flight),
            max_concurrency: self.config.max_concurrency,
            tenant_max_concurrency: self.config.tenant_max_concurrency,
            uptime_ms: self.started.elapsed().as_millis() as u64,
            devices,
            tenants,
            functions: self.metrics.stats.recent_latency(None),
            watching: self.watching.status(None),
            host_memory: self.host_memory.status(None),
            instance_pool: self.engine.pool_status(),
            artifact_metadata_bytes: crate::engine::parsed_metadata_bytes() as u64,
            max_artifact_metadata_bytes: self.config.max_artifact_metadata_bytes as u64,
            max_metadata_json_bytes: self.config.max_metadata_json_bytes as u64,
        }
    }

    /// The run-time state of `tenant`, created from its stored settings on first use.
    pub(crate) fn tenant_runtime(&self, tenant: &str) -> Result<Arc<TenantRuntime>> {
        if let Some(t) = self.tenants.lock().get(tenant) {
            return Ok(t.clone());
        }
        let policy = TenantPolicy::resolve(&self.registry.get_tenant(tenant)?.settings, &self.config);
        let disk_used = self.registry.tenant_disk_usage(tenant)?;
        let runtime = Arc::new(TenantRuntime {
            account: MemoryAccount::new(format!("tenant {tenant:?}"), policy.memory_quota_bytes, None),
            concurrency: ConcurrencyLimit::new(LimitScope::Tenant, policy.max_concurrency),
            weights: WeightLedger::new(policy.memory_quota_bytes),
            uploads: UploadSlots::new(policy.max_uploads),
            disk_used: AtomicU64::new(disk_used),
            policy,
        });
        Ok(self.tenants.lock().entry(tenant.to_owned()).or_insert(runtime).clone())
    }

    fn count(&self, counter: fn(&Counters) -> &AtomicU64) {
        counter(&self.counters).fetch_add(1, Ordering::Relaxed);
    }
}
