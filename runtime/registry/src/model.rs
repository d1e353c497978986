//! The registry's data types and naming rules.
//!
//! Everything here is plain data that serialises to the JSON stored in sled (and that the
//! HTTP layer may return as-is). Validation of names lives here too, so the rules are
//! stated once: tenants `[a-z0-9][a-z0-9-]{0,62}`, functions `[a-z0-9][a-z0-9-_.]{0,62}`,
//! artifacts `[A-Za-z0-9][A-Za-z0-9-_.]{0,127}`.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::{RegistryError, Result};

/// Default per-invocation timeout of a function version.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// Default linear-memory limit of a function instance (256 MiB).
pub const DEFAULT_MEMORY_LIMIT_BYTES: u64 = 256 * 1024 * 1024;

/// A lowercase hex sha256 digest (64 characters). Parsing validates it, so a `Digest` is
/// always safe to use as a file name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Digest(String);

impl Digest {
    /// Parses a 64-character lowercase hex sha256 digest.
    pub fn parse(s: &str) -> Result<Digest> {
        if s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            Ok(Digest(s.to_owned()))
        } else {
            Err(RegistryError::InvalidName {
                kind: "digest",
                name: s.to_owned(),
                rule: "must be 64 lowercase hex characters (sha256)",
            })
        }
    }

    /// The sha256 digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        use sha2::Digest as _;
        Digest(hex::encode(sha2::Sha256::digest(bytes)))
    }

    pub(crate) fn from_sha(hash: &[u8]) -> Digest {
        Digest(hex::encode(hash))
    }

    /// The hex string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for Digest {
    type Error = RegistryError;
    fn try_from(s: String) -> Result<Digest> {
        Digest::parse(&s)
    }
}

impl From<Digest> for String {
    fn from(d: Digest) -> String {
        d.0
    }
}

/// A reference to a stored blob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobRef {
    /// sha256 of the content.
    pub digest: Digest,
    /// Size in bytes.
    pub size: u64,
}

/// The largest fair-share weight a tenant or a function may have. Weights are relative
/// (a tenant of weight 4 gets four times the device time of a tenant of weight 1 when
/// both are busy), so a larger range buys nothing but lets one tenant dwarf every other.
pub const MAX_WEIGHT: u32 = 1000;

/// Per-tenant scheduling and resource settings: the tenant's policy, owned by the admin.
///
/// A function (at deploy) or a request (OIP `parameters.priority`) may ask for less than
/// this, never more; the clamp happens at each invocation against the settings in force
/// then, so a change applies to functions already deployed. `None` in `max_priority` or
/// `memory_quota_bytes` means the server's default (`--default-priority`,
/// `--default-memory-quota`); records stored before these fields existed load that way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TenantSettings {
    /// Fair-share weight, 1..=[`MAX_WEIGHT`].
    pub weight: u32,
    /// The highest priority class the tenant's invocations may run in; `None`: the server's default.
    pub max_priority: Option<PriorityClass>,
    /// Device-memory quota; `None`: the server's default quota.
    pub memory_quota_bytes: Option<u64>,
    /// Maximum concurrent invocations; `None`: the server's per-tenant default.
    pub max_concurrency: Option<u32>,
    /// Artifact uploads in flight at once; `None`: the server's default (`--tenant-max-uploads`).
    pub max_uploads: Option<u32>,
    /// Disk quota: bytes of the distinct blobs its versions reference; `None`: the
    /// server's default (`--default-disk-quota-mib`).
    pub disk_quota_bytes: Option<u64>,
    /// Versions kept per function besides the serving one, a staged draft and pinned
    /// ones (older ones are pruned); `None`: the server's default (`--keep-versions`).
    pub keep_versions: Option<u32>,
}

impl Default for TenantSettings {
    fn default() -> Self {
        TenantSettings {
            weight: 1,
            max_priority: None,
            memory_quota_bytes: None,
            max_concurrency: None,
            max_uploads: None,
            disk_quota_bytes: None,
            keep_versions: None,
        }
    }
}

