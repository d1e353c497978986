//! The kernel log: what a device ran, kernel by kernel, for whoever watches it live
//! (the web console's timeline, through `GET /v1/devices/{index}/kernels`).
//!
//! The device actor writes one record per kernel, kernel slice or upload it ran into a
//! bounded ring it owns (no lock: only the actor touches it; plain data, the names
//! interned, so a record costs no reference count), and only
//! while someone watches ([`DeviceQueue::watch_kernels`](super::DeviceQueue::watch_kernels)
//! holds a [`KernelWatch`]): with no watcher the cost is one relaxed atomic load per
//! step. Watchers read the records newer than the last they saw, at most a batch
//! limit of the newest ([`DeviceQueue::kernels`](super::DeviceQueue::kernels)); records
//! a watcher did not read (the ring wrapped, or they were past the limit) are counted
//! as missed, never waited for.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde::Serialize;

use super::PriorityClass;
use crate::device::Lane;

/// Default of [`SchedulerConfig::kernel_log`](super::SchedulerConfig::kernel_log):
/// records a device keeps for its watchers (a few seconds of small kernels).
pub const DEFAULT_KERNEL_LOG: usize = 8192;

/// The most records the live feed takes per batch (every 100 ms): 5,120 kernels a
/// second, which fills the console's 10 s timeline within the 50,000 records it keeps
/// (`web/js/live.js`); a device running more sends the newest and counts the rest as
/// missed, which keeps a watcher's cost bounded whatever the kernel rate.
pub const FEED_BATCH: usize = 512;

/// The tenant named in the records of the runtime's own work.
pub const RUNTIME_TENANT: &str = "sluice";

/// One kernel (or slice of one, or upload) a device ran.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KernelRecord {
    /// Its place in the device's log, from 1, without gaps.
    pub seq: u64,
    /// Whose work it was; `sluice` for the runtime's own (shared weight uploads).
    #[serde(serialize_with = "as_str")]
    pub tenant: Arc<str>,
    /// The function whose invocation launched it.
    #[serde(serialize_with = "as_str")]
    pub function: Arc<str>,
    /// The invocation, unique on this device.
    pub invocation: u64,
    /// The op's name in the catalog, or `upload`.
    pub op: &'static str,
    /// Where it ran: the whole device, or a partition of it.
    pub lane: Lane,
    pub class: PriorityClass,
    /// When it was submitted, in microseconds on the scheduler's clock (since the
    /// device's scheduler started).
    pub queued_us: u64,
    /// When the scheduler handed it to the device.
    pub start_us: u64,
    /// `start_us` plus the device time charged for it: measured on a synchronous
    /// device, the cost model's estimate on an asynchronous one (a GPU stream).
    pub end_us: u64,
    /// Whether it is one slice of a best-effort kernel cut into row blocks.
    pub sliced: bool,
    /// Whether it is latency work that ran ahead of waiting best-effort work (a
    /// preemption at a kernel boundary).
    pub preempting: bool,
}

fn as_str<S: serde::Serializer>(s: &Arc<str>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(s)
}

/// What a watcher gets: the records after the last it saw.
#[derive(Clone, Debug, Default, Serialize)]
pub struct KernelBatch {
    pub records: Vec<KernelRecord>,
    /// Records that left the ring before this watcher read them.
    pub missed: u64,
    /// The sequence number to ask from next time.
    pub next: u64,
}

/// The most distinct (tenant, function) pairs the log names at once; past it the
/// ring starts afresh (its records count as missed), which bounds the table when
/// functions come and go under a watcher for a long time.
const MAX_NAMES: usize = 4096;

/// The actor's ring of recent records.
///
/// A slot holds plain data: who ran a kernel is an index into a table of the distinct
/// (tenant, function) pairs, filled when the invocation changes, so recording a
/// kernel touches no reference count; names are attached when a watcher reads.
pub(super) struct KernelLog {
    ring: VecDeque<Slot>,
    capacity: usize,
    next_seq: u64,
    watchers: Arc<AtomicUsize>,
    names: Vec<(Arc<str>, Arc<str>)>,
    name_index: HashMap<(Arc<str>, Arc<str>), u32>,
    /// The names index of the invocation recorded last (invocation ids are never
    /// reused): consecutive kernels mostly come from one invocation, so most records
    /// skip the lookups.
    last: Option<(u64, u32)>,
}

