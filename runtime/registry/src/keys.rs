//! API keys: issue, authenticate, list, revoke, and the admin key.
//!
//! A key is shown once, at creation; the registry stores only `sha256(key)` (as the sled
//! key of the `keys` tree) with public metadata. Tenant keys look like
//! `sk_<tenant>_<64 hex>`, admin keys like `sluice_admin_<64 hex>`; the random part is 32
//! bytes from the operating system's CSPRNG, so an unsalted hash is as strong as the key.
//! The prefix is for humans only: authentication looks up the hash and never parses it.
//! Because lookup is by hash, timing reveals at most which hash prefixes exist, which does
//! not help forge a key, so no constant-time comparison is needed.

use rand::TryRngCore;
use rand::rngs::OsRng;
use sha2::Digest as _;

use crate::change::Change;
use crate::model::{KeyInfo, Principal, now_ms, validate_tenant_id};
use crate::{Registry, RegistryError, Result, Tree, abort};

/// Minimum length of an operator-provided admin key.
pub const MIN_ADMIN_KEY_LEN: usize = 16;

/// Minimum length of an operator-provided tenant key (`sluice serve --tenant-keys-dir`).
pub const MIN_PROVIDED_TENANT_KEY_LEN: usize = 32;

const ADMIN_KEY_ID: &str = "admin";

fn hash_key(key: &str) -> [u8; 32] {
    sha2::Sha256::digest(key.as_bytes()).into()
}

/// The change other nodes hear about when a key is added or revoked.
fn key_changed(info: &KeyInfo) -> Change {
    let tenant = match &info.principal {
        Principal::Tenant(t) => Some(t.clone()),
        Principal::Admin => None,
    };
    Change::Key { tenant, key_id: info.key_id.clone() }
}

fn random_hex(bytes: usize) -> Result<String> {
    let mut buf = vec![0u8; bytes];
    OsRng.try_fill_bytes(&mut buf).map_err(|e| RegistryError::storage("reading the OS random number generator", e))?;
    Ok(hex::encode(buf))
}

impl Registry {
    /// Issues a new API key for `tenant`. Returns `(key_id, plaintext key)`; the plaintext
    /// is not stored and cannot be recovered.
    #[tracing::instrument(name = "sluice_registry.issue_key", skip(self), err(level = "debug"))]
    pub fn issue_key(&self, tenant: &str) -> Result<(String, String)> {
        validate_tenant_id(tenant)?;
        let key = format!("sk_{tenant}_{}", random_hex(32)?);
        let info = KeyInfo {
            key_id: format!("key_{}", random_hex(8)?),
            principal: Principal::Tenant(tenant.to_owned()),
            created_ms: now_ms(),
        };
        let hash = hash_key(&key);
        let _w = self.write_lock();
        self.commit(|tx| {
            if tx.get(Tree::Tenants, tenant.as_bytes())?.is_none() {
                return abort(RegistryError::not_found(format!("tenant {tenant:?}")));
            }
            tx.put_json(Tree::Keys, &hash, &info)?;
            tx.notify(key_changed(&info));
            Ok(())
        })?;
        Ok((info.key_id, key))
    }