impl TenantSettings {
    /// Checks the ranges (weight 1..=[`MAX_WEIGHT`], concurrency ≥ 1, quota ≥ 1).
    pub fn validate(&self) -> Result<()> {
        if self.weight == 0 || self.weight > MAX_WEIGHT {
            return Err(RegistryError::InvalidInput(format!(
                "tenant weight must be between 1 and {MAX_WEIGHT}, got {}",
                self.weight
            )));
        }
        if self.max_concurrency == Some(0) {
            return Err(RegistryError::InvalidInput(
                "max_concurrency must be at least 1 (null: the server's default)".into(),
            ));
        }
        if self.memory_quota_bytes == Some(0) {
            return Err(RegistryError::InvalidInput(
                "memory_quota_bytes must be at least 1 (null: the server's default)".into(),
            ));
        }
        for (name, value) in [
            ("max_uploads", self.max_uploads.map(u64::from)),
            ("disk_quota_bytes", self.disk_quota_bytes),
            ("keep_versions", self.keep_versions.map(u64::from)),
        ] {
            if value == Some(0) {
                return Err(RegistryError::InvalidInput(format!(
                    "{name} must be at least 1 (null: the server's default)"
                )));
            }
        }
        Ok(())
    }
}

/// A tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tenant {
    /// Validated tenant id.
    pub id: String,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_ms: u64,
    /// Current settings.
    pub settings: TenantSettings,
}

/// Who an API key authenticates as.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Principal {
    /// The operator: manages tenants.
    Admin,
    /// A tenant: sees and touches only its own functions.
    Tenant(String),
}

/// Public metadata of an API key (the key itself is never stored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyInfo {
    /// Public identifier, used to revoke the key.
    pub key_id: String,
    /// Whom the key authenticates.
    pub principal: Principal,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_ms: u64,
}

/// Scheduling class of a function. Ordered by privilege: `Batch < Latency`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PriorityClass {
    /// Best-effort throughput work.
    Batch,
    /// Latency-critical: strict priority, reserved partition.
    #[default]
    Latency,
}

/// Options a function version runs with. Immutable once the version exists.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FunctionOptions {
    /// The class the function asks for; it runs in at most its tenant's `max_priority`.
    pub priority: PriorityClass,
    /// The weight it asks for; it runs with at most its tenant's weight (`None`: the tenant's).
    pub weight: Option<u32>,
    /// Per-invocation timeout.
    pub timeout_ms: u64,
    /// Linear-memory limit of an instance.
    pub memory_limit_bytes: u64,
    /// Dynamic batching across requests (`None`: each request runs alone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batching: Option<Batching>,
    /// Open-ended options for later features; stored verbatim.
    pub extras: serde_json::Map<String, serde_json::Value>,
}

/// The most rows a dynamically batched invocation may carry.
pub const MAX_BATCH_SIZE: u32 = 1024;

/// The longest a request may be held for its batch to fill (1 s).
pub const MAX_QUEUE_DELAY_US: u64 = 1_000_000;

/// The queue delay when a deploy names a batch size and no delay (1 ms).
pub const DEFAULT_QUEUE_DELAY_US: u64 = 1_000;

/// A function's dynamic-batching settings: the host holds requests of one version and
/// priority class for at most `max_queue_delay_us`, concatenates their inputs along the
/// first axis up to `max_batch_size` rows, runs one invocation and splits its outputs
/// back by rows. The function must treat the first axis of every input and output as
/// its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Batching {
    /// Most rows (first-axis elements, summed over the requests) in one invocation.
    pub max_batch_size: u32,
    /// Longest a request waits for others to join its batch, in microseconds.
    #[serde(default = "default_queue_delay_us")]
    pub max_queue_delay_us: u64,
}

fn default_queue_delay_us() -> u64 {
    DEFAULT_QUEUE_DELAY_US
}

impl Batching {
    /// The batching a deploy asks for: none without a batch size; the default delay
    /// when only the size is given. A delay without a size is an error.
    pub fn given(max_batch_size: Option<u32>, max_queue_delay_us: Option<u64>) -> Result<Option<Batching>> {
        match (max_batch_size, max_queue_delay_us) {
            (None, None) => Ok(None),
            (None, Some(_)) => Err(RegistryError::InvalidInput(
                "max_queue_delay_us needs max_batch_size (batching is off without it)".into(),
            )),
            (Some(max_batch_size), delay) => {
                Ok(Some(Batching { max_batch_size, max_queue_delay_us: delay.unwrap_or(DEFAULT_QUEUE_DELAY_US) }))
            }
        }
    }

