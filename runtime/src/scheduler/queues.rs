//! Queues of pending work and the choice of what runs next.
//!
//! Pure bookkeeping, no device: per-invocation FIFO queues, per-tenant accounting in
//! virtual time (device time divided by weight), and [`Queues::pick`], which applies
//! the [`Policy`]. Unit-tested here; the worker executes what it picks.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{InvocationId, Policy, PriorityClass, SchedulingInfo, Work};

/// A queued unit of work with its arrival order and time.
pub(super) struct Queued {
    pub work: Work,
    pub seq: u64,
    pub at: Instant,
    /// Rows of a sliced matmul already computed, with their buffers.
    pub slices: Option<super::worker::SliceProgress>,
}

pub(super) struct Invocation {
    pub tenant: usize,
    pub class: PriorityClass,
    pub items: VecDeque<Queued>,
    /// Whether a kernel of this invocation has started (for preemption latency).
    pub started: bool,
}

pub(super) struct Tenant {
    pub name: Arc<str>,
    pub class: PriorityClass,
    pub weight: u32,
    /// Device time divided by weight, in nanoseconds: fair share runs the lowest.
    pub vtime: f64,
    pub device_ns: u64,
    pub kernels: u64,
    pub active: usize,
}

/// Everything queued on one device.
#[derive(Default)]
pub(super) struct Queues {
    pub system: VecDeque<Queued>,
    pub invocations: HashMap<InvocationId, Invocation>,
    pub tenants: Vec<Tenant>,
    tenant_index: HashMap<(Arc<str>, PriorityClass), usize>,
    seq: u64,
    /// When the last latency-class invocation ended.
    last_latency_end: Option<Instant>,
}

/// Where the next work item comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pick {
    System,
    Invocation(InvocationId),
}

impl Queues {
    pub fn begin(&mut self, inv: InvocationId, info: SchedulingInfo) {
        let key = (info.tenant.clone(), info.class);
        let index = *self.tenant_index.entry(key).or_insert_with(|| {
            self.tenants.push(Tenant {
                name: info.tenant.clone(),
                class: info.class,
                weight: info.weight.max(1),
                vtime: 0.0,
                device_ns: 0,
                kernels: 0,
                active: 0,
            });
            self.tenants.len() - 1
        });
        // A tenant that was idle starts level with the least-served active tenant
        // of its class: idleness earns no credit to burst with later.
        if self.tenants[index].active == 0 {
            let floor = self
                .tenants
                .iter()
                .filter(|t| t.active > 0 && t.class == info.class)
                .map(|t| t.vtime)
                .fold(f64::INFINITY, f64::min);
            let t = &mut self.tenants[index];
            if floor.is_finite() {
                t.vtime = t.vtime.max(floor);
            }
        }
        let t = &mut self.tenants[index];
        t.weight = info.weight.max(1);
        t.active += 1;
        self.invocations
            .insert(inv, Invocation { tenant: index, class: info.class, items: VecDeque::new(), started: false });
    }

    /// Ends an invocation and returns the work it still had queued.
    pub fn end(&mut self, inv: InvocationId) -> Vec<Queued> {
        match self.invocations.remove(&inv) {
            Some(i) => {
                self.tenants[i.tenant].active -= 1;
                if i.class == PriorityClass::Latency {
                    self.last_latency_end = Some(Instant::now());
                }
                i.items.into()
            }
            None => Vec::new(),
        }
    }

    /// Queues work; gives it back if the invocation is unknown (already ended).
    pub fn push(&mut self, inv: InvocationId, work: Work, at: Instant) -> Result<(), Work> {
        self.seq += 1;
        let q = Queued { work, seq: self.seq, at, slices: None };
        if inv == InvocationId::SYSTEM {
            self.system.push_back(q);
            return Ok(());
        }
        match self.invocations.get_mut(&inv) {
            Some(i) => {
                i.items.push_back(q);
                Ok(())
            }
            None => Err(q.work),
        }
    }

    pub fn queued(&self) -> usize {
        self.system.len() + self.invocations.values().map(|i| i.items.len()).sum::<usize>()
    }

    pub fn is_idle(&self) -> bool {
        self.system.is_empty() && self.invocations.values().all(|i| i.items.is_empty())
    }

    /// Whether any latency-class invocation is open (queued or running work).
    pub fn latency_active(&self) -> bool {
        self.invocations.values().any(|i| i.class == PriorityClass::Latency)
    }

    /// Whether latency work is active or ended less than `hold` ago, so more is likely
    /// to come: best-effort work stays preemptible (sliced, shallow) meanwhile, so the
    /// next latency request does not find a long best-effort kernel running.
    pub fn latency_expected(&self, hold: Duration) -> bool {
        self.latency_active() || self.last_latency_end.is_some_and(|t| t.elapsed() < hold)
    }

    /// Whether best-effort work is waiting.
    pub fn batch_waiting(&self) -> bool {
        self.invocations.values().any(|i| i.class == PriorityClass::Batch && !i.items.is_empty())
    }

