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
//! them being fresh.
//!
//! Warm instances hold slots of the pooling allocator, so they are bounded three ways
//! by the [`WarmLedger`]: per function, engine-wide (half the pool), and per tenant
//! (over all its functions, so no tenant holds most of them); and one unused for the
//! idle time is released ([`WarmLedger::expire_idle`], run by a sweeper thread of the
//! engine every quarter of the idle time; tests call it with their own clock).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use wasmtime::Store;

use super::bindings::Inference;
use super::state::InvocationState;

/// One instance with its store, between invocations.
pub(super) struct WarmInstance {
    pub store: Store<InvocationState>,
    pub instance: Inference,
}

/// What releases idle instances: a pool, seen by the ledger.
trait Expire: Send + Sync {
    /// Drops the instances kept since before `cutoff`; how many.
    fn expire_before(&self, cutoff: Instant) -> usize;
}

/// The warm instances kept engine-wide and per tenant, against their caps, and the
/// pools that keep them.
pub(super) struct WarmLedger {
    total: AtomicUsize,
    capacity: usize,
    tenant_capacity: usize,
    idle_timeout: Duration,
    tenants: Mutex<HashMap<String, Arc<AtomicUsize>>>,
    pools: Mutex<Vec<Weak<dyn Expire>>>,
}

impl WarmLedger {
    /// At most `capacity` instances kept, `tenant_capacity` per tenant, each for at most
    /// `idle_timeout` unused.
    pub fn new(capacity: usize, tenant_capacity: usize, idle_timeout: Duration) -> Arc<WarmLedger> {
        Arc::new(WarmLedger {
            total: AtomicUsize::new(0),
            capacity,
            tenant_capacity,
            idle_timeout,
            tenants: Mutex::new(HashMap::new()),
            pools: Mutex::new(Vec::new()),
        })
    }

    /// Instances kept engine-wide.
    pub fn total(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }

    /// Instances `tenant` keeps.
    pub fn of_tenant(&self, tenant: &str) -> usize {
        lock(&self.tenants).get(tenant).map_or(0, |n| n.load(Ordering::Relaxed))
    }

    /// Releases every instance unused for the idle time at `now`; how many.
    pub fn expire_idle(&self, now: Instant) -> usize {
        let Some(cutoff) = now.checked_sub(self.idle_timeout) else { return 0 };
        let pools: Vec<Arc<dyn Expire>> = {
            let mut pools = lock(&self.pools);
            pools.retain(|p| p.strong_count() > 0);
            pools.iter().filter_map(Weak::upgrade).collect()
        };
        pools.iter().map(|p| p.expire_before(cutoff)).sum()
    }

    /// Runs [`WarmLedger::expire_idle`] every quarter of the idle time (at least every
    /// 10 ms, at most every second) on a thread of its own, until `stop`'s sender is
    /// dropped.
    pub fn sweep(self: &Arc<Self>, stop: Receiver<()>) -> std::io::Result<()> {
        let period = (self.idle_timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let ledger = Arc::downgrade(self);
        std::thread::Builder::new().name("sluice-warm-sweeper".into()).spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = stop.recv_timeout(period) {
                let Some(ledger) = ledger.upgrade() else { return };
                ledger.expire_idle(Instant::now());
            }
        })?;
        Ok(())
    }

    fn tenant(&self, tenant: &str) -> Arc<AtomicUsize> {
        lock(&self.tenants).entry(tenant.to_owned()).or_default().clone()
    }
}

/// The warm instances of one function image (`T`: an instance; tests keep plain values).
pub(super) struct WarmPool<T = WarmInstance> {
    /// Kept items with when each was given back, oldest first.
    idle: Mutex<Vec<(T, Instant)>>,
    /// Most items this pool keeps.
    capacity: usize,
    ledger: Arc<WarmLedger>,
    /// Items the owning tenant keeps, over all its pools.
    tenant: Arc<AtomicUsize>,
}

