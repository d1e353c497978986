//! The kernel log: what a device ran, kernel by kernel, for whoever watches it live
//! (the web console's timeline, through `GET /v1/devices/{index}/kernels`).
//!
//! The device actor writes one [`KernelRecord`] per kernel, kernel slice or upload it
//! ran into a bounded ring it owns (no lock: only the actor touches it), and only
//! while someone watches ([`DeviceQueue::watch_kernels`](super::DeviceQueue::watch_kernels)
//! holds a [`KernelWatch`]): with no watcher the cost is one relaxed atomic load per
//! step. Watchers read the records newer than the last they saw, at most a batch
//! limit of the newest ([`DeviceQueue::kernels`](super::DeviceQueue::kernels)); records
//! a watcher did not read (the ring wrapped, or they were past the limit) are counted
//! as missed, never waited for.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde::Serialize;

use super::PriorityClass;
use crate::device::Lane;

/// Default of [`SchedulerConfig::kernel_log`](super::SchedulerConfig::kernel_log):
/// records a device keeps for its watchers (a few seconds of small kernels).
pub const DEFAULT_KERNEL_LOG: usize = 8192;

/// The most records the live feed takes per batch (every 100 ms): 10,240 kernels a
/// second, more than a timeline can show; a device running more sends the newest and
/// counts the rest as missed, which keeps a watcher's cost bounded.
pub const FEED_BATCH: usize = 1024;

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

/// The actor's ring of recent records.
pub(super) struct KernelLog {
    ring: VecDeque<KernelRecord>,
    capacity: usize,
    next_seq: u64,
    watchers: Arc<AtomicUsize>,
    /// The names of the invocation recorded last (invocation ids are never reused):
    /// consecutive kernels mostly come from one invocation, so most records skip the
    /// queues' lookup.
    last: Option<(u64, Arc<str>, Arc<str>)>,
}

/// What the actor knows of a kernel when it records it.
pub(super) struct Ran {
    pub tenant: Arc<str>,
    pub function: Arc<str>,
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
        KernelLog { ring: VecDeque::new(), capacity, next_seq: 1, watchers, last: None }
    }

    /// Whether anyone watches (so [`KernelLog::push`] is worth calling).
    pub fn watched(&self) -> bool {
        self.capacity > 0 && self.watchers.load(Ordering::Relaxed) > 0
    }

    /// The tenant and function of `invocation`, from `lookup` unless it was the last
    /// one asked about.
    pub fn names(&mut self, invocation: u64, lookup: impl FnOnce() -> (Arc<str>, Arc<str>)) -> (Arc<str>, Arc<str>) {
        match &self.last {
            Some((inv, tenant, function)) if *inv == invocation => (tenant.clone(), function.clone()),
            _ => {
                let (tenant, function) = lookup();
                self.last = Some((invocation, tenant.clone(), function.clone()));
                (tenant, function)
            }
        }
    }

    /// Appends a record, dropping the oldest when full.
    pub fn push(&mut self, ran: Ran) {
        if self.ring.len() == self.capacity {
            self.ring.pop_front();
        }
        let us = |d: Duration| d.as_micros() as u64;
        self.ring.push_back(KernelRecord {
            seq: self.next_seq,
            tenant: ran.tenant,
            function: ran.function,
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
        let records: Vec<KernelRecord> = self.ring.iter().skip(skip).cloned().collect();
        let missed = self.next_seq - from - records.len() as u64;
        KernelBatch { records, missed, next: self.next_seq }
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

    fn ran(tenant: &str, start_us: u64) -> Ran {
        Ran {
            tenant: tenant.into(),
            function: "f".into(),
            invocation: 1,
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
            log.push(ran("a", i));
        }
        let first = log.since(0, 100);
        assert_eq!(first.records.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!((first.missed, first.next), (0, 4));
        assert_eq!(first.records[1].end_us, 6, "start plus the device time");
        for i in 3..10 {
            log.push(ran("b", i));
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
    }
}