    /// Chooses the next work item under `policy`.
    pub fn pick(&self, policy: Policy) -> Option<Pick> {
        if !self.system.is_empty() {
            return Some(Pick::System);
        }
        // (class rank, tenant vtime, head seq): the smallest wins. FIFO uses only seq.
        let mut best: Option<((u8, f64, u64), InvocationId)> = None;
        for (&id, inv) in &self.invocations {
            let Some(head) = inv.items.front() else { continue };
            let key = match policy {
                Policy::Fifo => (0, 0.0, head.seq),
                Policy::Priority => {
                    let rank = match inv.class {
                        PriorityClass::Latency => 0,
                        PriorityClass::Batch => 1,
                    };
                    (rank, self.tenants[inv.tenant].vtime, head.seq)
                }
            };
            if best.as_ref().is_none_or(|(b, _)| key.partial_cmp(b) == Some(std::cmp::Ordering::Less)) {
                best = Some((key, id));
            }
        }
        best.map(|(_, id)| Pick::Invocation(id))
    }

    /// Charges measured device time to the invocation's tenant.
    /// Corrects tenant `tenant`'s charge by `delta_ns` (a kernel charged at its estimate
    /// whose device time is now known).
    pub fn correct(&mut self, tenant: usize, delta_ns: i64) {
        if let Some(t) = self.tenants.get_mut(tenant) {
            t.device_ns = (t.device_ns as i64 + delta_ns).max(0) as u64;
            t.vtime += delta_ns as f64 / t.weight as f64;
        }
    }

    pub fn charge(&mut self, inv: InvocationId, elapsed: Duration, kernel_done: bool) {
        if let Some(i) = self.invocations.get(&inv) {
            let t = &mut self.tenants[i.tenant];
            let ns = elapsed.as_nanos() as u64;
            t.device_ns += ns;
            t.vtime += ns as f64 / t.weight as f64;
            if kernel_done {
                t.kernels += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::TensorId;
    use sluice_host_api::{DType, TensorMeta};

    fn info(tenant: &str, class: PriorityClass, weight: u32) -> SchedulingInfo {
        SchedulingInfo { tenant: tenant.into(), class, weight }
    }

    fn work() -> Work {
        Work::Upload { id: TensorId(1), meta: TensorMeta::new(DType::U8, vec![0]).unwrap(), bytes: vec![] }
    }

    #[test]
    fn latency_before_batch_and_fifo_ignores_classes() {
        let mut q = Queues::default();
        let (be, ls) = (InvocationId(1), InvocationId(2));
        q.begin(be, info("a", PriorityClass::Batch, 1));
        q.begin(ls, info("b", PriorityClass::Latency, 1));
        let now = Instant::now();
        assert!(q.push(be, work(), now).is_ok());
        assert!(q.push(ls, work(), now).is_ok());
        assert_eq!(q.pick(Policy::Priority), Some(Pick::Invocation(ls)));
        assert_eq!(q.pick(Policy::Fifo), Some(Pick::Invocation(be)));
        assert!(q.push(InvocationId::SYSTEM, work(), now).is_ok());
        assert_eq!(q.pick(Policy::Priority), Some(Pick::System));
    }

    #[test]
    fn fair_share_follows_weights_and_idle_tenants_earn_no_credit() {
        let mut q = Queues::default();
        let (a, b) = (InvocationId(1), InvocationId(2));
        q.begin(a, info("a", PriorityClass::Batch, 3));
        q.begin(b, info("b", PriorityClass::Batch, 1));
        let now = Instant::now();
        for _ in 0..4000 {
            let _ = q.push(a, work(), now);
            let _ = q.push(b, work(), now);
        }
        for _ in 0..4000 {
            let Some(Pick::Invocation(id)) = q.pick(Policy::Priority) else { panic!("work is queued") };
            q.invocations.get_mut(&id).unwrap().items.pop_front();
            q.charge(id, Duration::from_micros(10), true);
        }
        let share_a = q.tenants[0].device_ns as f64 / (q.tenants[0].device_ns + q.tenants[1].device_ns) as f64;
        assert!((share_a - 0.75).abs() < 0.01, "{share_a}");
        // A newcomer starts at the active minimum, not at zero.
        q.begin(InvocationId(3), info("c", PriorityClass::Batch, 1));
        let floor = q.tenants[0].vtime.min(q.tenants[1].vtime);
        assert!(q.tenants[2].vtime >= floor);
    }

    #[test]
    fn work_of_ended_invocations_is_refused_and_returned() {
        let mut q = Queues::default();
        q.begin(InvocationId(1), info("a", PriorityClass::Latency, 1));
        let _ = q.push(InvocationId(1), work(), Instant::now());
        assert_eq!(q.end(InvocationId(1)).len(), 1);
        assert!(q.push(InvocationId(1), work(), Instant::now()).is_err());
        assert!(q.is_idle());
    }
}