/// A [`KernelRecord`] in the ring, its names interned.
#[derive(Clone, Copy)]
struct Slot {
    seq: u64,
    names: u32,
    invocation: u64,
    op: &'static str,
    lane: Lane,
    class: PriorityClass,
    queued_us: u64,
    start_us: u64,
    end_us: u64,
    sliced: bool,
    preempting: bool,
}

/// What the actor knows of a kernel when it records it.
pub(super) struct Ran {
    /// From [`KernelLog::names`].
    pub names: u32,
    pub invocation: u64,
    pub op: &'static str,
    pub lane: Lane,
    pub class: PriorityClass,
    pub queued: Duration,
    pub start: Duration,
    pub elapsed: Duration,
    pub sliced: bool,
    pub preempting: bool,
}

impl KernelLog {
    /// A log keeping at most `capacity` records (0: the log is off), recording while
    /// `watchers` counts someone.
    pub fn new(capacity: usize, watchers: Arc<AtomicUsize>) -> KernelLog {
        KernelLog {
            ring: VecDeque::new(),
            capacity,
            next_seq: 1,
            watchers,
            names: Vec::new(),
            name_index: HashMap::new(),
            last: None,
        }
    }

    /// Whether anyone watches (so [`KernelLog::push`] is worth calling).
    pub fn watched(&self) -> bool {
        self.capacity > 0 && self.watchers.load(Ordering::Relaxed) > 0
    }

    /// The names index of `invocation`'s tenant and function, asking `lookup` for them
    /// unless it was the last invocation recorded.
    pub fn names(&mut self, invocation: u64, lookup: impl FnOnce() -> (Arc<str>, Arc<str>)) -> u32 {
        if let Some((inv, index)) = self.last
            && inv == invocation
        {
            return index;
        }
        let pair = lookup();
        let index = match self.name_index.get(&pair) {
            Some(&index) => index,
            None => {
                if self.names.len() == MAX_NAMES {
                    self.ring.clear();
                    self.names.clear();
                    self.name_index.clear();
                }
                let index = self.names.len() as u32;
                self.names.push(pair.clone());
                self.name_index.insert(pair, index);
                index
            }
        };
        self.last = Some((invocation, index));
        index
    }

    /// Appends a record, dropping the oldest when full.
    pub fn push(&mut self, ran: Ran) {
        if self.ring.len() == self.capacity {
            self.ring.pop_front();
        } else if self.ring.capacity() == 0 {
            // Allocated once, on the first record, so an unwatched device keeps none.
            self.ring.reserve_exact(self.capacity);
        }
        let us = |d: Duration| d.as_micros() as u64;
        self.ring.push_back(Slot {
            seq: self.next_seq,
            names: ran.names,
            invocation: ran.invocation,
            op: ran.op,
            lane: ran.lane,
            class: ran.class,
            queued_us: us(ran.queued),
            start_us: us(ran.start),
            end_us: us(ran.start + ran.elapsed),
            sliced: ran.sliced,
            preempting: ran.preempting,
        });
        self.next_seq += 1;
    }

    /// The newest `limit` records from sequence number `from` on (0 or 1: all it
    /// keeps); the older ones since `from` count as missed.
    pub fn since(&self, from: u64, limit: usize) -> KernelBatch {
        let from = from.max(1).min(self.next_seq);
        let first = self.next_seq.saturating_sub(limit as u64).max(from);
        let oldest = self.ring.front().map_or(self.next_seq, |r| r.seq);
        let skip = first.saturating_sub(oldest) as usize;
        let records: Vec<KernelRecord> = self.ring.iter().skip(skip).map(|slot| self.record(slot)).collect();
        let missed = self.next_seq - from - records.len() as u64;
        KernelBatch { records, missed, next: self.next_seq }
    }

    fn record(&self, slot: &Slot) -> KernelRecord {
        let (tenant, function) = self.names[slot.names as usize].clone();
        KernelRecord {
            seq: slot.seq,
            tenant,
            function,
            invocation: slot.invocation,
            op: slot.op,
            lane: slot.lane,
            class: slot.class,
            queued_us: slot.queued_us,
            start_us: slot.start_us,
            end_us: slot.end_us,
            sliced: slot.sliced,
            preempting: slot.preempting,
        }
    }
}

