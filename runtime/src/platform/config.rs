//! The settings of a [`Platform`](super::Platform) (`sluice serve`'s flags land here) and
//! their defaults.

use std::path::PathBuf;
use std::time::Duration;

use sluice_registry::PriorityClass;

use super::{HostMemoryLimits, ModelRepository, WatchLimits};
use crate::engine::EngineConfig;
use crate::scheduler::SchedulerConfig;

/// Settings of a platform instance.
#[derive(Clone, Debug)]
pub struct PlatformConfig {
    /// Where the registry lives (sled in `data_dir`, unless `registry` says otherwise).
    pub data_dir: PathBuf,
    /// The registry's database: a `postgres://` URL (blobs in `<data_dir>/blobs`) or a
    /// directory; `None`: sled in `data_dir`.
    pub registry: Option<String>,
    /// The blob directory with a `postgres://` registry (shared by the nodes; `None`:
    /// `<data_dir>/blobs`).
    pub blob_dir: Option<PathBuf>,
    /// Invocations in flight at once, server-wide.
    pub max_concurrency: u32,
    /// Invocations in flight at once per tenant, unless the tenant's settings say otherwise.
    pub tenant_max_concurrency: u32,
    /// The highest priority class of a tenant whose settings name none.
    pub default_priority: PriorityClass,
    /// The device-memory quota of a tenant whose settings name none (`None`: unlimited,
    /// bounded only by the device's own account). `sluice serve` sets a share of the
    /// device (`--default-memory-quota`, 25%).
    pub default_memory_quota_bytes: Option<u64>,
    /// Ceiling of any function's linear memory.
    pub max_memory_bytes: usize,
    /// How each device's scheduler orders work.
    pub scheduler: SchedulerConfig,
    /// Instances of one function version kept warm between invocations.
    pub warm_instances_per_function: usize,
    /// How long batch-class guests stay paused after the last latency-class invocation
    /// ends (`EngineConfig::latency_linger`).
    pub latency_linger: Duration,
    /// Non-serving versions (`/versions/{v}` of an old version or a staged draft) each
    /// tenant keeps loaded, most recently used first; 0 loads one for every request.
    pub old_versions_per_tenant: usize,
    /// What a tenant may make the server do to watch it: status calls a second, live
    /// feeds open at once (`watching`).
    pub watch: WatchLimits,
    /// Host memory a tenant's requests and streams may hold (`host_memory`).
    pub host_memory: HostMemoryLimits,
    /// Host memory one GGUF artifact's parsed metadata and tensor index may take
    /// (`--max-artifact-metadata-bytes`); over it the guest's call fails with `too-large`.
    pub max_artifact_metadata_bytes: usize,
    /// Most bytes of GGUF metadata JSON one guest call may read
    /// (`--max-metadata-json-bytes`); over it the call fails with `too-large`.
    pub max_metadata_json_bytes: usize,
    /// Per-component limits checked at deploy (`component_limit_exceeded`), which size
    /// the instance pool (`EngineConfig::max_core_instances_per_component` and the next two).
    pub max_core_instances_per_component: u32,
    pub max_memories_per_component: u32,
    pub max_tables_per_component: u32,
    /// Warm instances one tenant may keep over all its functions
    /// (`EngineConfig::tenant_max_warm_instances`).
    pub tenant_max_warm_instances: usize,
    /// Bytes of linear memory one tenant's warm instances may hold together
    /// (`EngineConfig::tenant_max_warm_memory_bytes`).
    pub tenant_max_warm_memory_bytes: usize,
    /// How long an unused warm instance is kept (`EngineConfig::warm_idle_timeout`).
    pub warm_idle_timeout: Duration,
    /// Artifact uploads in flight at once per tenant, unless its settings say otherwise
    /// (`--tenant-max-uploads`); more are refused with 429 `too_many_uploads`.
    pub tenant_max_uploads: u32,
    /// The disk quota of a tenant whose settings name none (`None`: unlimited;
    /// `--default-disk-quota-mib`); writes above it are refused with 429 `disk_quota_exceeded`.
    pub default_disk_quota_bytes: Option<u64>,
    /// Versions kept per function of a tenant whose settings name no count
    /// (`--keep-versions`); older ones (not serving, staged or pinned) are pruned.
    pub default_keep_versions: u32,
    /// The model repository (`--model-dir`), whose bundles the repository API loads.
    pub model_repository: Option<ModelRepository>,
    /// Repository calls without a key, from the loopback interface and not forwarded by
    /// a proxy, act as the admin: KServe's model agent (a sidecar in the pod) sends none.
    pub keyless_local_repository: bool,
}

/// Default of [`PlatformConfig::old_versions_per_tenant`].
pub const DEFAULT_OLD_VERSIONS_PER_TENANT: usize = 2;

/// Default of [`PlatformConfig::default_memory_quota_bytes`]: quotas are on by default.
pub const DEFAULT_TENANT_MEMORY_QUOTA_BYTES: u64 = 4 << 30;

/// Default of [`PlatformConfig::tenant_max_uploads`].
pub const DEFAULT_TENANT_MAX_UPLOADS: u32 = 4;

/// Default of [`PlatformConfig::default_disk_quota_bytes`]: 10 GiB per tenant.
pub const DEFAULT_TENANT_DISK_QUOTA_BYTES: u64 = 10 << 30;

/// Default of [`PlatformConfig::default_keep_versions`].
pub const DEFAULT_KEEP_VERSIONS: u32 = 10;

impl Default for PlatformConfig {
    fn default() -> Self {
        PlatformConfig {
            data_dir: PathBuf::from("./sluice-data"),
            registry: None,
            blob_dir: None,
            max_concurrency: 64,
            tenant_max_concurrency: 16,
            default_priority: PriorityClass::Batch,
            max_memory_bytes: 1 << 30,
            scheduler: SchedulerConfig::default(),
            warm_instances_per_function: EngineConfig::default().warm_instances_per_function,
            latency_linger: EngineConfig::default().latency_linger,
            default_memory_quota_bytes: Some(DEFAULT_TENANT_MEMORY_QUOTA_BYTES),
            old_versions_per_tenant: DEFAULT_OLD_VERSIONS_PER_TENANT,
            watch: WatchLimits::default(),
            host_memory: HostMemoryLimits::default(),
            max_artifact_metadata_bytes: crate::engine::gguf::DEFAULT_MAX_PARSED_BYTES,
            max_metadata_json_bytes: crate::engine::DEFAULT_MAX_METADATA_JSON_BYTES,
            max_core_instances_per_component: EngineConfig::default().max_core_instances_per_component,
            max_memories_per_component: EngineConfig::default().max_memories_per_component,
            max_tables_per_component: EngineConfig::default().max_tables_per_component,
            tenant_max_warm_instances: EngineConfig::default().tenant_max_warm_instances,
            tenant_max_warm_memory_bytes: EngineConfig::default().tenant_max_warm_memory_bytes,
            warm_idle_timeout: EngineConfig::default().warm_idle_timeout,
            tenant_max_uploads: DEFAULT_TENANT_MAX_UPLOADS,
            default_disk_quota_bytes: Some(DEFAULT_TENANT_DISK_QUOTA_BYTES),
            default_keep_versions: DEFAULT_KEEP_VERSIONS,
            model_repository: None,
            keyless_local_repository: false,
        }
    }
}
