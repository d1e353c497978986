//! What watching the server may cost: a tenant's rate of `GET /v1/status` calls and its
//! live feeds (`GET /v1/devices/{index}/live`) open at once, both limited by settings
//! the admin owns ([`WatchLimits`]), refused with 429 (`status_rate_limit`,
//! `live_feed_limit`) before any work is done, and counted for `/v1/status` and
//! `/metrics`. The admin's key is not limited (it is the operator's); what a status
//! costs the device's actor is bounded for every caller anyway by the shared snapshot
//! ([`crate::scheduler::DeviceQueue::shared_status`]).
//!
//! The status rate is a token bucket per tenant: [`WatchLimits::status_burst`] calls at
//! once, refilled at [`WatchLimits::status_per_second`]. Opening a live feed takes one
//! call from it too (the feed's first event is a status), so opening and dropping feeds
//! in a loop costs the server no more than calling `/v1/status` in a loop.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;
use serde::Serialize;

use sluice_registry::Principal;

use super::{Platform, PlatformError};

/// The admin's limits on watching, per tenant.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct WatchLimits {
    /// `GET /v1/status` calls a tenant may make per second, sustained.
    pub status_per_second: f64,
    /// Calls a tenant may make at once before the rate applies.
    pub status_burst: u32,
    /// Live feeds a tenant may have open at once.
    pub live_feeds_per_tenant: u32,
}

/// Default of [`WatchLimits::status_per_second`].
pub const DEFAULT_STATUS_PER_SECOND: f64 = 10.0;
/// Default of [`WatchLimits::status_burst`].
pub const DEFAULT_STATUS_BURST: u32 = 20;
/// Default of [`WatchLimits::live_feeds_per_tenant`]: a few console tabs.
pub const DEFAULT_LIVE_FEEDS_PER_TENANT: u32 = 4;

impl Default for WatchLimits {
    fn default() -> Self {
        WatchLimits {
            status_per_second: DEFAULT_STATUS_PER_SECOND,
            status_burst: DEFAULT_STATUS_BURST,
            live_feeds_per_tenant: DEFAULT_LIVE_FEEDS_PER_TENANT,
        }
    }
}

/// One tenant's bucket and feeds.
struct TenantWatch {
    tokens: f64,
    refilled: Instant,
    feeds: Arc<AtomicU32>,
}

/// The limits in force and what they counted.
pub(crate) struct Watching {
    limits: WatchLimits,
    tenants: Mutex<HashMap<String, TenantWatch>>,
    status_refused: AtomicU64,
    feeds_refused: AtomicU64,
}

/// An open live feed, counted against its tenant until dropped.
pub struct FeedPermit(Option<Arc<AtomicU32>>);

impl Drop for FeedPermit {
    fn drop(&mut self) {
        if let Some(open) = &self.0 {
            open.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// What watching counts, for `/v1/status` (a tenant sees its own row only, and no totals).
#[derive(Clone, Debug, Serialize)]
pub struct WatchStatus {
    pub limits: WatchLimits,
    /// Status calls refused (429 `status_rate_limit`) since start, every tenant's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_refused: Option<u64>,
    /// Live feeds refused (429 `live_feed_limit`) since start, every tenant's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live_feeds_refused: Option<u64>,
    /// Live feeds open now, per tenant that has one.
    pub live_feeds_open: Vec<TenantFeeds>,
}

/// One tenant's live feeds open now.
#[derive(Clone, Debug, Serialize)]
pub struct TenantFeeds {
    pub tenant: String,
    pub open: u32,
}

impl Watching {
    pub(crate) fn new(limits: WatchLimits) -> Self {
        Watching {
            limits,
            tenants: Mutex::new(HashMap::new()),
            status_refused: AtomicU64::new(0),
            feeds_refused: AtomicU64::new(0),
        }
    }

    fn with_tenant<T>(&self, tenant: &str, now: Instant, f: impl FnOnce(&mut TenantWatch) -> T) -> T {
        let mut tenants = self.tenants.lock();
        let burst = f64::from(self.limits.status_burst);
        let entry = tenants.entry(tenant.to_owned()).or_insert_with(|| TenantWatch {
            tokens: burst,
            refilled: now,
            feeds: Arc::default(),
        });
        f(entry)
    }

    /// Takes one status call from `tenant`'s bucket at `now`, or refuses it.
    pub(crate) fn admit_status(&self, tenant: &str, now: Instant) -> Result<(), PlatformError> {
        let WatchLimits { status_per_second, status_burst, .. } = self.limits;
        let admitted = self.with_tenant(tenant, now, |t| {
            let elapsed = now.saturating_duration_since(t.refilled).as_secs_f64();
            t.tokens = (t.tokens + elapsed * status_per_second).min(f64::from(status_burst));
            t.refilled = now;
            if t.tokens >= 1.0 {
                t.tokens -= 1.0;
                true
            } else {
                false
            }
        });
        if admitted {
            return Ok(());
        }
        self.status_refused.fetch_add(1, Ordering::Relaxed);
        Err(PlatformError::StatusRateLimit { per_second: status_per_second, burst: status_burst })
    }

    /// Counts a live feed of `tenant` open at `now`, or refuses it when the tenant has
    /// its limit of feeds open, or (as a status call: its first event is one) past the
    /// tenant's status rate. So a tenant that opens and drops feeds in a loop does no
    /// more work than one that calls `/v1/status` in a loop.
    pub(crate) fn open_feed(&self, tenant: &str, now: Instant) -> Result<FeedPermit, PlatformError> {
        let limit = self.limits.live_feeds_per_tenant;
        let feeds = self.with_tenant(tenant, now, |t| t.feeds.clone());
        let opened = feeds.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < limit).then_some(n + 1));
        if opened.is_err() {
            self.feeds_refused.fetch_add(1, Ordering::Relaxed);
            return Err(PlatformError::LiveFeedLimit { limit });
        }
        // Dropped on a refusal, which closes the feed counted above.
        let permit = FeedPermit(Some(feeds));
        self.admit_status(tenant, now)?;
        Ok(permit)
    }

    /// The admin's feed: counted nowhere.
    pub(crate) fn admin_feed() -> FeedPermit {
        FeedPermit(None)
    }

    /// The counts as `tenant` may see them (every tenant's and the totals for `None`).
    pub(crate) fn status(&self, tenant: Option<&str>) -> WatchStatus {
        let mut live_feeds_open: Vec<TenantFeeds> = self
            .tenants
            .lock()
            .iter()
            .filter(|(id, _)| tenant.is_none_or(|me| me == id.as_str()))
            .map(|(id, t)| TenantFeeds { tenant: id.clone(), open: t.feeds.load(Ordering::Acquire) })
            .filter(|f| f.open > 0)
            .collect();
        live_feeds_open.sort_by(|a, b| a.tenant.cmp(&b.tenant));
        let total = |c: &AtomicU64| tenant.is_none().then(|| c.load(Ordering::Relaxed));
        WatchStatus {
            limits: self.limits,
            status_refused: total(&self.status_refused),
            live_feeds_refused: total(&self.feeds_refused),
            live_feeds_open,
        }
    }
}

impl Platform {
    /// Admits one `GET /v1/status` call of `viewer` under its tenant's rate limit (the
    /// admin's always), or refuses it with [`PlatformError::StatusRateLimit`].
    pub fn admit_status_call(&self, viewer: &Principal) -> Result<(), PlatformError> {
        match viewer {
            Principal::Admin => Ok(()),
            Principal::Tenant(me) => self.watching.admit_status(me, Instant::now()),
        }
    }

