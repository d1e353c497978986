//! Tenant administration: create, list, delete, and API keys.
//!
//! Thin wrappers over the registry that also keep the run-time state (loaded
//! functions, accounts, semaphores) in step, e.g. a deleted tenant's functions stop
//! serving at once.

use serde::Serialize;
use sluice_registry::{KeyInfo, Tenant, TenantSettings};

use super::{Platform, Result};

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

    /// Deletes a tenant with its keys and functions.
    pub fn delete_tenant(&self, id: &str) -> Result<()> {
        self.registry.delete_tenant(id)?;
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

    /// Revokes one of a tenant's keys.
    pub fn revoke_key(&self, tenant: &str, key_id: &str) -> Result<KeyInfo> {
        Ok(self.registry.revoke_tenant_key(tenant, key_id)?)
    }
}
