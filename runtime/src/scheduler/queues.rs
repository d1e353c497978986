//! Queues of pending work and the choice of what runs next.
//!
//! Pure bookkeeping, no device: per-invocation FIFO queues, per-tenant accounting in
//! virtual time (device time divided by weight), and [`Queues::pick`], which applies
//! the [`Policy`]; the worker [`Queues::take`]s what was picked and executes it. Times
//! are on the scheduler's clock, given by the caller. Unit-tested here.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use rustc_hash::FxHashMap;

use super::status::TenantStatus;
use super::work::{Queued, Work};
use super::{InvocationId, Policy, PriorityClass, QueueRoom, SchedulingInfo};

struct Invocation {
    tenant: usize,
    /// The function invoked (for the kernel log).
    function: Arc<str>,
    class: PriorityClass,
    items: VecDeque<Queued>,
    /// Whether a work item of this invocation has been taken (for preemption latency).
    started: bool,
    /// Its submitters' room, given back as its items are taken.
    room: Option<Arc<QueueRoom>>,
}

struct Tenant {
    name: Arc<str>,
    class: PriorityClass,
    weight: u32,
    /// Device time divided by weight, in nanoseconds: fair share runs the lowest.
    vtime: f64,
    device_ns: u64,
    /// Host CPU time its guests computed (charged to `vtime` like device time).
    guest_cpu_ns: u64,
    kernels: u64,
    active: usize,
}

/// Everything queued on one device.
#[derive(Default)]
pub(super) struct Queues {
    system: VecDeque<Queued>,
    invocations: FxHashMap<InvocationId, Invocation>,
    tenants: Vec<Tenant>,
    tenant_index: HashMap<(Arc<str>, PriorityClass), usize>,
    seq: u64,
    /// When the last latency-class invocation ended.
    last_latency_end: Option<Duration>,
}

/// Where the next work item comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pick {
    System,
    Invocation(InvocationId),
}

/// A work item taken off its queue, with whom it belongs to.
pub(super) struct Taken {
    pub item: Queued,
    pub inv: InvocationId,
    /// The tenant (an index for [`Queues::correct`]); `None` for the runtime's own work.
    pub tenant: Option<usize>,
    /// Whether it is the first item taken of a latency-class invocation, whose wait
    /// is its preemption latency.
    pub starts_latency_invocation: bool,
}

