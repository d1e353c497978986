//! Changes made by other nodes of a fleet, put in force on this one.
//!
//! With a shared registry (PostgreSQL) every committed change is announced to every node
//! (the registry's `Watcher`, `LISTEN/NOTIFY`); this node hears its own too. Each
//! [`Change`] is applied where this node keeps registry state of its own:
//!
//! - a function: its loaded versions are dropped unless the serving one is still the
//!   registry's newest (so this node's own deploy, already installed, is kept); the next
//!   request loads the newest version, or gets 404 after a delete. A load that began
//!   before never installs (the function cache's tombstones);
//! - a key: the key cache is cleared and a revocation counted, so the next request looks
//!   its key up again and open streams and feeds check theirs before their next message;
//! - a tenant: as a key (a deleted tenant's keys go with it); if its policy changed, the
//!   tenant's runtime state (its policy, limits and loaded functions) is dropped, to be
//!   built again from the registry; a deleted tenant is forgotten;
//! - a resync (the watcher reconnected and may have missed changes): all of the above
//!   for everything this node holds.
//!
//! With sled (one process) there is nobody else: nothing is followed.

use std::sync::{Arc, Weak};

use sluice_registry::{Change, RegistryError};

use super::policy::TenantPolicy;
use super::{Platform, Result};

impl Platform {
    /// Follows the registry's changes on a thread of its own, when the registry is
    /// shared with other nodes; returns once it listens, so nothing committed after
    /// this call is missed.
    pub fn follow_changes(self: &Arc<Self>) -> Result<()> {
        if !self.registry.location().is_shared() {
            return Ok(());
        }
        let watcher = self.registry.watch()?;
        let platform: Weak<Platform> = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("sluice-changes".into())
            .spawn(move || {
                for change in &watcher {
                    let Some(platform) = platform.upgrade() else { break };
                    platform.apply_change(change);
                }
            })
            .map_err(|e| super::PlatformError::internal("starting the change follower", e))?;
        Ok(())
    }

    /// Puts `change` in force on this node.
    pub(crate) fn apply_change(&self, change: Change) {
        tracing::debug!(?change, "registry change");
        match change {
            Change::Function { tenant, name } => self.function_changed(&tenant, &name),
            Change::Key { .. } => self.revoked(),
            Change::Tenant { tenant } => {
                self.revoked();
                self.tenant_changed(&tenant);
            }
            Change::Resync => {
                tracing::info!("registry changes may have been missed: checking everything loaded");
                self.revoked();
                let tenants: Vec<String> = self.tenants.lock().keys().cloned().collect();
                for tenant in tenants {
                    self.tenant_changed(&tenant);
                }
                for loaded in self.functions.all_serving() {
                    self.function_changed(&loaded.version.tenant, &loaded.version.function);
                }
            }
        }
    }

    /// Drops `tenant/name`'s loaded versions unless the serving one is the newest.
    fn function_changed(&self, tenant: &str, name: &str) {
        let cached = self.cached(tenant, name).map(|l| l.version.version);
        match self.registry.latest_version(tenant, name) {
            // Current: this node's own change, or a pin or draft that leaves the
            // serving version as it was (versions never change once written).
            Ok(newest) if cached == Some(newest.version) => {}
            Ok(_) => self.functions.remove(tenant, name),
            Err(RegistryError::NotFound { .. }) => {
                self.functions.remove(tenant, name);
                self.metrics.forget(tenant, Some(name));
            }
            // The database went away again: keep serving what is loaded (the watcher
            // resyncs once it is back).
            Err(e) if e.is_unavailable() => {
                tracing::warn!(tenant, function = name, error = %e, "could not check a changed function");
            }
            Err(e) => {
                // Serving what may be stale is worse than one reload.
                tracing::warn!(tenant, function = name, error = %e, "could not read a changed function; unloading it");
                self.functions.remove(tenant, name);
            }
        }
        self.refresh_disk_usage(tenant);
    }

    /// Drops `tenant`'s runtime state when its policy changed, to be built again from
    /// the registry (forgets the tenant if it was deleted).
    fn tenant_changed(&self, tenant: &str) {
        let stored = match self.registry.get_tenant(tenant) {
            Ok(stored) => stored,
            Err(RegistryError::NotFound { .. }) => return self.forget_tenant(tenant),
            Err(e) => {
                // As for a function: keep what is in force until the database answers.
                tracing::warn!(tenant, error = %e, "could not check a changed tenant");
                return;
            }
        };
        let Some(runtime) = self.tenants.lock().get(tenant).cloned() else { return };
        if TenantPolicy::resolve(&stored.settings, &self.config) != runtime.policy {
            self.tenants.lock().remove(tenant);
            self.functions.remove_tenant(tenant);
        }
    }
}
