//! The service layer: everything `sluice serve` does, without HTTP.
//!
//! A [`Platform`] owns the durable [`Registry`], the wasmtime [`Engine`], the device's
//! [`DeviceQueue`], the cache of loaded functions, one memory account and one
//! concurrency limit per tenant, and a server-wide concurrency limit.
//!
//! - `cache`: the loaded functions (the newest version of each `(tenant, name)`,
//!   compiled, pre-instantiated and with its shared weights);
//! - `admission`: the concurrency limits (a full server answers 429 at once instead
//!   of queueing);
//! - `functions`: deploy (validate → precompile → durable store → load), artifacts,
//!   list/get/delete, and warm-up at start-up from the stored compiled forms;
//! - `invoke`: admission, then one invocation on a blocking thread;
//! - `tenants`: the admin operations;
//! - `metrics`: Prometheus metrics of invocations, plus the status at scrape time.
//!
//! Methods that touch the disk or compile are synchronous: the HTTP layer calls them on
//! the blocking pool. Errors are [`PlatformError`]s with stable codes.

mod admission;
mod cache;
mod error;
mod functions;
mod invoke;
mod metrics;
mod tenants;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;
use serde::Serialize;
use sluice_registry::{Principal, Registry};

use crate::device::{Device, DeviceInfo};
use crate::engine::{Engine, EngineConfig};
use crate::scheduler::{DevicePool, DeviceStatus, SchedulerConfig};
use crate::scheduler::{DeviceQueue, MemoryAccount};

use admission::ConcurrencyLimit;
use cache::FunctionCache;
pub use error::{LimitScope, PlatformError, Result};
pub use functions::{FunctionInfo, LoadedFunction, WarmReport};
pub use invoke::{Invocation, UNKNOWN_FUNCTION};
pub use metrics::{DURATION_BUCKETS, Metrics};
pub use tenants::IssuedKey;

/// Settings of a platform instance.
#[derive(Clone, Debug)]
pub struct PlatformConfig {
    /// Where the registry lives.
    pub data_dir: PathBuf,
    /// Invocations in flight at once, server-wide.
    pub max_concurrency: u32,
    /// Invocations in flight at once per tenant, unless the tenant's settings say otherwise.
    pub tenant_max_concurrency: u32,
    /// Ceiling of any function's linear memory.
    pub max_memory_bytes: usize,
    /// How each device's scheduler orders work.
    pub scheduler: SchedulerConfig,
    /// Instances of one function version kept warm between invocations.
    pub warm_instances_per_function: usize,
    /// Device-memory quota of a tenant whose settings set none (`None`: unlimited,
    /// bounded only by the device's own account).
    pub default_memory_quota_bytes: Option<u64>,
}

/// Default of [`PlatformConfig::default_memory_quota_bytes`]: quotas are on by default.
pub const DEFAULT_TENANT_MEMORY_QUOTA_BYTES: u64 = 4 << 30;

impl Default for PlatformConfig {
    fn default() -> Self {
        PlatformConfig {
            data_dir: PathBuf::from("./sluice-data"),
            max_concurrency: 64,
            tenant_max_concurrency: 16,
            max_memory_bytes: 1 << 30,
            scheduler: SchedulerConfig::default(),
            warm_instances_per_function: EngineConfig::default().warm_instances_per_function,
            default_memory_quota_bytes: Some(DEFAULT_TENANT_MEMORY_QUOTA_BYTES),
        }
    }
}

/// A tenant's run-time state: its device-memory account and its concurrency limit.
pub(crate) struct TenantRuntime {
    pub(crate) account: Arc<MemoryAccount>,
    pub(crate) concurrency: ConcurrencyLimit,
    /// The tenant's weight in the device schedulers' fair share.
    pub(crate) weight: u32,
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
    /// Device memory per tenant (the caller's own, or every tenant's for the admin).
    pub tenants: Vec<TenantUsage>,
}

/// One tenant's device memory and concurrency.
#[derive(Clone, Debug, Serialize)]
pub struct TenantUsage {
    pub tenant: String,
    pub memory_used_bytes: u64,
    pub memory_quota_bytes: Option<u64>,
    pub concurrency_limit: u32,
    pub weight: u32,
}