impl Queues {
    pub fn begin(&mut self, inv: InvocationId, info: SchedulingInfo, room: Option<Arc<QueueRoom>>) {
        let key = (info.tenant.clone(), info.class);
        let index = *self.tenant_index.entry(key).or_insert_with(|| {
            self.tenants.push(Tenant {
                name: info.tenant.clone(),
                class: info.class,
                weight: info.weight.max(1),
                vtime: 0.0,
                device_ns: 0,
                guest_cpu_ns: 0,
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
        self.invocations.insert(
            inv,
            Invocation {
                tenant: index,
                function: info.function,
                class: info.class,
                items: VecDeque::new(),
                started: false,
                room,
            },
        );
    }

    /// Ends an invocation at `now` and returns the work it still had queued.
    pub fn end(&mut self, inv: InvocationId, now: Duration) -> Vec<Queued> {
        match self.invocations.remove(&inv) {
            Some(i) => {
                self.tenants[i.tenant].active -= 1;
                if i.class == PriorityClass::Latency {
                    self.last_latency_end = Some(now);
                }
                i.items.into()
            }
            None => Vec::new(),
        }
    }

    /// Queues work submitted at `at`; gives it back if the invocation is unknown
    /// (already ended).
    pub fn push(&mut self, inv: InvocationId, work: Work, at: Duration) -> Result<(), Work> {
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

    /// Takes every work item waiting, the runtime's and every invocation's (a device
    /// reset lost what they read); the invocations stay open and get their room back.
    pub fn take_all(&mut self) -> Vec<Queued> {
        let mut all: Vec<Queued> = self.system.drain(..).collect();
        for i in self.invocations.values_mut() {
            let items = i.items.len();
            for (n, item) in i.items.drain(..).enumerate() {
                if let Some(room) = &i.room {
                    room.release(n + 1 == items);
                }
                all.push(item);
            }
        }
        all
    }

    /// Work items waiting.
    pub fn queued(&self) -> usize {
        self.system.len() + self.invocations.values().map(|i| i.items.len()).sum::<usize>()
    }

    /// Invocations open on the device.
    pub fn open_invocations(&self) -> usize {
        self.invocations.len()
    }

    pub fn is_idle(&self) -> bool {
        self.system.is_empty() && self.invocations.values().all(|i| i.items.is_empty())
    }

    /// Whether any latency-class invocation is open (queued or running work).
    pub fn latency_active(&self) -> bool {
        self.invocations.values().any(|i| i.class == PriorityClass::Latency)
    }

    /// Whether latency work is active or ended less than `hold` before `now`, so more
    /// is likely to come: best-effort work stays preemptible (sliced, shallow)
    /// meanwhile, so the next latency request does not find a long best-effort kernel
    /// running.
    pub fn latency_expected(&self, hold: Duration, now: Duration) -> bool {
        self.latency_active() || self.last_latency_end.is_some_and(|t| now.saturating_sub(t) < hold)
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

    /// The class of `pick`'s work: the runtime's own work counts as latency work.
    pub fn class_of(&self, pick: Pick) -> PriorityClass {
        match pick {
            Pick::System => PriorityClass::Latency,
            Pick::Invocation(id) => self.invocations.get(&id).map_or(PriorityClass::Latency, |i| i.class),
        }
    }

    /// The head of `pick`'s queue, without taking it.
    pub fn peek(&self, pick: Pick) -> Option<&Queued> {
        match pick {
            Pick::System => self.system.front(),
            Pick::Invocation(id) => self.invocations.get(&id)?.items.front(),
        }
    }

    /// Takes the head of `pick`'s queue.
    pub fn take(&mut self, pick: Pick) -> Option<Taken> {
        match pick {
            Pick::System => Some(Taken {
                item: self.system.pop_front()?,
                inv: InvocationId::SYSTEM,
                tenant: None,
                starts_latency_invocation: false,
            }),
            Pick::Invocation(id) => {
                let i = self.invocations.get_mut(&id)?;
                let item = i.items.pop_front()?;
                if let Some(room) = &i.room {
                    room.release(i.items.is_empty());
                }
                let first = !std::mem::replace(&mut i.started, true);
                Some(Taken {
                    item,
                    inv: id,
                    tenant: Some(i.tenant),
                    starts_latency_invocation: first && i.class == PriorityClass::Latency,
                })
            }
        }
    }

    /// Puts a partly done item (a sliced kernel) back at the head of its queue; gives
    /// its work back if its invocation has ended meanwhile.
    pub fn put_back(&mut self, inv: InvocationId, item: Queued) -> Result<(), Work> {
        if inv == InvocationId::SYSTEM {
            self.system.push_front(item);
            return Ok(());
        }
        match self.invocations.get_mut(&inv) {
            Some(i) => {
                i.items.push_front(item);
                Ok(())
            }
            None => Err(item.work),
        }
    }

    /// Corrects tenant `tenant`'s charge by `delta_ns` (a kernel charged at its estimate
    /// whose device time is now known).
    pub fn correct(&mut self, tenant: usize, delta_ns: i64) {
        if let Some(t) = self.tenants.get_mut(tenant) {
            t.device_ns = (t.device_ns as i64 + delta_ns).max(0) as u64;
            t.vtime += delta_ns as f64 / t.weight as f64;
        }
    }

    /// Charges measured device time to the invocation's tenant.
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

    /// Charges host CPU time the invocation's guest computed to its tenant's share.
    pub fn charge_guest_cpu(&mut self, inv: InvocationId, elapsed: Duration) {
        if let Some(i) = self.invocations.get(&inv) {
            let t = &mut self.tenants[i.tenant];
            let ns = elapsed.as_nanos() as u64;
            t.guest_cpu_ns += ns;
            t.vtime += ns as f64 / t.weight as f64;
        }
    }

    /// The tenant and function of an open invocation (the runtime's own for
    /// [`InvocationId::SYSTEM`]), for the kernel log.
    pub fn names(&self, inv: InvocationId) -> (Arc<str>, Arc<str>) {
        match self.invocations.get(&inv) {
            Some(i) => (self.tenants[i.tenant].name.clone(), i.function.clone()),
            None => (Arc::from(super::RUNTIME_TENANT), Arc::from("(runtime)")),
        }
    }

    /// Every tenant's queues and charges, by name.
    pub fn tenant_statuses(&self) -> Vec<TenantStatus> {
        let mut tenants: Vec<TenantStatus> = self
            .tenants
            .iter()
            .enumerate()
            .map(|(index, t)| {
                let invs = self.invocations.values().filter(|i| i.tenant == index);
                let (active, queued) = invs.fold((0, 0), |(a, q), i| (a + 1, q + i.items.len()));
                TenantStatus {
                    tenant: t.name.to_string(),
                    class: t.class,
                    weight: t.weight,
                    queued,
                    active_invocations: active,
                    kernels: t.kernels,
                    device_time_us: t.device_ns / 1000,
                    guest_cpu_us: t.guest_cpu_ns / 1000,
                }
            })
            .collect();
        tenants.sort_by(|a, b| a.tenant.cmp(&b.tenant));
        tenants
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::TensorId;
    use sluice_host_api::{DType, TensorMeta};

    fn info(tenant: &str, class: PriorityClass, weight: u32) -> SchedulingInfo {
        SchedulingInfo { tenant: tenant.into(), function: "f".into(), class, weight }
    }

    fn work() -> Work {
        Work::Upload { id: TensorId(1), meta: TensorMeta::new(DType::U8, vec![0]).unwrap(), bytes: vec![] }
    }

    #[test]
    fn latency_before_batch_and_fifo_ignores_classes() {
        let mut q = Queues::default();
        let (be, ls) = (InvocationId(1), InvocationId(2));
        q.begin(be, info("a", PriorityClass::Batch, 1), None);
        q.begin(ls, info("b", PriorityClass::Latency, 1), None);
        let now = Duration::ZERO;
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
        q.begin(a, info("a", PriorityClass::Batch, 3), None);
        q.begin(b, info("b", PriorityClass::Batch, 1), None);
        let now = Duration::ZERO;
        for _ in 0..4000 {
            let _ = q.push(a, work(), now);
            let _ = q.push(b, work(), now);
        }
        for _ in 0..4000 {
            let pick = q.pick(Policy::Priority).expect("work is queued");
            let taken = q.take(pick).expect("picked a non-empty queue");
            q.charge(taken.inv, Duration::from_micros(10), true);
        }
        let time = |name: &str| q.tenant_statuses().iter().find(|t| t.tenant == name).unwrap().device_time_us as f64;
        let share_a = time("a") / (time("a") + time("b"));
        assert!((share_a - 0.75).abs() < 0.01, "{share_a}");
        // A newcomer starts at the active minimum, not at zero.
        q.begin(InvocationId(3), info("c", PriorityClass::Batch, 1), None);
        let floor = q.tenants[0].vtime.min(q.tenants[1].vtime);
        assert!(q.tenants[2].vtime >= floor);
    }

    #[test]
    fn a_tenant_burning_guest_cpu_loses_share() {
        let mut q = Queues::default();
        let (a, b) = (InvocationId(1), InvocationId(2));
        q.begin(a, info("a", PriorityClass::Batch, 1), None);
        q.begin(b, info("b", PriorityClass::Batch, 1), None);
        for _ in 0..4000 {
            let _ = q.push(a, work(), Duration::ZERO);
            let _ = q.push(b, work(), Duration::ZERO);
        }
        // Each kernel takes 10 µs of device time; A's guest computes 30 µs on the
        // host before each of its launches.
        for _ in 0..4000 {
            let taken = q.take(q.pick(Policy::Priority).unwrap()).unwrap();
            if taken.inv == a {
                q.charge_guest_cpu(a, Duration::from_micros(30));
            }
            q.charge(taken.inv, Duration::from_micros(10), true);
        }
        let status = q.tenant_statuses();
        let (sa, sb) = (&status[0], &status[1]);
        let share_a = sa.kernels as f64 / (sa.kernels + sb.kernels) as f64;
        assert!((share_a - 0.2).abs() < 0.01, "A ran {share_a} of the kernels (without the charge: 0.5)");
        assert_eq!(sa.guest_cpu_us, 30 * sa.kernels);
        assert_eq!(sb.guest_cpu_us, 0);
    }

    #[test]
    fn work_of_ended_invocations_is_refused_and_returned() {
        let mut q = Queues::default();
        q.begin(InvocationId(1), info("a", PriorityClass::Latency, 1), None);
        let _ = q.push(InvocationId(1), work(), Duration::ZERO);
        assert_eq!(q.end(InvocationId(1), Duration::ZERO).len(), 1);
        assert!(q.push(InvocationId(1), work(), Duration::ZERO).is_err());
        assert!(q.is_idle());
    }

    #[test]
    fn take_reports_whose_work_it_is_and_put_back_keeps_the_order() {
        let mut q = Queues::default();
        let ls = InvocationId(1);
        q.begin(ls, info("a", PriorityClass::Latency, 1), None);
        for _ in 0..2 {
            let _ = q.push(ls, work(), Duration::from_micros(5));
        }
        let first = q.take(Pick::Invocation(ls)).unwrap();
        assert!(first.starts_latency_invocation && first.tenant == Some(0));
        let seq = first.item.seq;
        assert!(q.put_back(ls, first.item).is_ok());
        let again = q.take(Pick::Invocation(ls)).unwrap();
        assert_eq!(again.item.seq, seq, "the put-back item is the head again");
        assert!(!again.starts_latency_invocation, "only the first take starts the invocation");
        assert_eq!(q.end(ls, Duration::ZERO).len(), 1);
        assert!(q.put_back(ls, again.item).is_err(), "an ended invocation takes nothing back");
    }

    #[test]
    fn the_latency_hold_runs_on_the_given_clock() {
        let mut q = Queues::default();
        let hold = Duration::from_millis(25);
        q.begin(InvocationId(1), info("a", PriorityClass::Latency, 1), None);
        assert!(q.latency_expected(Duration::ZERO, Duration::ZERO));
        q.end(InvocationId(1), Duration::from_millis(10));
        assert!(q.latency_expected(hold, Duration::from_millis(34)));
        assert!(!q.latency_expected(hold, Duration::from_millis(35)));
    }
}