impl<T: Send + 'static> WarmPool<T> {
    /// A pool of at most `capacity` items of `tenant` (`None`: a pool of its own,
    /// held only to the engine's cap and its own), registered with `ledger`.
    pub fn new(capacity: usize, ledger: &Arc<WarmLedger>, tenant: Option<&str>) -> Arc<WarmPool<T>> {
        let pool = Arc::new(WarmPool {
            idle: Mutex::new(Vec::new()),
            capacity,
            ledger: ledger.clone(),
            tenant: tenant.map_or_else(Default::default, |t| ledger.tenant(t)),
        });
        let weak: Weak<WarmPool<T>> = Arc::downgrade(&pool);
        let weak: Weak<dyn Expire> = weak;
        lock(&ledger.pools).push(weak);
        pool
    }

    /// The most recently kept item, if there is one.
    pub fn take(&self) -> Option<T> {
        let (item, _) = lock(&self.idle).pop()?;
        self.release(1);
        Some(item)
    }

    /// Keeps `item`, given back at `now`, if this pool, the engine and the tenant have
    /// room; drops it otherwise.
    pub fn give_back(&self, item: T, now: Instant) {
        let mut idle = lock(&self.idle);
        if idle.len() >= self.capacity {
            return;
        }
        let reserve = |n: &AtomicUsize, cap: usize| {
            n.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |k| (k < cap).then_some(k + 1)).is_ok()
        };
        if !reserve(&self.ledger.total, self.ledger.capacity) {
            return;
        }
        if !reserve(&self.tenant, self.ledger.tenant_capacity) {
            self.ledger.total.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        idle.push((item, now));
    }

    /// Items kept now.
    pub fn len(&self) -> usize {
        lock(&self.idle).len()
    }

    fn release(&self, n: usize) {
        self.ledger.total.fetch_sub(n, Ordering::Relaxed);
        self.tenant.fetch_sub(n, Ordering::Relaxed);
    }
}

impl<T: Send + 'static> Expire for WarmPool<T> {
    fn expire_before(&self, cutoff: Instant) -> usize {
        let expired: Vec<(T, Instant)> = {
            let mut idle = lock(&self.idle);
            let stale = idle.iter().take_while(|(_, since)| *since <= cutoff).count();
            idle.drain(..stale).collect()
        };
        self.release(expired.len());
        // The instances (their stores and slots) are dropped here, outside the lock.
        expired.len()
    }
}

impl<T> Drop for WarmPool<T> {
    fn drop(&mut self) {
        let kept = lock(&self.idle).len();
        self.ledger.total.fetch_sub(kept, Ordering::Relaxed);
        self.tenant.fetch_sub(kept, Ordering::Relaxed);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_keep_within_the_engine_and_tenant_caps() {
        let ledger = WarmLedger::new(3, 2, Duration::from_secs(60));
        let now = Instant::now();
        let a1 = WarmPool::new(4, &ledger, Some("a"));
        let a2 = WarmPool::new(4, &ledger, Some("a"));
        let b = WarmPool::new(4, &ledger, Some("b"));
        for item in 0..3 {
            a1.give_back(item, now);
        }
        a2.give_back(9, now);
        assert_eq!((a1.len(), a2.len(), ledger.of_tenant("a")), (2, 0, 2), "tenant a's cap of 2");
        b.give_back(1, now);
        b.give_back(2, now);
        assert_eq!((b.len(), ledger.total()), (1, 3), "the engine's cap of 3");
        assert_eq!(a1.take(), Some(1), "the most recently kept first");
        a2.give_back(9, now);
        assert_eq!((ledger.of_tenant("a"), ledger.of_tenant("b")), (2, 1));
        drop(a2);
        assert_eq!((ledger.total(), ledger.of_tenant("a")), (2, 1), "a dropped pool gives its room back");
    }

    #[test]
    fn instances_unused_for_the_idle_time_are_released() {
        let idle = Duration::from_secs(60);
        let ledger = WarmLedger::new(8, 8, idle);
        let pool = WarmPool::new(4, &ledger, Some("t"));
        let t0 = Instant::now();
        pool.give_back("old", t0);
        pool.give_back("newer", t0 + Duration::from_secs(30));
        assert_eq!(ledger.expire_idle(t0 + idle - Duration::from_secs(1)), 0);
        assert_eq!(ledger.expire_idle(t0 + idle), 1, "the one given back at t0");
        assert_eq!((pool.len(), ledger.total(), ledger.of_tenant("t")), (1, 1, 1));
        assert_eq!(ledger.expire_idle(t0 + idle + Duration::from_secs(30)), 1);
        assert_eq!((pool.len(), ledger.total(), ledger.of_tenant("t")), (0, 0, 0));
        // A taken and returned item starts its idle time again.
        pool.give_back("again", t0);
        let item = pool.take().unwrap();
        pool.give_back(item, t0 + Duration::from_secs(100));
        assert_eq!(ledger.expire_idle(t0 + Duration::from_secs(120)), 0);
    }
}
