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
//!
//! They also hold their linear memories, resident in the host's RAM (a guest's heap
//! never shrinks), so a tenant's warm instances together keep at most
//! [`super::EngineConfig::tenant_max_warm_memory_bytes`] of them: an instance that
//! would take its tenant past it is dropped when its invocation ends, and its pages go
//! back to the system. Without that bound one tenant could keep 16 instances of its
//! memory limit (1 GiB each by default) resident for a minute after each burst.

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

/// How many warm instances, and how many bytes of linear memory, one holder keeps
/// (the engine, or one tenant over all its pools).
#[derive(Default)]
struct Kept {
    instances: AtomicUsize,
    bytes: AtomicUsize,
}

/// What a holder may keep.
#[derive(Clone, Copy)]
struct Caps {
    instances: usize,
    bytes: usize,
}

impl Kept {
    /// Counts one more instance of `bytes`, if it stays within `caps`.
    fn reserve(&self, bytes: usize, caps: Caps) -> bool {
        if self
            .instances
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |k| (k < caps.instances).then_some(k + 1))
            .is_err()
        {
            return false;
        }
        let fits = |b: usize| b.checked_add(bytes).filter(|&total| total <= caps.bytes);
        if self.bytes.fetch_update(Ordering::Relaxed, Ordering::Relaxed, fits).is_err() {
            self.instances.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    fn release(&self, instances: usize, bytes: usize) {
        self.instances.fetch_sub(instances, Ordering::Relaxed);
        self.bytes.fetch_sub(bytes, Ordering::Relaxed);
    }

    fn instances(&self) -> usize {
        self.instances.load(Ordering::Relaxed)
    }

    fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }
}

/// The warm instances kept engine-wide and per tenant, against their caps, and the
/// pools that keep them.
pub(super) struct WarmLedger {
    total: Kept,
    capacity: usize,
    tenant_caps: Caps,
    idle_timeout: Duration,
    tenants: Mutex<HashMap<String, Arc<Kept>>>,
    pools: Mutex<Vec<Weak<dyn Expire>>>,
}

impl WarmLedger {
    /// At most `capacity` instances kept, `tenant_capacity` per tenant holding at most
    /// `tenant_max_bytes` of linear memory together, each for at most `idle_timeout`
    /// unused.
    pub fn new(
        capacity: usize,
        tenant_capacity: usize,
        tenant_max_bytes: usize,
        idle_timeout: Duration,
    ) -> Arc<WarmLedger> {
        Arc::new(WarmLedger {
            total: Kept::default(),
            capacity,
            tenant_caps: Caps { instances: tenant_capacity, bytes: tenant_max_bytes },
            idle_timeout,
            tenants: Mutex::new(HashMap::new()),
            pools: Mutex::new(Vec::new()),
        })
    }

    /// Instances kept engine-wide.
    pub fn total(&self) -> usize {
        self.total.instances()
    }

    /// Bytes of linear memory the instances kept engine-wide hold.
    pub fn total_bytes(&self) -> usize {
        self.total.bytes()
    }

    /// Instances `tenant` keeps, and the bytes of linear memory they hold.
    pub fn of_tenant(&self, tenant: &str) -> (usize, usize) {
        lock(&self.tenants).get(tenant).map_or((0, 0), |k| (k.instances(), k.bytes()))
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

    fn tenant(&self, tenant: &str) -> Arc<Kept> {
        lock(&self.tenants).entry(tenant.to_owned()).or_default().clone()
    }
}

/// The warm instances of one function image (`T`: an instance; tests keep plain values).
pub(super) struct WarmPool<T = WarmInstance> {
    /// Kept items with their bytes of linear memory and when each was given back,
    /// oldest first.
    idle: Mutex<Vec<Idle<T>>>,
    /// Most items this pool keeps.
    capacity: usize,
    ledger: Arc<WarmLedger>,
    /// What the owning tenant keeps, over all its pools.
    tenant: Arc<Kept>,
}

/// One kept item.
struct Idle<T> {
    item: T,
    bytes: usize,
    since: Instant,
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
        let Idle { item, bytes, .. } = lock(&self.idle).pop()?;
        self.release(1, bytes);
        Some(item)
    }

    /// Keeps `item`, holding `bytes` of linear memory and given back at `now`, if this
    /// pool, the engine and the tenant have room; drops it otherwise.
    pub fn give_back(&self, item: T, bytes: usize, now: Instant) {
        let mut idle = lock(&self.idle);
        if idle.len() >= self.capacity {
            return;
        }
        let engine = Caps { instances: self.ledger.capacity, bytes: usize::MAX };
        if !self.ledger.total.reserve(bytes, engine) {
            return;
        }
        if !self.tenant.reserve(bytes, self.ledger.tenant_caps) {
            self.ledger.total.release(1, bytes);
            return;
        }
        idle.push(Idle { item, bytes, since: now });
    }

    /// Items kept now.
    pub fn len(&self) -> usize {
        lock(&self.idle).len()
    }
}