/// The service. Share it as `Arc<Platform>`.
pub struct Platform {
    registry: Registry,
    engine: Engine,
    fingerprint: String,
    devices: Arc<DevicePool>,
    config: PlatformConfig,
    functions: FunctionCache,
    tenants: Mutex<HashMap<String, Arc<TenantRuntime>>>,
    global: ConcurrencyLimit,
    counters: Counters,
    metrics: Metrics,
    ready: AtomicBool,
    shutting_down: AtomicBool,
    started: Instant,
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
        let registry = Registry::open(&config.data_dir)?;
        // Room for every invocation in flight plus as many warm instances (the engine
        // keeps at most half of its instances warm).
        let engine = Engine::new(EngineConfig {
            max_instances: config.max_concurrency.clamp(1, 1000) * 2,
            max_memory_bytes: config.max_memory_bytes,
            warm_instances_per_function: config.warm_instances_per_function,
            ..EngineConfig::default()
        })
        .map_err(|e| PlatformError::internal("creating the engine", format!("{e:#}")))?;
        let fingerprint = engine.fingerprint();
        let queues = devices.into_iter().map(|d| DeviceQueue::start_with(d, config.scheduler.clone())).collect();
        let devices = DevicePool::new(queues);
        Ok(Arc::new(Platform {
            registry,
            engine,
            fingerprint,
            devices,
            global: ConcurrencyLimit::new(LimitScope::Global, config.max_concurrency),
            config,
            functions: FunctionCache::default(),
            tenants: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            metrics: Metrics::default(),
            ready: AtomicBool::new(false),
            shutting_down: AtomicBool::new(false),
            started: Instant::now(),
        }))
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
    pub fn authenticate(&self, key: &str) -> Result<Option<Principal>> {
        Ok(self.registry.authenticate(key)?)
    }

    /// True once warm-up is done and until shutdown begins.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire) && !self.shutting_down.load(Ordering::Acquire)
    }

    /// Stops admitting new invocations (in-flight ones finish).
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Release);
    }

    /// Invocations running now.
    pub fn in_flight(&self) -> u64 {
        self.counters.in_flight.load(Ordering::Relaxed)
    }

    /// The metrics text for `GET /metrics`: every tenant's series (admin only).
    pub async fn render_metrics(&self) -> String {
        self.metrics.render(&self.status(&Principal::Admin).await)
    }

    /// State and counters; tenant usage is the caller's own, or everyone's for the admin.
    pub async fn status(&self, caller: &Principal) -> Status {
        let mut devices = Vec::new();
        for q in self.devices.queues() {
            let mut d = q.status().await;
            if let Principal::Tenant(me) = caller {
                d.tenants.retain(|t| &t.tenant == me);
            }
            devices.push(d);
        }
        let tenants = self
            .tenants
            .lock()
            .iter()
            .filter(|(id, _)| {
                matches!(caller, Principal::Admin) || matches!(caller, Principal::Tenant(me) if me == *id)
            })
            .map(|(id, t)| TenantUsage {
                tenant: id.clone(),
                memory_used_bytes: t.account.used(),
                memory_quota_bytes: t.account.limit(),
                concurrency_limit: t.concurrency.limit(),
                weight: t.weight,
            })
            .collect();
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
            invocations: get(&c.invocations),
            invocation_errors: get(&c.invocation_errors),
            rejected: get(&c.rejected),
            in_flight: get(&c.in_flight),
            max_concurrency: self.config.max_concurrency,
            tenant_max_concurrency: self.config.tenant_max_concurrency,
            uptime_ms: self.started.elapsed().as_millis() as u64,
            devices,
            tenants,
        }
    }

    /// The run-time state of `tenant`, created from its stored settings on first use.
    pub(crate) fn tenant_runtime(&self, tenant: &str) -> Result<Arc<TenantRuntime>> {
        if let Some(t) = self.tenants.lock().get(tenant) {
            return Ok(t.clone());
        }
        let settings = self.registry.get_tenant(tenant)?.settings;
        let limit = settings.max_concurrency.unwrap_or(self.config.tenant_max_concurrency);
        let runtime = Arc::new(TenantRuntime {
            account: MemoryAccount::new(
                format!("tenant {tenant:?}"),
                settings.memory_quota_bytes.or(self.config.default_memory_quota_bytes),
                None,
            ),
            concurrency: ConcurrencyLimit::new(LimitScope::Tenant, limit),
            weight: settings.weight,
        });
        Ok(self.tenants.lock().entry(tenant.to_owned()).or_insert(runtime).clone())
    }

    fn count(&self, counter: fn(&Counters) -> &AtomicU64) {
        counter(&self.counters).fetch_add(1, Ordering::Relaxed);
    }
}
