//! Tenant administration: create, list, change the policy, delete, and API keys.
//!
//! Thin wrappers over the registry that also keep the run-time state (loaded
//! functions, accounts, semaphores) in step, e.g. a deleted tenant's functions stop
//! serving at once, and a changed policy is in force for the next invocation.

use serde::Serialize;
use serde_json::{Map, Value};
use sluice_registry::{KeyInfo, Tenant, TenantSettings};

use super::policy::{TenantPolicy, TenantView, merge_settings};
use super::{Platform, PlatformError, Result};

/// A freshly issued API key: the plaintext is shown once.
#[derive(Debug, Serialize)]
pub struct IssuedKey {
    pub tenant: String,
    pub key_id: String,
    pub key: String,
}

impl Platform {
    /// Creates a tenant.
    pub fn create_tenant(&self, id: &str, settings: TenantSettings) -> Result<Tenant> {
        Ok(self.registry.create_tenant(id, settings)?)
    }

    /// All tenants.
    pub fn list_tenants(&self) -> Result<Vec<Tenant>> {
        Ok(self.registry.list_tenants()?)
    }

    /// One tenant.
    pub fn get_tenant(&self, id: &str) -> Result<Tenant> {
        Ok(self.registry.get_tenant(id)?)
    }

    /// A tenant with the policy enforced for it (its settings plus the server's defaults).
    pub fn tenant_view(&self, tenant: Tenant) -> TenantView {
        let effective = TenantPolicy::resolve(&tenant.settings, &self.config);
        TenantView { tenant, effective }
    }

    /// Changes a tenant's settings by a JSON merge patch (a key sets a value, `null`
    /// resets it to the server's default), atomically; a refused patch changes nothing.
    /// The new policy is in force for the tenant's next invocation, of every function it
    /// has deployed: its memory account and concurrency limit are rebuilt and its
    /// functions reload (charging their weights to the new account). Invocations in
    /// flight finish under the old policy.
    #[tracing::instrument(name = "sluice_platform.change_tenant", skip(self), err(level = "debug", Display))]
    pub fn change_tenant(&self, id: &str, patch: &Map<String, Value>) -> Result<Tenant> {
        let refused = std::sync::Mutex::new(None);
        let changed = self.registry.change_tenant(id, |current| match merge_settings(current, patch) {
            Ok(s) => Ok(s),
            Err(e) => {
                let message = e.to_string();
                *refused.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                Err(sluice_registry::RegistryError::InvalidInput(message))
            }
        });
        let tenant = match changed {
            Ok(t) => t,
            Err(e) => {
                return Err(refused.lock().unwrap_or_else(|p| p.into_inner()).take().unwrap_or(PlatformError::from(e)));
            }
        };
        self.tenants.lock().remove(id);
        self.functions.remove_tenant(id);
        tracing::info!(tenant = id, settings = ?tenant.settings, "tenant policy changed");
        Ok(tenant)
    }

    /// Deletes a tenant with its keys and functions; its open streams end.
    pub fn delete_tenant(&self, id: &str) -> Result<()> {
        self.registry.delete_tenant(id)?;
        self.revoked();
        self.forget_tenant(id);
        self.collect_garbage();
        Ok(())
    }

    /// Issues a new API key for `tenant`.
    pub fn issue_key(&self, tenant: &str) -> Result<IssuedKey> {
        let (key_id, key) = self.registry.issue_key(tenant)?;
        Ok(IssuedKey { tenant: tenant.to_owned(), key_id, key })
    }

    /// Metadata of a tenant's keys.
    pub fn list_keys(&self, tenant: &str) -> Result<Vec<KeyInfo>> {
        Ok(self.registry.list_tenant_keys(tenant)?)
    }

    /// Revokes one of a tenant's keys; streams and feeds open with it end (see `revocation`).
    pub fn revoke_key(&self, tenant: &str, key_id: &str) -> Result<KeyInfo> {
        let revoked = self.registry.revoke_tenant_key(tenant, key_id)?;
        self.revoked();
        Ok(revoked)
    }
}