impl<T: Send + 'static> Expire for WarmPool<T> {
    fn expire_before(&self, cutoff: Instant) -> usize {
        let expired: Vec<Idle<T>> = {
            let mut idle = lock(&self.idle);
            let stale = idle.iter().take_while(|kept| kept.since <= cutoff).count();
            idle.drain(..stale).collect()
        };
        self.release(expired.len(), expired.iter().map(|kept| kept.bytes).sum());
        // The instances (their stores and slots) are dropped here, outside the lock.
        expired.len()
    }
}

impl<T> WarmPool<T> {
    /// Gives back to the engine and the tenant the room of `instances` items holding
    /// `bytes` in all.
    fn release(&self, instances: usize, bytes: usize) {
        self.ledger.total.release(instances, bytes);
        self.tenant.release(instances, bytes);
    }
}

impl<T> Drop for WarmPool<T> {
    fn drop(&mut self) {
        let (instances, bytes) = {
            let idle = lock(&self.idle);
            (idle.len(), idle.iter().map(|kept| kept.bytes).sum())
        };
        self.release(instances, bytes);
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
        let ledger = WarmLedger::new(3, 2, usize::MAX, Duration::from_secs(60));
        let now = Instant::now();
        let a1 = WarmPool::new(4, &ledger, Some("a"));
        let a2 = WarmPool::new(4, &ledger, Some("a"));
        let b = WarmPool::new(4, &ledger, Some("b"));
        for item in 0..3 {
            a1.give_back(item, 0, now);
        }
        a2.give_back(9, 0, now);
        assert_eq!((a1.len(), a2.len(), ledger.of_tenant("a").0), (2, 0, 2), "tenant a's cap of 2");
        b.give_back(1, 0, now);
        b.give_back(2, 0, now);
        assert_eq!((b.len(), ledger.total()), (1, 3), "the engine's cap of 3");
        assert_eq!(a1.take(), Some(1), "the most recently kept first");
        a2.give_back(9, 0, now);
        assert_eq!((ledger.of_tenant("a").0, ledger.of_tenant("b").0), (2, 1));
        drop(a2);
        assert_eq!((ledger.total(), ledger.of_tenant("a").0), (2, 1), "a dropped pool gives its room back");
    }

    #[test]
    fn instances_unused_for_the_idle_time_are_released() {
        let idle = Duration::from_secs(60);
        let ledger = WarmLedger::new(8, 8, usize::MAX, idle);
        let pool = WarmPool::new(4, &ledger, Some("t"));
        let t0 = Instant::now();
        pool.give_back("old", 0, t0);
        pool.give_back("newer", 0, t0 + Duration::from_secs(30));
        assert_eq!(ledger.expire_idle(t0 + idle - Duration::from_secs(1)), 0);
        assert_eq!(ledger.expire_idle(t0 + idle), 1, "the one given back at t0");
        assert_eq!((pool.len(), ledger.total(), ledger.of_tenant("t").0), (1, 1, 1));
        assert_eq!(ledger.expire_idle(t0 + idle + Duration::from_secs(30)), 1);
        assert_eq!((pool.len(), ledger.total(), ledger.of_tenant("t").0), (0, 0, 0));
        // A taken and returned item starts its idle time again.
        pool.give_back("again", 0, t0);
        let item = pool.take().unwrap();
        pool.give_back(item, 0, t0 + Duration::from_secs(100));
        assert_eq!(ledger.expire_idle(t0 + Duration::from_secs(120)), 0);
    }

    #[test]
    fn a_tenants_warm_instances_hold_at_most_its_memory_budget() {
        let mib = 1 << 20;
        let ledger = WarmLedger::new(8, 8, 64 * mib, Duration::from_secs(60));
        let now = Instant::now();
        let small = WarmPool::new(4, &ledger, Some("t"));
        let big = WarmPool::new(4, &ledger, Some("t"));
        let other = WarmPool::new(4, &ledger, Some("u"));
        small.give_back("small", 8 * mib, now);
        big.give_back("big", 48 * mib, now);
        big.give_back("bigger", 16 * mib, now);
        assert_eq!((small.len(), big.len()), (1, 1), "8 + 48 MiB fit the 64 MiB, a further 16 MiB does not");
        assert_eq!(ledger.of_tenant("t"), (2, 56 * mib));
        other.give_back("alone over it", 65 * mib, now);
        other.give_back("another tenant's", 64 * mib, now);
        assert_eq!(ledger.of_tenant("u"), (1, 64 * mib), "each tenant has a budget of its own");
        assert_eq!((ledger.total(), ledger.total_bytes()), (3, 120 * mib));
        assert_eq!(big.take(), Some("big"));
        big.give_back("bigger", 16 * mib, now);
        assert_eq!(ledger.of_tenant("t"), (2, 24 * mib), "taking an instance gives its bytes back");
        drop(big);
        assert_eq!(ledger.of_tenant("t"), (1, 8 * mib), "so does dropping its pool");
        assert_eq!(ledger.expire_idle(now + Duration::from_secs(60)), 2);
        assert_eq!((ledger.total(), ledger.total_bytes()), (0, 0), "and expiring it");
    }
}