    /// Makes `key`, an operator-provided key (from a mounted Secret), valid for `tenant`:
    /// stores its hash under the key id `provided` unless it is stored already. Returns
    /// whether it was added. The key must be at least [`MIN_PROVIDED_TENANT_KEY_LEN`]
    /// printable ASCII characters without spaces, and may not be another principal's.
    #[tracing::instrument(name = "sluice_registry.ensure_tenant_key", skip(self, key), err(level = "debug"))]
    pub fn ensure_tenant_key(&self, tenant: &str, key: &str) -> Result<bool> {
        validate_tenant_id(tenant)?;
        if key.len() < MIN_PROVIDED_TENANT_KEY_LEN || !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(RegistryError::InvalidInput(format!(
                "the key of tenant {tenant:?} must be at least {MIN_PROVIDED_TENANT_KEY_LEN} printable ASCII \
                 characters without spaces"
            )));
        }
        let hash = hash_key(key);
        let principal = Principal::Tenant(tenant.to_owned());
        let info = KeyInfo {
            key_id: format!("provided_{}", &hex::encode(hash)[..16]),
            principal: principal.clone(),
            created_ms: now_ms(),
        };
        let _w = self.write_lock();
        self.commit(|tx| {
            match tx.get_json::<KeyInfo>(Tree::Keys, &hash)? {
                Some(stored) if stored.principal == principal => return Ok(false),
                Some(_) => {
                    return abort(RegistryError::InvalidInput(format!(
                        "the key given for tenant {tenant:?} belongs to another principal"
                    )));
                }
                None => {}
            }
            if tx.get(Tree::Tenants, tenant.as_bytes())?.is_none() {
                return abort(RegistryError::not_found(format!("tenant {tenant:?}")));
            }
            tx.put_json(Tree::Keys, &hash, &info)?;
            tx.notify(key_changed(&info));
            Ok(true)
        })
    }

    /// Who `key` authenticates as; `Ok(None)` for an unknown or revoked key.
    pub fn authenticate(&self, key: &str) -> Result<Option<Principal>> {
        Ok(self.store.get_json::<KeyInfo>(Tree::Keys, &hash_key(key))?.map(|info| info.principal))
    }

    /// Metadata of every key (admin keys included), ordered by hash.
    pub fn list_keys(&self) -> Result<Vec<KeyInfo>> {
        Ok(self.store.scan_json(Tree::Keys, b"")?.into_iter().map(|(_, k)| k).collect())
    }

    /// Metadata of `tenant`'s keys.
    pub fn list_tenant_keys(&self, tenant: &str) -> Result<Vec<KeyInfo>> {
        self.get_tenant(tenant)?;
        let principal = Principal::Tenant(tenant.to_owned());
        Ok(self.list_keys()?.into_iter().filter(|k| k.principal == principal).collect())
    }

    /// Revokes the key with `key_id` (any principal's).
    #[tracing::instrument(name = "sluice_registry.revoke_key", skip(self), err(level = "debug"))]
    pub fn revoke_key(&self, key_id: &str) -> Result<KeyInfo> {
        self.revoke_where(key_id, |_| true)
    }

    /// Revokes `tenant`'s key `key_id`; [`RegistryError::NotFound`] if it is another's.
    #[tracing::instrument(name = "sluice_registry.revoke_tenant_key", skip(self), err(level = "debug"))]
    pub fn revoke_tenant_key(&self, tenant: &str, key_id: &str) -> Result<KeyInfo> {
        self.revoke_where(key_id, |p| *p == Principal::Tenant(tenant.to_owned()))
    }

    fn revoke_where(&self, key_id: &str, allowed: impl Fn(&Principal) -> bool) -> Result<KeyInfo> {
        let _w = self.write_lock();
        self.commit(|tx| {
            let found = tx
                .scan_json::<KeyInfo>(Tree::Keys, b"")?
                .into_iter()
                .find(|(_, k)| k.key_id == key_id && allowed(&k.principal));
            let Some((hash, info)) = found else {
                return abort(RegistryError::not_found(format!("API key {key_id:?}")));
            };
            tx.remove(Tree::Keys, &hash)?;
            tx.notify(key_changed(&info));
            Ok(info)
        })
    }

    /// Makes sure an admin key exists.
    ///
    /// - `Some(key)` (from the environment): that key becomes the only admin key (any other
    ///   admin key is revoked); returns `Ok(None)`. It must be at least
    ///   [`MIN_ADMIN_KEY_LEN`] printable ASCII characters without spaces.
    /// - `None` and an admin key is stored: nothing changes; returns `Ok(None)`.
    /// - `None` and no admin key: generates one, stores its hash and returns the plaintext
    ///   once, for the caller to print.
    #[tracing::instrument(name = "sluice_registry.ensure_admin_key", skip_all, err(level = "debug"))]
    pub fn ensure_admin_key(&self, provided: Option<String>) -> Result<Option<String>> {
        if let Some(key) = &provided
            && (key.len() < MIN_ADMIN_KEY_LEN || !key.bytes().all(|b| b.is_ascii_graphic()))
        {
            return Err(RegistryError::InvalidInput(format!(
                "the admin key must be at least {MIN_ADMIN_KEY_LEN} printable ASCII characters without spaces"
            )));
        }
        // Made before the transaction, which may run more than once; used only if needed.
        let generated = format!("sluice_admin_{}", random_hex(32)?);
        let _w = self.write_lock();
        let stored = self.commit(|tx| {
            let admins: Vec<Vec<u8>> = tx
                .scan_json::<KeyInfo>(Tree::Keys, b"")?
                .into_iter()
                .filter(|(_, k)| k.principal == Principal::Admin)
                .map(|(hash, _)| hash)
                .collect();
            let (plaintext, returned) = match &provided {
                Some(key) => {
                    if admins.len() == 1 && admins[0].as_slice() == hash_key(key).as_slice() {
                        return Ok(None);
                    }
                    (key.clone(), false)
                }
                None if !admins.is_empty() => return Ok(None),
                None => (generated.clone(), true),
            };
            let info = KeyInfo { key_id: ADMIN_KEY_ID.to_owned(), principal: Principal::Admin, created_ms: now_ms() };
            for old in &admins {
                tx.remove(Tree::Keys, old)?;
            }
            tx.put_json(Tree::Keys, &hash_key(&plaintext), &info)?;
            tx.notify(key_changed(&info));
            Ok(Some((plaintext, returned, admins.len())))
        })?;
        let Some((plaintext, returned, replaced)) = stored else { return Ok(None) };
        tracing::info!(generated = returned, replaced, "admin key stored");
        Ok(returned.then_some(plaintext))
    }
}
