//! Tenants: create, read, update settings, delete (with everything they own).

use crate::model::{Principal, Tenant, TenantSettings, now_ms, validate_tenant_id};
use crate::{KeyInfo, Registry, RegistryError, Result, abort, get_json, scan_json, tx_get, tx_put};

impl Registry {
    /// Creates a tenant. [`RegistryError::AlreadyExists`] if the id is taken.
    #[tracing::instrument(name = "sluice_registry.create_tenant", skip(self), err(level = "debug"))]
    pub fn create_tenant(&self, id: &str, settings: TenantSettings) -> Result<Tenant> {
        validate_tenant_id(id)?;
        settings.validate()?;
        let tenant = Tenant { id: id.to_owned(), created_ms: now_ms(), settings };
        let _w = self.write_lock();
        self.commit(|tx| {
            if tx.tenants.get(id.as_bytes())?.is_some() {
                return abort(RegistryError::exists(format!("tenant {id:?}")));
            }
            tx_put(tx.tenants, id.as_bytes(), &tenant)
        })?;
        Ok(tenant)
    }

    /// One tenant.
    pub fn get_tenant(&self, id: &str) -> Result<Tenant> {
        validate_tenant_id(id)?;
        get_json(&self.tenants, id.as_bytes())?.ok_or_else(|| RegistryError::not_found(format!("tenant {id:?}")))
    }

    /// All tenants, ordered by id.
    pub fn list_tenants(&self) -> Result<Vec<Tenant>> {
        Ok(scan_json(&self.tenants, b"")?.into_iter().map(|(_, t)| t).collect())
    }

    /// Replaces a tenant's settings.
    pub fn update_tenant(&self, id: &str, settings: TenantSettings) -> Result<Tenant> {
        self.change_tenant(id, |_| Ok(settings.clone()))
    }

    /// Changes a tenant's settings with `change` (given the stored ones) in one
    /// transaction, so two concurrent changes cannot lose one another. The result is
    /// validated; on any error nothing changes.
    #[tracing::instrument(name = "sluice_registry.change_tenant", skip(self, change), err(level = "debug"))]
    pub fn change_tenant(
        &self,
        id: &str,
        change: impl Fn(&TenantSettings) -> Result<TenantSettings>,
    ) -> Result<Tenant> {
        validate_tenant_id(id)?;
        let _w = self.write_lock();
        self.commit(|tx| {
            let Some(mut tenant) = tx_get::<Tenant>(tx.tenants, id.as_bytes())? else {
                return abort(RegistryError::not_found(format!("tenant {id:?}")));
            };
            let settings = match change(&tenant.settings).and_then(|s| s.validate().map(|()| s)) {
                Ok(s) => s,
                Err(e) => return abort(e),
            };
            tenant.settings = settings;
            tx_put(tx.tenants, id.as_bytes(), &tenant)?;
            Ok(tenant)
        })
    }

    /// Deletes a tenant with its API keys, functions, versions and compiled entries, in one
    /// transaction. Blob files stay until [`Registry::gc`].
    #[tracing::instrument(name = "sluice_registry.delete_tenant", skip(self), err(level = "debug"))]
    pub fn delete_tenant(&self, id: &str) -> Result<()> {
        validate_tenant_id(id)?;
        let _w = self.write_lock();
        // Scans are consistent with the transaction because the write lock is held.
        let prefix = format!("{id}/");
        let fn_keys = keys_under(&self.functions, prefix.as_bytes())?;
        let version_keys = keys_under(&self.versions, prefix.as_bytes())?;
        let compiled_keys = keys_under(&self.compiled, prefix.as_bytes())?;
        let principal = Principal::Tenant(id.to_owned());
        let api_keys: Vec<sled::IVec> = scan_json::<KeyInfo>(&self.keys, b"")?
            .into_iter()
            .filter(|(_, k)| k.principal == principal)
            .map(|(hash, _)| hash)
            .collect();
        self.commit(|tx| {
            if tx.tenants.remove(id.as_bytes())?.is_none() {
                return abort(RegistryError::not_found(format!("tenant {id:?}")));
            }
            for k in &fn_keys {
                tx.functions.remove(k)?;
            }
            for k in &version_keys {
                tx.versions.remove(k)?;
            }
            for k in &compiled_keys {
                tx.compiled.remove(k)?;
            }
            for k in &api_keys {
                tx.keys.remove(k)?;
            }
            Ok(())
        })?;
        tracing::info!(tenant = id, functions = fn_keys.len(), keys = api_keys.len(), "tenant deleted");
        Ok(())
    }
}

/// All keys of `tree` under `prefix`.
pub(crate) fn keys_under(tree: &sled::Tree, prefix: &[u8]) -> Result<Vec<sled::IVec>> {
    tree.scan_prefix(prefix).keys().map(|k| k.map_err(RegistryError::from)).collect()
}
