//! Admin-owned tenant policy: what a tenant's invocations may use, and the clamp that
//! enforces it at each invocation.
//!
//! The admin sets a tenant's highest priority class, weight, memory quota,
//! concurrency, uploads in flight, disk quota and versions kept
//! ([`sluice_registry::TenantSettings`]); unset values follow the server's
//! defaults ([`super::PlatformConfig`]). A function (its deploy options) or a request
//! (OIP `parameters.priority`) may ask for less, never more: [`clamp_class`] and
//! [`clamp_weight`] take the lowest of what is asked and what is allowed. They run at
//! every invocation against the policy in force then, so a change applies at once to
//! functions already deployed.

use serde::Serialize;
use serde_json::{Map, Value};
use sluice_registry::{MAX_WEIGHT, PriorityClass, StoragePolicy, Tenant, TenantSettings};

use super::{PlatformConfig, PlatformError, Result};
use crate::scheduler;

/// A tenant's policy with the server's defaults filled in: what is enforced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TenantPolicy {
    /// The highest class its invocations run in.
    pub max_priority: PriorityClass,
    /// Its fair-share weight (the most any of its functions gets).
    pub weight: u32,
    /// Its device-memory quota; `None`: unlimited.
    pub memory_quota_bytes: Option<u64>,
    /// Its invocations in flight at once.
    pub max_concurrency: u32,
    /// Its artifact uploads in flight at once.
    pub max_uploads: u32,
    /// Its disk quota (bytes of the distinct blobs its versions reference); `None`: unlimited.
    pub disk_quota_bytes: Option<u64>,
    /// Versions kept per function (besides serving, staged and pinned ones).
    pub keep_versions: u32,
}

impl TenantPolicy {
    /// `settings` with `config`'s defaults where they leave a value unset. A weight
    /// stored before the bound existed counts as at most [`MAX_WEIGHT`].
    pub fn resolve(settings: &TenantSettings, config: &PlatformConfig) -> TenantPolicy {
        TenantPolicy {
            max_priority: settings.max_priority.unwrap_or(config.default_priority),
            weight: settings.weight.clamp(1, MAX_WEIGHT),
            memory_quota_bytes: settings.memory_quota_bytes.or(config.default_memory_quota_bytes),
            max_concurrency: settings.max_concurrency.unwrap_or(config.tenant_max_concurrency),
            max_uploads: settings.max_uploads.unwrap_or(config.tenant_max_uploads),
            disk_quota_bytes: settings.disk_quota_bytes.or(config.default_disk_quota_bytes),
            keep_versions: settings.keep_versions.unwrap_or(config.default_keep_versions),
        }
    }

    /// Its limits on what its versions store.
    pub fn storage(&self) -> StoragePolicy {
        StoragePolicy { disk_quota_bytes: self.disk_quota_bytes, keep_versions: Some(self.keep_versions) }
    }
}

/// A tenant as stored, with the policy enforced for it.
#[derive(Clone, Debug, Serialize)]
pub struct TenantView {
    #[serde(flatten)]
    pub tenant: Tenant,
    /// The settings with the server's defaults filled in.
    pub effective: TenantPolicy,
}

/// The class an invocation runs in: the lowest of the tenant's ceiling, the function's
/// class and the request's, if it names one.
pub fn clamp_class(allowed: PriorityClass, function: PriorityClass, request: Option<PriorityClass>) -> PriorityClass {
    allowed.min(function).min(request.unwrap_or(function))
}

/// The weight an invocation runs with: the function's, if it names one, but never above
/// its tenant's.
pub fn clamp_weight(tenant: u32, function: Option<u32>) -> u32 {
    function.map_or(tenant, |w| w.min(tenant))
}

/// The registry's priority class as the scheduler's.
pub(crate) fn scheduling_class(class: PriorityClass) -> scheduler::PriorityClass {
    match class {
        PriorityClass::Latency => scheduler::PriorityClass::Latency,
        PriorityClass::Batch => scheduler::PriorityClass::Batch,
    }
}