    /// Checks the ranges (batch size 1..=[`MAX_BATCH_SIZE`], delay ≤ [`MAX_QUEUE_DELAY_US`]).
    pub fn validate(&self) -> Result<()> {
        if self.max_batch_size == 0 || self.max_batch_size > MAX_BATCH_SIZE {
            return Err(RegistryError::InvalidInput(format!(
                "max_batch_size must be between 1 and {MAX_BATCH_SIZE}, got {}",
                self.max_batch_size
            )));
        }
        if self.max_queue_delay_us > MAX_QUEUE_DELAY_US {
            return Err(RegistryError::InvalidInput(format!(
                "max_queue_delay_us must be at most {MAX_QUEUE_DELAY_US} (1 s), got {}",
                self.max_queue_delay_us
            )));
        }
        Ok(())
    }
}

impl Default for FunctionOptions {
    fn default() -> Self {
        FunctionOptions {
            priority: PriorityClass::Latency,
            weight: None,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            memory_limit_bytes: DEFAULT_MEMORY_LIMIT_BYTES,
            batching: None,
            extras: serde_json::Map::new(),
        }
    }
}

impl FunctionOptions {
    /// The options given, and the defaults for those not given (no `extras`).
    pub fn given(
        priority: Option<PriorityClass>,
        weight: Option<u32>,
        timeout_ms: Option<u64>,
        memory_limit_bytes: Option<u64>,
    ) -> FunctionOptions {
        let defaults = FunctionOptions::default();
        FunctionOptions {
            priority: priority.unwrap_or(defaults.priority),
            weight,
            timeout_ms: timeout_ms.unwrap_or(defaults.timeout_ms),
            memory_limit_bytes: memory_limit_bytes.unwrap_or(defaults.memory_limit_bytes),
            ..defaults
        }
    }

    /// The same options with `batching`.
    pub fn with_batching(self, batching: Option<Batching>) -> FunctionOptions {
        FunctionOptions { batching, ..self }
    }

    /// Checks the ranges (weight 1..=[`MAX_WEIGHT`], timeout ≥ 1 ms, memory limit ≥ 64 KiB,
    /// one page; the batching's own, [`Batching::validate`]).
    pub fn validate(&self) -> Result<()> {
        if let Some(w) = self.weight
            && (w == 0 || w > MAX_WEIGHT)
        {
            return Err(RegistryError::InvalidInput(format!(
                "function weight must be between 1 and {MAX_WEIGHT}, got {w}"
            )));
        }
        if self.timeout_ms == 0 {
            return Err(RegistryError::InvalidInput("timeout_ms must be at least 1".into()));
        }
        if self.memory_limit_bytes < 65_536 {
            return Err(RegistryError::InvalidInput(
                "memory_limit_bytes must be at least 65536 (one Wasm page)".into(),
            ));
        }
        if let Some(batching) = &self.batching {
            batching.validate()?;
        }
        Ok(())
    }
}

/// Why a version was created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum VersionOrigin {
    /// A component upload (deploy).
    Deploy,
    /// Artifact uploads on top of the previous version (same component and options).
    Artifacts {
        /// Names of the artifacts added or replaced.
        names: Vec<String>,
    },
    /// An artifact removed from the previous version.
    ArtifactRemoved {
        /// The removed artifact.
        name: String,
    },
}

/// One immutable version of a function.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionVersion {
    /// Owning tenant.
    pub tenant: String,
    /// Function name.
    pub function: String,
    /// 1, 2, 3, … per function.
    pub version: u32,
    /// The uploaded component.
    pub component: BlobRef,
    /// Options it runs with.
    pub options: FunctionOptions,
    /// Artifacts (e.g. weights) this version sees, by name.
    pub artifacts: BTreeMap<String, BlobRef>,
    /// Why it was created.
    pub origin: VersionOrigin,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_ms: u64,
    /// A staged version does not serve; its artifacts may still be added or removed (in
    /// place, without a new version) until it is published. Versions stored before
    /// staging existed load as published.
    #[serde(default)]
    pub staged: bool,
    /// A pinned version is never pruned by the retention policy (see `retention`).
    #[serde(default)]
    pub pinned: bool,
    /// The host API version its component was built against (`"1.1.0"` for imports of
    /// `sluice:gpu/…@1.1.0`), as the engine read it at deploy; absent for a component
    /// that imports nothing of the host API and for versions stored before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_api: Option<String>,
}

