//! The cache of loaded functions: the serving version of each `(tenant, name)`, and a
//! few of each tenant's other (non-serving) versions that requests named.
//!
//! A version is loaded (compiled or deserialised, pre-instantiated, its weights placed on
//! a device) once and then shared by every invocation as an `Arc<LoadedFunction>`. The
//! serving slot only ever moves forward: installing an older version than the one it
//! holds (a slow load racing a deploy) changes nothing.
//!
//! A load that began before its function or tenant was removed (a delete, a policy
//! change) never installs: a load takes a [`LoadTicket`] before it reads the registry,
//! and a removal leaves a tombstone stamped later than every ticket taken so far; an
//! install whose ticket is older than a tombstone of its function or tenant is refused.
//! Tombstones are kept only while a ticket is out, so there are never more of them than
//! removals during loads in flight.
//!
//! Other versions (`/versions/{v}` of an old version or a staged draft) are kept per
//! tenant, most recently used first, at most as many as the platform's setting says
//! ([`super::PlatformConfig::old_versions_per_tenant`]); the least recently used one is
//! dropped for a new one, and all of a tenant's are dropped when its weights need the
//! room ([`FunctionCache::evict_other_versions`]).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::RwLock;

/// What the cache needs to know of a loaded version.
pub(crate) trait Versioned {
    /// Owning tenant.
    fn tenant(&self) -> &str;
    /// Function name.
    fn name(&self) -> &str;
    /// Version number.
    fn number(&self) -> u32;
}

/// tenant → function name → serving version, plus the other versions in use.
pub(crate) struct FunctionCache<F> {
    inner: RwLock<Inner<F>>,
}

struct Inner<F> {
    serving: HashMap<String, HashMap<String, Arc<F>>>,
    /// tenant → its non-serving versions in use, most recently used first.
    others: HashMap<String, VecDeque<Arc<F>>>,
    /// Stamps tickets and tombstones.
    clock: u64,
    /// Tickets out now.
    loads: usize,
    /// (tenant, function or `None` for the whole tenant) → when it was removed.
    tombstones: HashMap<(String, Option<String>), u64>,
}

impl<F> Default for FunctionCache<F> {
    fn default() -> Self {
        let inner =
            Inner { serving: HashMap::new(), others: HashMap::new(), clock: 0, loads: 0, tombstones: HashMap::new() };
        FunctionCache { inner: RwLock::new(inner) }
    }
}

/// Taken before a load reads the registry; its install is refused if the function or
/// its tenant was removed since.
pub(crate) struct LoadTicket<'a, F> {
    cache: &'a FunctionCache<F>,
    stamp: u64,
}

impl<F> Drop for LoadTicket<'_, F> {
    fn drop(&mut self) {
        let mut inner = self.cache.inner.write();
        inner.loads -= 1;
        if inner.loads == 0 {
            inner.tombstones.clear();
        }
    }
}

impl<F> Inner<F> {
    fn removed_since(&self, tenant: &str, name: &str, stamp: u64) -> bool {
        let after = |key: (String, Option<String>)| self.tombstones.get(&key).is_some_and(|&t| t > stamp);
        after((tenant.to_owned(), None)) || after((tenant.to_owned(), Some(name.to_owned())))
    }

    fn tombstone(&mut self, tenant: &str, name: Option<&str>) {
        if self.loads > 0 {
            self.clock += 1;
            self.tombstones.insert((tenant.to_owned(), name.map(str::to_owned)), self.clock);
        }
    }
}

