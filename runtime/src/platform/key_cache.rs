//! The keys this node has checked, so that authenticating a request reads no registry.
//!
//! With a shared registry (PostgreSQL) a key look-up is a database round trip; a request
//! path that made one per request would put the control plane on every invocation. The
//! cache maps the sha256 of each key seen to who it authenticates as (or to "unknown",
//! so a client retrying with a wrong key costs one look-up, not one per request).
//!
//! Any change to keys or tenants, made here or announced by another node, clears it
//! ([`KeyCache::clear`]). A look-up that began before a clear never installs its answer
//! (it may predate the change): each clear moves a generation on, and an answer is kept
//! only if the generation is still the one read before the look-up. The cache holds at
//! most [`MAX_KEYS`] keys and starts afresh when full, so a client sending random keys
//! costs memory it cannot grow.

use std::collections::HashMap;

use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use sluice_registry::Principal;

/// The most keys kept; a full cache is cleared.
pub(crate) const MAX_KEYS: usize = 65_536;

type KeyHash = [u8; 32];

/// sha256(key) → who it authenticates as (`None`: unknown or revoked).
#[derive(Default)]
pub(crate) struct KeyCache {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    keys: HashMap<KeyHash, Option<Principal>>,
    generation: u64,
}

/// A look-up about to read the registry: where to put its answer.
pub(crate) struct Lookup {
    hash: KeyHash,
    generation: u64,
}

impl KeyCache {
    /// The cached answer for `key`, or the [`Lookup`] to [`KeyCache::install`] the
    /// registry's answer with.
    pub(crate) fn get(&self, key: &str) -> Result<Option<Principal>, Lookup> {
        let hash: KeyHash = Sha256::digest(key.as_bytes()).into();
        let inner = self.inner.lock();
        match inner.keys.get(&hash) {
            Some(found) => Ok(found.clone()),
            None => Err(Lookup { hash, generation: inner.generation }),
        }
    }

    /// Keeps the registry's answer unless the cache was cleared since the look-up began.
    pub(crate) fn install(&self, lookup: Lookup, principal: Option<Principal>) {
        let mut inner = self.inner.lock();
        if inner.generation != lookup.generation {
            return;
        }
        if inner.keys.len() >= MAX_KEYS {
            inner.keys.clear();
        }
        inner.keys.insert(lookup.hash, principal);
    }

    /// Forgets every answer (a key or tenant changed), and every look-up in flight.
    pub(crate) fn clear(&self) {
        let mut inner = self.inner.lock();
        inner.keys.clear();
        inner.generation += 1;
    }

    /// Keys cached now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.lock().keys.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(id: &str) -> Option<Principal> {
        Some(Principal::Tenant(id.to_owned()))
    }

    #[test]
    fn answers_are_kept_until_cleared() {
        let cache = KeyCache::default();
        let lookup = cache.get("k1").unwrap_err();
        cache.install(lookup, tenant("acme"));
        assert_eq!(cache.get("k1").ok(), Some(tenant("acme")));
        let lookup = cache.get("wrong").unwrap_err();
        cache.install(lookup, None);
        assert_eq!(cache.get("wrong").ok(), Some(None), "an unknown key is remembered as unknown");
        cache.clear();
        assert!(cache.get("k1").is_err());
        assert!(cache.get("wrong").is_err());
    }

    #[test]
    fn a_lookup_that_began_before_a_clear_is_not_kept() {
        let cache = KeyCache::default();
        let lookup = cache.get("k1").unwrap_err();
        // The key is revoked (elsewhere) while the registry answers with what it had.
        cache.clear();
        cache.install(lookup, tenant("acme"));
        assert!(cache.get("k1").is_err(), "a stale answer must not be installed");
    }

    #[test]
    fn a_full_cache_starts_afresh() {
        let cache = KeyCache::default();
        for i in 0..MAX_KEYS + 1 {
            let key = format!("key-{i}");
            let lookup = cache.get(&key).unwrap_err();
            cache.install(lookup, None);
        }
        assert_eq!(cache.len(), 1, "the {}th key started a new cache", MAX_KEYS + 1);
    }
}
