//! Per-function inference statistics, in the shape Triton's statistics extension reports
//! (`GET /v2/models/{name}/stats`): counts and cumulative times of successful and failed
//! invocations, and of the queue and compute phases of the successful ones.
//!
//! Kept beside the Prometheus histograms (whose sums the metrics library does not expose)
//! and updated at the same points, so the two always agree; dropped with the function.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::Serialize;

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

/// tenant → function → statistics.
#[derive(Debug, Default)]
pub(crate) struct StatsTable {
    stats: Mutex<HashMap<String, HashMap<String, FunctionStats>>>,
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl StatsTable {
    fn update(&self, tenant: &str, function: &str, f: impl FnOnce(&mut FunctionStats)) {
        let mut stats = self.stats.lock();
        let entry = stats.entry(tenant.to_owned()).or_default().entry(function.to_owned()).or_default();
        entry.last_inference_ms = now_ms();
        f(entry);
    }

    pub(crate) fn record_ok(&self, tenant: &str, function: &str, total: Duration, queue: Duration, compute: Duration) {
        self.update(tenant, function, |s| {
            s.success.add(total);
            s.queue.add(queue);
            s.compute.add(compute);
        });
    }

    pub(crate) fn record_error(&self, tenant: &str, function: &str, total: Duration) {
        self.update(tenant, function, |s| s.fail.add(total));
    }

    /// The statistics of `function` (all of `tenant`'s when `None`), by function name.
    pub(crate) fn get(&self, tenant: &str, function: Option<&str>) -> Vec<(String, FunctionStats)> {
        let stats = self.stats.lock();
        let Some(functions) = stats.get(tenant) else { return Vec::new() };
        let mut out: Vec<_> = functions
            .iter()
            .filter(|(name, _)| function.is_none_or(|f| f == name.as_str()))
            .map(|(name, s)| (name.clone(), *s))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
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
}