/// What a deploy says about the version it makes, besides its options.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewVersion {
    /// A staged version does not serve until published.
    pub staged: bool,
    /// See [`FunctionVersion::host_api`].
    pub host_api: Option<String>,
}

/// A function with all its versions (oldest first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionRecord {
    /// Owning tenant.
    pub tenant: String,
    /// Function name.
    pub name: String,
    /// Creation time of version 1.
    pub created_ms: u64,
    /// All versions, ascending.
    pub versions: Vec<FunctionVersion>,
}

impl FunctionRecord {
    /// The newest version (perhaps staged).
    pub fn latest(&self) -> &FunctionVersion {
        self.versions.last().expect("a stored function has at least one version")
    }

    /// The version that serves: the newest published one, if any.
    pub fn serving(&self) -> Option<&FunctionVersion> {
        self.versions.iter().rev().find(|v| !v.staged)
    }
}

/// A function and its newest version, for listings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionSummary {
    /// Owning tenant.
    pub tenant: String,
    /// Function name.
    pub name: String,
    /// Creation time of version 1.
    pub created_ms: u64,
    /// The newest version (perhaps staged).
    pub latest: FunctionVersion,
    /// The version that serves (the newest published one); `None` while the only
    /// versions are staged.
    pub serving: Option<FunctionVersion>,
}

/// A precompiled (engine-specific) form of a version's component.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompiledRef {
    /// The engine fingerprint it was compiled for.
    pub fingerprint: String,
    /// The compiled bytes.
    pub blob: BlobRef,
    /// When it was stored.
    pub created_ms: u64,
}

/// What [`crate::Registry::gc`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcReport {
    /// Blobs still referenced.
    pub kept: u64,
    /// Unreferenced blobs deleted.
    pub removed: u64,
    /// Bytes freed.
    pub freed_bytes: u64,
    /// Stale temporary files (from interrupted writes) deleted.
    pub temp_files_removed: u64,
    /// Unreferenced blobs kept because they are younger than the grace period (another
    /// node may be about to reference them).
    #[serde(default)]
    pub young: u64,
}

/// Checks a tenant id: `[a-z0-9][a-z0-9-]{0,62}`.
pub fn validate_tenant_id(id: &str) -> Result<()> {
    check_name(
        "tenant",
        id,
        63,
        |b| b.is_ascii_lowercase() || b.is_ascii_digit(),
        |b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-',
    )
    .map_err(|rule| RegistryError::InvalidName { kind: "tenant", name: id.to_owned(), rule })
}

/// Checks a function name: `[a-z0-9][a-z0-9-_.]{0,62}`.
pub fn validate_function_name(name: &str) -> Result<()> {
    check_name(
        "function",
        name,
        63,
        |b| b.is_ascii_lowercase() || b.is_ascii_digit(),
        |b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.'),
    )
    .map_err(|rule| RegistryError::InvalidName { kind: "function", name: name.to_owned(), rule })
}

/// Checks an artifact name: `[A-Za-z0-9][A-Za-z0-9-_.]{0,127}`.
pub fn validate_artifact_name(name: &str) -> Result<()> {
    check_name(
        "artifact",
        name,
        128,
        |b| b.is_ascii_alphanumeric(),
        |b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'),
    )
    .map_err(|rule| RegistryError::InvalidName { kind: "artifact", name: name.to_owned(), rule })
}

fn check_name(
    kind: &'static str,
    name: &str,
    max: usize,
    first: impl Fn(u8) -> bool,
    rest: impl Fn(u8) -> bool,
) -> std::result::Result<(), &'static str> {
    let rule = match kind {
        "tenant" => "must match [a-z0-9][a-z0-9-]{0,62}",
        "function" => "must match [a-z0-9][a-z0-9-_.]{0,62}",
        _ => "must match [A-Za-z0-9][A-Za-z0-9-_.]{0,127}",
    };
    let bytes = name.as_bytes();
    match bytes.split_first() {
        Some((&b, tail)) if bytes.len() <= max && first(b) && tail.iter().all(|&b| rest(b)) => Ok(()),
        _ => Err(rule),
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