/// Someone watching a device's kernels: the device records them while one exists.
pub struct KernelWatch {
    watchers: Arc<AtomicUsize>,
}

impl KernelWatch {
    pub(super) fn new(watchers: Arc<AtomicUsize>) -> KernelWatch {
        watchers.fetch_add(1, Ordering::Relaxed);
        KernelWatch { watchers }
    }
}

impl Drop for KernelWatch {
    fn drop(&mut self) {
        self.watchers.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ran(log: &mut KernelLog, tenant: &str, start_us: u64) -> Ran {
        let invocation = tenant.len() as u64;
        Ran {
            names: log.names(invocation, || (tenant.into(), "f".into())),
            invocation,
            op: "exp",
            lane: Lane::Whole,
            class: PriorityClass::Latency,
            queued: Duration::from_micros(start_us),
            start: Duration::from_micros(start_us),
            elapsed: Duration::from_micros(5),
            sliced: false,
            preempting: false,
        }
    }

    #[test]
    fn records_only_while_watched() {
        let watchers = Arc::new(AtomicUsize::new(0));
        let log = KernelLog::new(4, watchers.clone());
        assert!(!log.watched());
        let watch = KernelWatch::new(watchers.clone());
        assert!(log.watched());
        drop(watch);
        assert!(!log.watched());
        let _watch = KernelWatch::new(watchers.clone());
        assert!(!KernelLog::new(0, watchers).watched(), "a log of capacity 0 is off");
    }

    #[test]
    fn the_ring_is_bounded_and_counts_what_a_reader_missed() {
        let mut log = KernelLog::new(4, Arc::new(AtomicUsize::new(1)));
        assert_eq!(log.since(0, 100).next, 1);
        for i in 0..3 {
            let r = ran(&mut log, "a", i);
            log.push(r);
        }
        let first = log.since(0, 100);
        assert_eq!(first.records.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!((first.missed, first.next), (0, 4));
        assert_eq!(first.records[1].end_us, 6, "start plus the device time");
        for i in 3..10 {
            let r = ran(&mut log, "bb", i);
            log.push(r);
        }
        let second = log.since(first.next, 100);
        assert_eq!(second.records.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![7, 8, 9, 10], "the newest four");
        assert_eq!((second.missed, second.next), (3, 11), "4 to 6 left the ring unread");
        let third = log.since(second.next, 100);
        assert!(third.records.is_empty());
        assert_eq!((third.missed, third.next), (0, 11));
        let limited = log.since(first.next, 2);
        assert_eq!(limited.records.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![9, 10], "the newest two");
        assert_eq!(limited.missed, 5, "4 to 8 were not sent");
        assert_eq!(log.since(99, 100).records.len(), 0, "a sequence number from the future");
        assert_eq!((&*first.records[0].tenant, &*second.records[0].tenant), ("a", "bb"), "names by record");
    }

    #[test]
    fn names_are_interned_across_invocations_and_bounded() {
        let mut log = KernelLog::new(4, Arc::new(AtomicUsize::new(1)));
        let a = log.names(1, || ("t".into(), "f".into()));
        assert_eq!(log.names(2, || ("t".into(), "f".into())), a, "another invocation of the same function");
        let g = log.names(3, || ("t".into(), "g".into()));
        assert_ne!(g, a);
        assert_eq!(log.names(3, || unreachable!("the last invocation's names are cached")), g);
        for i in 0..(MAX_NAMES - 2) {
            log.names(10 + i as u64, || ("t".into(), format!("f{i}").into()));
        }
        assert_eq!(log.names.len(), MAX_NAMES);
        let r = ran(&mut log, "t", 0);
        log.push(r);
        let overflow = log.names(1 << 40, || ("u".into(), "new".into()));
        assert_eq!((overflow, log.names.len(), log.ring.len()), (0, 1, 0), "the table and the ring start afresh");
        let batch = log.since(0, 100);
        assert_eq!((batch.records.len(), batch.missed), (0, 1), "the dropped record counts as missed");
    }
}
