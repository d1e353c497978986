//! Tenants: create, read, update settings, delete (with everything they own).

use crate::change::Change;
use crate::model::{Principal, Tenant, TenantSettings, now_ms, validate_tenant_id};
use crate::{KeyInfo, Registry, RegistryError, Result, Tree, abort};

impl Registry {
    /// Creates a tenant. [`RegistryError::AlreadyExists`] if the id is taken.
    #[tracing::instrument(name = "sluice_registry.create_tenant", skip(self), err(level = "debug"))]
    pub fn create_tenant(&self, id: &str, settings: TenantSettings) -> Result<Tenant> {
        validate_tenant_id(id)?;
        settings.validate()?;
        let tenant = Tenant { id: id.to_owned(), created_ms: now_ms(), settings };
        let _w = self.write_lock();
        self.commit(|tx| {
            if tx.get(Tree::Tenants, id.as_bytes())?.is_some() {
                return abort(RegistryError::exists(format!("tenant {id:?}")));
            }
            tx.put_json(Tree::Tenants, id.as_bytes(), &tenant)?;
            tx.notify(tenant_changed(id));
            Ok(())
        })?;
        Ok(tenant)
    }

    /// One tenant.
    pub fn get_tenant(&self, id: &str) -> Result<Tenant> {
        validate_tenant_id(id)?;
        self.store
            .get_json(Tree::Tenants, id.as_bytes())?
            .ok_or_else(|| RegistryError::not_found(format!("tenant {id:?}")))
    }

    /// All tenants, ordered by id.
    pub fn list_tenants(&self) -> Result<Vec<Tenant>> {
        Ok(self.store.scan_json(Tree::Tenants, b"")?.into_iter().map(|(_, t)| t).collect())
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
            let Some(mut tenant) = tx.get_json::<Tenant>(Tree::Tenants, id.as_bytes())? else {
                return abort(RegistryError::not_found(format!("tenant {id:?}")));
            };
            let settings = match change(&tenant.settings).and_then(|s| s.validate().map(|()| s)) {
                Ok(s) => s,
                Err(e) => return abort(e),
            };
            tenant.settings = settings;
            tx.put_json(Tree::Tenants, id.as_bytes(), &tenant)?;
            tx.notify(tenant_changed(id));
            Ok(tenant)
        })
    }

    /// Deletes a tenant with its API keys, functions, versions and compiled entries, in one
    /// transaction. Blob files stay until [`Registry::gc`].
    #[tracing::instrument(name = "sluice_registry.delete_tenant", skip(self), err(level = "debug"))]
    pub fn delete_tenant(&self, id: &str) -> Result<()> {
        validate_tenant_id(id)?;
        let _w = self.write_lock();
        let prefix = format!("{id}/");
        let principal = Principal::Tenant(id.to_owned());
        let (functions, keys) = self.commit(|tx| {
            let fn_keys = tx.keys(Tree::Functions, prefix.as_bytes())?;
            let version_keys = tx.keys(Tree::Versions, prefix.as_bytes())?;
            let compiled_keys = tx.keys(Tree::Compiled, prefix.as_bytes())?;
            let api_keys: Vec<Vec<u8>> = tx
                .scan_json::<KeyInfo>(Tree::Keys, b"")?
                .into_iter()
                .filter(|(_, k)| k.principal == principal)
                .map(|(hash, _)| hash)
                .collect();
            if !tx.remove(Tree::Tenants, id.as_bytes())? {
                return abort(RegistryError::not_found(format!("tenant {id:?}")));
            }
            for (tree, keys) in [
                (Tree::Functions, &fn_keys),
                (Tree::Versions, &version_keys),
                (Tree::Compiled, &compiled_keys),
                (Tree::Keys, &api_keys),
            ] {
                for k in keys {
                    tx.remove(tree, k)?;
                }
            }
            tx.notify(tenant_changed(id));
            Ok((fn_keys.len(), api_keys.len()))
        })?;
        tracing::info!(tenant = id, functions, keys, "tenant deleted");
        Ok(())
    }
}

/// The change other nodes hear about when tenant `id` changes (or goes, with all it owns).
fn tenant_changed(id: &str) -> Change {
    Change::Tenant { tenant: id.to_owned() }
}
