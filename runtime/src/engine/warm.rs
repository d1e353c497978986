//! Warm instances: an instance whose invocation ended cleanly is kept for the next
//! invocation of the same function version, so that work a function does once per
//! instance (parsing a vocabulary, building tables in a `OnceLock`) and the first
//! touch of its linear memory are paid once, not per request — like a warm container
//! in other serverless platforms.
//!
//! Only an instance that returned normally (a result or a guest-reported error),
//! holds no tensor handles and has written little to stderr is kept; one that
//! trapped, ran out of time or memory, or kept tensors is dropped with its store.
//! A function therefore sees its globals from an earlier request of the same
//! version (never another function's or another tenant's), and must not rely on
//! them being fresh. Instances kept are bounded per function and engine-wide (they
//! hold slots of the pooling allocator).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use wasmtime::Store;

use super::bindings::Inference;
use super::state::InvocationState;

/// One instance with its store, between invocations.
pub(super) struct WarmInstance {
    pub store: Store<InvocationState>,
    pub instance: Inference,
}

/// The warm instances of one function image.
pub(super) struct WarmPool {
    idle: Mutex<Vec<WarmInstance>>,
    /// Most instances this pool keeps.
    capacity: usize,
    /// Instances kept by every pool of the engine, against `engine_capacity`.
    engine_total: Arc<AtomicUsize>,
    engine_capacity: usize,
}

impl WarmPool {
    pub fn new(capacity: usize, engine_total: Arc<AtomicUsize>, engine_capacity: usize) -> WarmPool {
        WarmPool { idle: Mutex::new(Vec::new()), capacity, engine_total, engine_capacity }
    }

    /// A kept instance, if there is one.
    pub fn take(&self) -> Option<WarmInstance> {
        let warm = self.lock().pop()?;
        self.engine_total.fetch_sub(1, Ordering::Relaxed);
        Some(warm)
    }

    /// Keeps `warm` if this pool and the engine have room; drops it otherwise.
    pub fn give_back(&self, warm: WarmInstance) {
        let mut idle = self.lock();
        if idle.len() >= self.capacity {
            return;
        }
        let reserved = self
            .engine_total
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < self.engine_capacity).then_some(n + 1));
        if reserved.is_ok() {
            idle.push(warm);
        }
    }

    /// Instances kept now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<WarmInstance>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for WarmPool {
    fn drop(&mut self) {
        let kept = self.lock().len();
        self.engine_total.fetch_sub(kept, Ordering::Relaxed);
    }
}
