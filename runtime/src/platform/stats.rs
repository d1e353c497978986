//! Per-function inference statistics, in the shape Triton's statistics extension reports
//! (`GET /v2/models/{name}/stats`): counts and cumulative times of successful and failed
//! invocations, and of the queue and compute phases of the successful ones.
//!
//! Kept beside the Prometheus histograms (whose sums the metrics library does not expose)
//! and updated at the same points, so the two always agree; dropped with the function.
//! The latencies of each function's last [`RECENT`] successful invocations are kept too,
//! for the live console's and `/v1/status`'s p50/p99 ([`StatsTable::recent_latency`]), and
//! for a streaming function the time to its first chunk (request accepted → first token)
//! and the mean gap between its later chunks (time per output token).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::Serialize;

use super::live::FunctionLatency;
use crate::scheduler::LatencySummary;

/// How many recent latencies of each function are kept.
pub const RECENT: usize = 512;

/// A count and the total time it took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Timed {
    pub count: u64,
    pub ns: u64,
}

impl Timed {
    fn add(&mut self, d: Duration) {
        self.count += 1;
        self.ns = self.ns.saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }
}

/// One function's statistics over all its versions since the server started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FunctionStats {
    /// Milliseconds since the Unix epoch of the last invocation (0: none yet).
    pub last_inference_ms: u64,
    /// Successful invocations, admission to result.
    pub success: Timed,
    /// Failed or refused invocations, admission to error.
    pub fail: Timed,
    /// Successful invocations' time from admission to instantiation.
    pub queue: Timed,
    /// Successful invocations' time instantiating and running the guest.
    pub compute: Timed,
}

/// One function's counters and recent latencies.
#[derive(Debug, Default)]
struct Entry {
    stats: FunctionStats,
    /// Latencies of the last successful invocations, in nanoseconds.
    recent: VecDeque<u64>,
    /// Times to the first chunk of the last streaming invocations, in nanoseconds.
    first_chunk: VecDeque<u64>,
    /// Mean gaps between later chunks of the last streaming invocations, in nanoseconds.
    chunk_gap: VecDeque<u64>,
}