/// Applies a JSON merge patch (RFC 7396, one level: a key sets a value, `null` resets
/// it to the server's default) to `current`. Unknown keys and wrong types are refused.
pub fn merge_settings(current: &TenantSettings, patch: &Map<String, Value>) -> Result<TenantSettings> {
    let mut merged = match serde_json::to_value(current) {
        Ok(Value::Object(m)) => m,
        _ => return Err(PlatformError::internal("serialising tenant settings", "not an object")),
    };
    for (key, value) in patch {
        if value.is_null() && key == "weight" {
            merged.insert(key.clone(), Value::from(TenantSettings::default().weight));
        } else {
            merged.insert(key.clone(), value.clone());
        }
    }
    serde_json::from_value(Value::Object(merged))
        .map_err(|e| PlatformError::InvalidRequest(format!("invalid tenant settings: {e}")))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use PriorityClass::{Batch, Latency};

    #[test]
    fn a_function_or_a_request_may_ask_for_less_never_more() {
        assert_eq!(clamp_class(Batch, Latency, None), Batch, "the function's latency is capped");
        assert_eq!(clamp_class(Batch, Latency, Some(Latency)), Batch, "so is the request's");
        assert_eq!(clamp_class(Latency, Latency, Some(Batch)), Batch, "a request may ask for less");
        assert_eq!(clamp_class(Latency, Batch, Some(Latency)), Batch, "not more than its function");
        assert_eq!(clamp_class(Latency, Latency, None), Latency);
        assert_eq!(clamp_weight(4, None), 4);
        assert_eq!(clamp_weight(4, Some(u32::MAX)), 4, "a function's weight never overrides upward");
        assert_eq!(clamp_weight(4, Some(2)), 2);
    }

    #[test]
    fn unset_settings_follow_the_server_defaults() {
        let config = PlatformConfig {
            default_priority: Batch,
            default_memory_quota_bytes: Some(1 << 30),
            tenant_max_concurrency: 7,
            tenant_max_uploads: 3,
            default_disk_quota_bytes: Some(1 << 40),
            default_keep_versions: 5,
            ..PlatformConfig::default()
        };
        let p = TenantPolicy::resolve(&TenantSettings::default(), &config);
        assert_eq!(
            p,
            TenantPolicy {
                max_priority: Batch,
                weight: 1,
                memory_quota_bytes: Some(1 << 30),
                max_concurrency: 7,
                max_uploads: 3,
                disk_quota_bytes: Some(1 << 40),
                keep_versions: 5,
            }
        );
        let set = TenantSettings {
            weight: 3,
            max_priority: Some(Latency),
            memory_quota_bytes: Some(5),
            max_concurrency: Some(2),
            max_uploads: Some(1),
            disk_quota_bytes: Some(6),
            keep_versions: Some(2),
        };
        let p = TenantPolicy::resolve(&set, &config);
        assert_eq!((p.max_priority, p.weight, p.memory_quota_bytes, p.max_concurrency), (Latency, 3, Some(5), 2));
        assert_eq!((p.max_uploads, p.disk_quota_bytes, p.keep_versions), (1, Some(6), 2));
        // A record stored before the bound (validation only runs on writes).
        let old = TenantSettings { weight: u32::MAX, ..TenantSettings::default() };
        assert_eq!(TenantPolicy::resolve(&old, &config).weight, MAX_WEIGHT);
    }

    #[test]
    fn a_merge_patch_sets_resets_and_refuses_unknown_keys() {
        let current = TenantSettings { weight: 3, memory_quota_bytes: Some(9), ..TenantSettings::default() };
        let patch = json!({ "max_priority": "latency", "memory_quota_bytes": null });
        let merged = merge_settings(&current, patch.as_object().unwrap()).unwrap();
        assert_eq!(merged.weight, 3, "absent keys keep their value");
        assert_eq!(merged.max_priority, Some(Latency));
        assert_eq!(merged.memory_quota_bytes, None, "null resets to the server's default");
        let reset = merge_settings(&current, json!({ "weight": null }).as_object().unwrap()).unwrap();
        assert_eq!(reset.weight, 1);
        for bad in [json!({ "wieght": 2 }), json!({ "weight": "heavy" }), json!({ "max_priority": "urgent" })] {
            let e = merge_settings(&current, bad.as_object().unwrap()).unwrap_err();
            assert!(matches!(e, PlatformError::InvalidRequest(_)), "{bad}: {e}");
        }
    }
}
