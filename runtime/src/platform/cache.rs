//! The cache of loaded functions: the serving version of each `(tenant, name)`.
//!
//! A version is loaded (compiled or deserialised, pre-instantiated, its weights placed on
//! a device) once and then shared by every invocation as an `Arc<LoadedFunction>`. The
//! cache only ever moves forward: installing an older version than the one it holds
//! (a slow load racing a deploy) changes nothing.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use super::LoadedFunction;

/// tenant → function name → serving version.
#[derive(Default)]
pub(crate) struct FunctionCache {
    loaded: RwLock<HashMap<String, HashMap<String, Arc<LoadedFunction>>>>,
}

impl FunctionCache {
    /// The serving version of `tenant/name`, if loaded.
    pub(crate) fn get(&self, tenant: &str, name: &str) -> Option<Arc<LoadedFunction>> {
        self.loaded.read().get(tenant)?.get(name).cloned()
    }

    /// Makes `loaded` the serving version unless a newer one is already installed.
    pub(crate) fn install(&self, loaded: Arc<LoadedFunction>) {
        let mut all = self.loaded.write();
        let slot = all.entry(loaded.version.tenant.clone()).or_default();
        match slot.get(&loaded.version.function) {
            Some(current) if current.version.version > loaded.version.version => {}
            _ => {
                slot.insert(loaded.version.function.clone(), loaded);
            }
        }
    }

    /// Stops serving `tenant/name` (in-flight invocations keep their `Arc`).
    pub(crate) fn remove(&self, tenant: &str, name: &str) {
        if let Some(functions) = self.loaded.write().get_mut(tenant) {
            functions.remove(name);
        }
    }

    /// Stops serving every function of `tenant`.
    pub(crate) fn remove_tenant(&self, tenant: &str) {
        self.loaded.write().remove(tenant);
    }

    /// Functions loaded, over all tenants.
    pub(crate) fn len(&self) -> usize {
        self.loaded.read().values().map(HashMap::len).sum()
    }
}