    /// Counts a live feed of `viewer` open until the permit is dropped, or refuses it
    /// with [`PlatformError::StatusRateLimit`] past its tenant's status rate (opening a
    /// feed counts as a status call) or [`PlatformError::LiveFeedLimit`] when its
    /// tenant has its limit open (the admin's feeds are not limited).
    pub fn open_live_feed(&self, viewer: &Principal) -> Result<FeedPermit, PlatformError> {
        match viewer {
            Principal::Admin => Ok(Watching::admin_feed()),
            Principal::Tenant(me) => self.watching.open_feed(me, Instant::now()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn limits(status_per_second: f64, status_burst: u32, live_feeds_per_tenant: u32) -> WatchLimits {
        WatchLimits { status_per_second, status_burst, live_feeds_per_tenant }
    }

    #[test]
    fn the_status_bucket_refuses_past_the_burst_and_refills_at_the_rate() {
        let w = Watching::new(limits(2.0, 3, 1));
        let t0 = Instant::now();
        for _ in 0..3 {
            w.admit_status("a", t0).expect("within the burst");
        }
        assert!(matches!(w.admit_status("a", t0), Err(PlatformError::StatusRateLimit { burst: 3, .. })));
        w.admit_status("b", t0).expect("another tenant has its own bucket");
        w.admit_status("a", t0 + Duration::from_millis(500)).expect("one refilled after 1/rate");
        assert!(w.admit_status("a", t0 + Duration::from_millis(500)).is_err());
        assert_eq!(w.status(None).status_refused, Some(2));
        assert_eq!(w.status(Some("a")).status_refused, None, "a tenant sees no totals");
    }

    #[test]
    fn feeds_are_counted_per_tenant_until_dropped() {
        let w = Watching::new(limits(1.0, 10, 2));
        let t0 = Instant::now();
        let (a1, _a2) = (w.open_feed("a", t0).unwrap(), w.open_feed("a", t0).unwrap());
        assert!(matches!(w.open_feed("a", t0), Err(PlatformError::LiveFeedLimit { limit: 2 })));
        let _b = w.open_feed("b", t0).expect("another tenant may still open one");
        let open = |who: Option<&str>| w.status(who).live_feeds_open.iter().map(|f| f.open).sum::<u32>();
        assert_eq!((open(None), open(Some("a")), open(Some("b"))), (3, 2, 1));
        drop(a1);
        let _a3 = w.open_feed("a", t0).expect("a closed feed makes room");
        assert_eq!(w.status(None).live_feeds_refused, Some(1));
    }

    #[test]
    fn opening_a_feed_counts_as_a_status_call() {
        // A tenant opening and dropping feeds in a loop never has its limit open at once.
        let w = Watching::new(limits(2.0, 3, 4));
        let t0 = Instant::now();
        for _ in 0..3 {
            drop(w.open_feed("a", t0).expect("within the status burst"));
        }
        assert!(matches!(w.open_feed("a", t0), Err(PlatformError::StatusRateLimit { burst: 3, .. })));
        assert!(w.admit_status("a", t0).is_err(), "the feeds took the status calls' bucket");
        drop(w.open_feed("a", t0 + Duration::from_millis(500)).expect("refilled at the rate"));
        drop(w.open_feed("b", t0).expect("another tenant has its own bucket"));
        assert_eq!((w.status(None).status_refused, w.status(None).live_feeds_refused), (Some(2), Some(0)));
        assert!(w.status(None).live_feeds_open.is_empty(), "a feed refused for the rate is not counted open");
    }
}