/// Appends `d` to a window of the last [`RECENT`] samples.
fn push_recent(window: &mut VecDeque<u64>, d: Duration) {
    if window.len() == RECENT {
        window.pop_front();
    }
    window.push_back(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
}

fn summary(window: &VecDeque<u64>) -> Option<LatencySummary> {
    let samples: Vec<u64> = window.iter().copied().collect();
    (!samples.is_empty()).then(|| LatencySummary::from_ns(&samples))
}

/// tenant → function → statistics.
#[derive(Debug, Default)]
pub(crate) struct StatsTable {
    stats: Mutex<HashMap<String, HashMap<String, Entry>>>,
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl StatsTable {
    fn update(&self, tenant: &str, function: &str, f: impl FnOnce(&mut Entry)) {
        let mut stats = self.stats.lock();
        let entry = stats.entry(tenant.to_owned()).or_default().entry(function.to_owned()).or_default();
        entry.stats.last_inference_ms = now_ms();
        f(entry);
    }

    pub(crate) fn record_ok(&self, tenant: &str, function: &str, total: Duration, queue: Duration, compute: Duration) {
        self.update(tenant, function, |e| {
            let s = &mut e.stats;
            s.success.add(total);
            s.queue.add(queue);
            s.compute.add(compute);
            push_recent(&mut e.recent, total);
        });
    }

    /// Records a streaming invocation's time to first chunk and, with two chunks or
    /// more, its mean gap between chunks.
    pub(crate) fn record_chunks(&self, tenant: &str, function: &str, first: Duration, gap: Option<Duration>) {
        self.update(tenant, function, |e| {
            push_recent(&mut e.first_chunk, first);
            if let Some(gap) = gap {
                push_recent(&mut e.chunk_gap, gap);
            }
        });
    }

    pub(crate) fn record_error(&self, tenant: &str, function: &str, total: Duration) {
        self.update(tenant, function, |e| e.stats.fail.add(total));
    }

    /// The statistics of `function` (all of `tenant`'s when `None`), by function name.
    pub(crate) fn get(&self, tenant: &str, function: Option<&str>) -> Vec<(String, FunctionStats)> {
        let stats = self.stats.lock();
        let Some(functions) = stats.get(tenant) else { return Vec::new() };
        let mut out: Vec<_> = functions
            .iter()
            .filter(|(name, _)| function.is_none_or(|f| f == name.as_str()))
            .map(|(name, e)| (name.clone(), e.stats))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The latency distribution of each function's recent successful invocations, by
    /// tenant and function name (every tenant's when `tenant` is `None`).
    pub(crate) fn recent_latency(&self, tenant: Option<&str>) -> Vec<FunctionLatency> {
        let stats = self.stats.lock();
        let mut out: Vec<_> = stats
            .iter()
            .filter(|(t, _)| tenant.is_none_or(|me| me == t.as_str()))
            .flat_map(|(t, functions)| {
                functions.iter().filter(|(_, e)| !e.recent.is_empty()).map(|(f, e)| FunctionLatency {
                    tenant: t.clone(),
                    function: f.clone(),
                    latency: summary(&e.recent).unwrap_or_default(),
                    time_to_first_token: summary(&e.first_chunk),
                    time_per_output_token: summary(&e.chunk_gap),
                })
            })
            .collect();
        out.sort_by(|a, b| (&a.tenant, &a.function).cmp(&(&b.tenant, &b.function)));
        out
    }

    pub(crate) fn forget(&self, tenant: &str, function: Option<&str>) {
        let mut stats = self.stats.lock();
        match function {
            None => {
                stats.remove(tenant);
            }
            Some(f) => {
                if let Some(functions) = stats.get_mut(tenant) {
                    functions.remove(f);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accumulates_per_function_and_forgets() {
        let table = StatsTable::default();
        let ms = Duration::from_millis;
        table.record_ok("t", "f", ms(10), ms(2), ms(7));
        table.record_ok("t", "f", ms(20), ms(3), ms(15));
        table.record_error("t", "f", ms(1));
        table.record_ok("t", "g", ms(5), ms(1), ms(4));
        table.record_ok("u", "f", ms(5), ms(1), ms(4));
        let f = table.get("t", Some("f"));
        assert_eq!(f.len(), 1);
        let s = f[0].1;
        assert_eq!(s.success, Timed { count: 2, ns: 30_000_000 });
        assert_eq!(s.fail, Timed { count: 1, ns: 1_000_000 });
        assert_eq!(s.queue, Timed { count: 2, ns: 5_000_000 });
        assert_eq!(s.compute, Timed { count: 2, ns: 22_000_000 });
        assert!(s.last_inference_ms > 0);
        let names: Vec<_> = table.get("t", None).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["f", "g"]);
        table.forget("t", Some("f"));
        assert!(table.get("t", Some("f")).is_empty());
        table.forget("u", None);
        assert!(table.get("u", None).is_empty());
        assert_eq!(table.get("t", None).len(), 1);
    }

    #[test]
    fn recent_latency_is_bounded_and_per_function() {
        let table = StatsTable::default();
        for i in 1..=(RECENT as u64 + 100) {
            table.record_ok("t", "f", Duration::from_micros(i), Duration::ZERO, Duration::ZERO);
        }
        table.record_error("t", "g", Duration::from_millis(1));
        table.record_ok("u", "h", Duration::from_micros(7), Duration::ZERO, Duration::ZERO);
        table.record_chunks("u", "h", Duration::from_micros(30), None);
        table.record_chunks("u", "h", Duration::from_micros(50), Some(Duration::from_micros(4)));
        let all = table.recent_latency(None);
        let names: Vec<_> = all.iter().map(|l| (l.tenant.as_str(), l.function.as_str())).collect();
        assert_eq!(names, [("t", "f"), ("u", "h")]);
        assert!(all[0].time_to_first_token.is_none(), "f never streamed");
        let h = &all[1];
        assert_eq!(h.time_to_first_token.as_ref().map(|s| (s.count, s.max_us)), Some((2, 50.0)));
        assert_eq!(h.time_per_output_token.as_ref().map(|s| (s.count, s.p50_us)), Some((1, 4.0)));
        let f = &all[0].latency;
        assert_eq!(f.count, RECENT, "only the newest are kept");
        assert_eq!(f.max_us, (RECENT + 100) as f64);
        assert!(f.p50_us > 100.0 && f.p99_us > f.p50_us, "{f:?}");
        assert_eq!(table.recent_latency(Some("u")).len(), 1);
    }
}