impl<F: Versioned> FunctionCache<F> {
    /// A ticket for a load about to read the registry.
    pub(crate) fn begin_load(&self) -> LoadTicket<'_, F> {
        let mut inner = self.inner.write();
        inner.loads += 1;
        LoadTicket { cache: self, stamp: inner.clock }
    }

    /// The serving version of `tenant/name`, if loaded.
    pub(crate) fn get(&self, tenant: &str, name: &str) -> Option<Arc<F>> {
        self.inner.read().serving.get(tenant)?.get(name).cloned()
    }

    /// Makes `loaded` the serving version unless a newer one is already installed or
    /// the function was removed since `ticket` was taken; false when refused for a removal.
    pub(crate) fn install(&self, loaded: Arc<F>, ticket: &LoadTicket<'_, F>) -> bool {
        let mut inner = self.inner.write();
        if inner.removed_since(loaded.tenant(), loaded.name(), ticket.stamp) {
            return false;
        }
        if let Some(others) = inner.others.get_mut(loaded.tenant()) {
            // It serves now: no second copy among the others.
            others.retain(|o| o.name() != loaded.name() || o.number() != loaded.number());
        }
        let slot = inner.serving.entry(loaded.tenant().to_owned()).or_default();
        match slot.get(loaded.name()) {
            Some(current) if current.number() > loaded.number() => {}
            _ => {
                slot.insert(loaded.name().to_owned(), loaded);
            }
        }
        true
    }

    /// Version `version` of `tenant/name` among the non-serving ones in use (it becomes
    /// the most recently used).
    pub(crate) fn get_other(&self, tenant: &str, name: &str, version: u32) -> Option<Arc<F>> {
        let mut inner = self.inner.write();
        let others = inner.others.get_mut(tenant)?;
        let at = others.iter().position(|o| o.name() == name && o.number() == version)?;
        let found = others.remove(at)?;
        others.push_front(found.clone());
        Some(found)
    }

    /// Keeps `loaded`, a non-serving version, as its tenant's most recently used one,
    /// dropping the least recently used beyond `keep`; refused (false) if its function
    /// was removed since `ticket` was taken.
    pub(crate) fn keep_other(&self, loaded: Arc<F>, keep: usize, ticket: &LoadTicket<'_, F>) -> bool {
        let mut inner = self.inner.write();
        if inner.removed_since(loaded.tenant(), loaded.name(), ticket.stamp) {
            return false;
        }
        if keep == 0 {
            return true;
        }
        let others = inner.others.entry(loaded.tenant().to_owned()).or_default();
        others.retain(|o| o.name() != loaded.name() || o.number() != loaded.number());
        others.push_front(loaded);
        others.truncate(keep);
        true
    }

    /// Drops every non-serving version of `tenant` (their weights need the room);
    /// returns how many there were.
    pub(crate) fn evict_other_versions(&self, tenant: &str) -> usize {
        let evicted = self.inner.write().others.remove(tenant);
        // Dropped here, outside the lock (their weights and placements go with them).
        evicted.map_or(0, |o| o.len())
    }

    /// The non-serving versions kept for `tenant`.
    pub(crate) fn others(&self, tenant: &str) -> Vec<Arc<F>> {
        self.inner.read().others.get(tenant).map_or_else(Vec::new, |o| o.iter().cloned().collect())
    }

    /// How many non-serving versions are kept for `tenant`.
    pub(crate) fn other_versions(&self, tenant: &str) -> usize {
        self.inner.read().others.get(tenant).map_or(0, VecDeque::len)
    }

    /// Stops serving `tenant/name` and every version of it (in-flight invocations keep
    /// their `Arc`); loads that began before never install.
    pub(crate) fn remove(&self, tenant: &str, name: &str) {
        let mut inner = self.inner.write();
        inner.tombstone(tenant, Some(name));
        if let Some(functions) = inner.serving.get_mut(tenant) {
            functions.remove(name);
        }
        if let Some(others) = inner.others.get_mut(tenant) {
            others.retain(|o| o.name() != name);
        }
    }

    /// Stops serving every function of `tenant`; loads that began before never install.
    pub(crate) fn remove_tenant(&self, tenant: &str) {
        let mut inner = self.inner.write();
        inner.tombstone(tenant, None);
        inner.serving.remove(tenant);
        inner.others.remove(tenant);
    }

    /// Every serving version loaded, over all tenants.
    pub(crate) fn all_serving(&self) -> Vec<Arc<F>> {
        self.inner.read().serving.values().flat_map(|functions| functions.values().cloned()).collect()
    }

    /// Serving versions loaded, over all tenants.
    pub(crate) fn len(&self) -> usize {
        self.inner.read().serving.values().map(HashMap::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake(&'static str, &'static str, u32);

    impl Versioned for Fake {
        fn tenant(&self) -> &str {
            self.0
        }
        fn name(&self) -> &str {
            self.1
        }
        fn number(&self) -> u32 {
            self.2
        }
    }

    fn serving(cache: &FunctionCache<Fake>, tenant: &str, name: &str) -> Option<u32> {
        cache.get(tenant, name).map(|f| f.number())
    }

    #[test]
    fn a_load_that_began_before_a_delete_never_installs() {
        let cache = FunctionCache::<Fake>::default();
        let before = cache.begin_load();
        cache.remove("a", "f");
        assert!(!cache.install(Arc::new(Fake("a", "f", 3)), &before), "installed after the delete");
        assert_eq!(serving(&cache, "a", "f"), None, "the deleted function does not serve");
        // Another function of the tenant is not affected, nor is a load begun after.
        assert!(cache.install(Arc::new(Fake("a", "g", 1)), &before));
        let after = cache.begin_load();
        assert!(cache.install(Arc::new(Fake("a", "f", 1)), &after), "a deploy after the delete serves");
        assert_eq!(serving(&cache, "a", "f"), Some(1), "a redeploy starts again at version 1");
    }

    #[test]
    fn a_load_that_began_before_its_tenant_was_removed_never_installs() {
        let cache = FunctionCache::<Fake>::default();
        let before = cache.begin_load();
        cache.remove_tenant("a");
        assert!(!cache.install(Arc::new(Fake("a", "f", 1)), &before));
        assert!(!cache.keep_other(Arc::new(Fake("a", "f", 1)), 2, &before));
        assert_eq!((serving(&cache, "a", "f"), cache.other_versions("a")), (None, 0));
        assert!(cache.install(Arc::new(Fake("b", "f", 1)), &before), "another tenant is not affected");
    }

    #[test]
    fn tombstones_live_only_while_loads_are_out() {
        let cache = FunctionCache::<Fake>::default();
        cache.remove("a", "f"); // no load out: nothing to refuse later
        let t = cache.begin_load();
        cache.remove("a", "g");
        assert_eq!(cache.inner.read().tombstones.len(), 1);
        drop(t);
        assert!(cache.inner.read().tombstones.is_empty());
        let t = cache.begin_load();
        assert!(cache.install(Arc::new(Fake("a", "g", 1)), &t));
    }

    #[test]
    fn the_serving_slot_only_moves_forward() {
        let cache = FunctionCache::<Fake>::default();
        let t = cache.begin_load();
        assert!(cache.install(Arc::new(Fake("a", "f", 2)), &t));
        cache.install(Arc::new(Fake("a", "f", 1)), &t);
        assert_eq!(serving(&cache, "a", "f"), Some(2));
    }

    #[test]
    fn other_versions_are_kept_most_recently_used_first_and_bounded() {
        let cache = FunctionCache::<Fake>::default();
        let t = cache.begin_load();
        for v in 1..=3 {
            assert!(cache.keep_other(Arc::new(Fake("a", "f", v)), 2, &t));
        }
        assert!(cache.get_other("a", "f", 1).is_none(), "the least recently used went");
        assert!(cache.get_other("a", "f", 2).is_some()); // now the most recent
        cache.keep_other(Arc::new(Fake("a", "f", 4)), 2, &t);
        assert!(cache.get_other("a", "f", 3).is_none());
        assert_eq!(cache.other_versions("a"), 2);
        // A version that comes to serve leaves the others; a delete removes the rest.
        cache.install(Arc::new(Fake("a", "f", 4)), &t);
        assert_eq!(cache.other_versions("a"), 1);
        cache.remove("a", "f");
        assert_eq!(cache.other_versions("a"), 0);
        assert!(cache.keep_other(Arc::new(Fake("b", "f", 1)), 0, &t), "a size of 0 keeps none");
        assert_eq!(cache.other_versions("b"), 0);
        cache.keep_other(Arc::new(Fake("b", "f", 1)), 2, &t);
        assert_eq!(cache.evict_other_versions("b"), 1);
    }
}
