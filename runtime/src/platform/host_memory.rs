//! Host memory a tenant's requests hold while the server decodes them and encodes their
//! responses, and what its streamed invocations leave queued for slow clients.
//!
//! Each tenant has a budget ([`HostMemoryLimits::tenant_budget_bytes`]): a request's
//! body and its decoded inputs are reserved before they are decoded (the JSON reader
//! says what decoding will take before it allocates: `oip::json_request`), a
//! response's encoding before it is encoded (from the output tensors' sizes), and held
//! until the request is answered or the response sent ([`HostReservation`]). What does
//! not fit is refused before anything is spent: `decoded_too_large` (413) when it alone
//! needs more than the whole budget, `host_memory_budget` (429) when the tenant's other
//! requests hold the rest.
//!
//! A streamed invocation's queue towards its client is bounded in bytes
//! ([`HostMemoryLimits::stream_buffer_bytes`], `engine::StreamRoom`): the guest's emit
//! waits while it is full, and an invocation whose client has read nothing for
//! [`HostMemoryLimits::stream_stall`] is cancelled. Its bytes are counted against its
//! tenant here ([`HostMemory::stream_queued`]), and reported with the rest in
//! `/v1/status` and `/metrics`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;
use sluice_host_api::Code;

use super::Platform;
use crate::engine::{StreamCounters, StreamRoom};

/// The admin's bounds on host memory for requests and streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct HostMemoryLimits {
    /// Host memory one tenant's requests may hold at once for their bodies, decoded
    /// inputs and encoded responses.
    pub tenant_budget_bytes: u64,
    /// Bytes one streamed invocation may have queued towards its client (chunks and
    /// its final response not yet taken by the connection).
    pub stream_buffer_bytes: u64,
    /// How long a streamed invocation may wait for a client that reads nothing before
    /// it is cancelled.
    #[serde(serialize_with = "millis")]
    pub stream_stall: Duration,
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_millis() as u64)
}

/// Default of [`HostMemoryLimits::tenant_budget_bytes`]: room for the largest JSON
/// request the default body limit (16 MiB) admits, decoded, many times over, and a
/// bound of 256 MiB on what one tenant's requests can make the host hold.
pub const DEFAULT_TENANT_HOST_MEMORY_BYTES: u64 = 256 << 20;
/// Default of [`HostMemoryLimits::stream_buffer_bytes`].
pub const DEFAULT_STREAM_BUFFER_BYTES: u64 = 4 << 20;
/// Default of [`HostMemoryLimits::stream_stall`].
pub const DEFAULT_STREAM_STALL: Duration = Duration::from_secs(30);

impl Default for HostMemoryLimits {
    fn default() -> Self {
        HostMemoryLimits {
            tenant_budget_bytes: DEFAULT_TENANT_HOST_MEMORY_BYTES,
            stream_buffer_bytes: DEFAULT_STREAM_BUFFER_BYTES,
            stream_stall: DEFAULT_STREAM_STALL,
        }
    }
}

/// A request refused for the host memory it needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostMemoryRefusal {
    pub tenant: String,
    /// What it needs.
    pub needed: u64,
    /// What the tenant's other requests hold.
    pub in_use: u64,
    pub budget: u64,
    /// What needed it: "decoding the request", "encoding the response", …
    pub what: &'static str,
}

impl std::fmt::Display for HostMemoryRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for HostMemoryRefusal {}

impl HostMemoryRefusal {
    /// `decoded_too_large` when it never fits, `host_memory_budget` when it may later.
    pub fn code(&self) -> Code {
        if self.needed > self.budget { Code::DecodedTooLarge } else { Code::HostMemoryBudget }
    }

    fn message(&self) -> String {
        let HostMemoryRefusal { tenant, needed, in_use, budget, what } = self;
        if needed > budget {
            format!(
                "{what} needs {needed} bytes of host memory, more than tenant {tenant:?}'s budget of {budget} \
                 (send the tensors as binary data, or fewer at once)"
            )
        } else {
            format!(
                "{what} needs {needed} bytes of host memory; tenant {tenant:?}'s other requests hold {in_use} \
                 of its budget of {budget}; retry later"
            )
        }
    }
}

/// One tenant's host memory for requests and streams.
#[derive(Debug, Default)]
pub struct HostMemory {
    used: AtomicU64,
    peak: AtomicU64,
    refused: AtomicU64,
    stream_queued: Arc<AtomicU64>,
}

impl HostMemory {
    /// Bytes held now by the tenant's requests (bodies, decoded inputs, encoded responses).
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    /// Bytes its streamed invocations have queued now towards their clients.
    pub fn stream_queued(&self) -> u64 {
        self.stream_queued.load(Ordering::Acquire)
    }
}

/// Bytes reserved in a tenant's budget until dropped.
#[must_use = "the bytes are held while it lives"]
#[derive(Debug)]
pub struct HostReservation {
    bytes: u64,
    account: Arc<HostMemory>,
}

impl HostReservation {
    /// The bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Holds `bytes` instead (less after encoding measured what it took).
    pub fn shrink_to(&mut self, bytes: u64) {
        if bytes < self.bytes {
            self.account.used.fetch_sub(self.bytes - bytes, Ordering::AcqRel);
            self.bytes = bytes;
        }
    }
}

impl Drop for HostReservation {
    fn drop(&mut self) {
        self.account.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// Every tenant's host memory, under the limits in force.
pub(crate) struct HostBudgets {
    limits: HostMemoryLimits,
    tenants: Mutex<HashMap<String, Arc<HostMemory>>>,
    /// The most bytes any one streamed invocation had queued at once.
    stream_peak: Arc<AtomicU64>,
    /// Streamed invocations cancelled because their client read nothing for too long.
    stream_stalls: Arc<AtomicU64>,
}

/// What `/v1/status` reports of host memory.
#[derive(Clone, Debug, Serialize)]
pub struct HostMemoryStatus {
    pub limits: HostMemoryLimits,
    /// The most bytes one streamed invocation had queued at once (server-wide; absent
    /// in a tenant's view).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_queue_peak_bytes: Option<u64>,
    /// Streamed invocations cancelled for a client that stopped reading (server-wide;
    /// absent in a tenant's view).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_stalls: Option<u64>,
    pub tenants: Vec<TenantHostMemory>,
}

/// One tenant's host memory.
#[derive(Clone, Debug, Serialize)]
pub struct TenantHostMemory {
    pub tenant: String,
    /// Held now by its requests.
    pub used_bytes: u64,
    /// The most its requests held at once.
    pub peak_bytes: u64,
    /// Requests refused for host memory (413 `decoded_too_large`, 429 `host_memory_budget`).
    pub refused: u64,
    /// Queued now by its streamed invocations towards their clients.
    pub stream_queued_bytes: u64,
}

impl HostBudgets {
    pub(crate) fn new(limits: HostMemoryLimits) -> Self {
        HostBudgets {
            limits,
            tenants: Mutex::new(HashMap::new()),
            stream_peak: Arc::default(),
            stream_stalls: Arc::default(),
        }
    }

    pub(crate) fn limits(&self) -> HostMemoryLimits {
        self.limits
    }

    /// `tenant`'s account.
    pub(crate) fn tenant(&self, tenant: &str) -> Arc<HostMemory> {
        self.tenants.lock().entry(tenant.to_owned()).or_default().clone()
    }

    /// A room for one streamed invocation of `tenant`, counted in its account.
    pub(crate) fn stream_room(&self, tenant: &str) -> Arc<StreamRoom> {
        let counters = StreamCounters {
            tenant_queued: self.tenant(tenant).stream_queued.clone(),
            peak: self.stream_peak.clone(),
            stalls: self.stream_stalls.clone(),
        };
        StreamRoom::new(self.limits.stream_buffer_bytes, self.limits.stream_stall, counters)
    }

    /// Reserves `bytes` for `what` in `tenant`'s budget, or refuses and changes nothing
    /// (but the refusal count).
    pub(crate) fn reserve(
        &self,
        tenant: &str,
        bytes: u64,
        what: &'static str,
    ) -> Result<HostReservation, HostMemoryRefusal> {
        let account = self.tenant(tenant);
        let budget = self.limits.tenant_budget_bytes;
        let reserved = account.used.fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
            used.checked_add(bytes).filter(|&next| next <= budget)
        });
        match reserved {
            Ok(before) => {
                account.peak.fetch_max(before + bytes, Ordering::AcqRel);
                Ok(HostReservation { bytes, account })
            }
            Err(in_use) => {
                account.refused.fetch_add(1, Ordering::Relaxed);
                Err(HostMemoryRefusal { tenant: tenant.to_owned(), needed: bytes, in_use, budget, what })
            }
        }
    }

    /// The counts as `tenant` may see them (every tenant's and the totals for `None`).
    pub(crate) fn status(&self, tenant: Option<&str>) -> HostMemoryStatus {
        let mut tenants: Vec<TenantHostMemory> = self
            .tenants
            .lock()
            .iter()
            .filter(|(id, _)| tenant.is_none_or(|me| me == id.as_str()))
            .map(|(id, a)| TenantHostMemory {
                tenant: id.clone(),
                used_bytes: a.used(),
                peak_bytes: a.peak.load(Ordering::Acquire),
                refused: a.refused.load(Ordering::Relaxed),
                stream_queued_bytes: a.stream_queued(),
            })
            .collect();
        tenants.sort_by(|a, b| a.tenant.cmp(&b.tenant));
        let total = |c: &AtomicU64| tenant.is_none().then(|| c.load(Ordering::Acquire));
        HostMemoryStatus {
            limits: self.limits,
            stream_queue_peak_bytes: total(&self.stream_peak),
            stream_stalls: total(&self.stream_stalls),
            tenants,
        }
    }
}

impl Platform {
    /// Reserves `bytes` of `tenant`'s host-memory budget for `what` ("decoding the
    /// request", …) until the reservation is dropped, or refuses with
    /// [`HostMemoryRefusal`] (`PlatformError::HostMemory`) and holds nothing.
    pub fn reserve_host_memory(
        &self,
        tenant: &str,
        bytes: u64,
        what: &'static str,
    ) -> Result<HostReservation, HostMemoryRefusal> {
        self.host_memory.reserve(tenant, bytes, what)
    }

    /// The room of a streamed invocation of `tenant` towards its client.
    pub fn stream_room(&self, tenant: &str) -> Arc<StreamRoom> {
        self.host_memory.stream_room(tenant)
    }

    /// The host-memory limits in force.
    pub fn host_memory_limits(&self) -> HostMemoryLimits {
        self.host_memory.limits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_are_refused_before_the_budget_is_passed_and_given_back_when_dropped() {
        let budgets = HostBudgets::new(HostMemoryLimits { tenant_budget_bytes: 100, ..Default::default() });
        let held = budgets.reserve("a", 60, "decoding the request").unwrap();
        let busy = budgets.reserve("a", 50, "decoding the request").unwrap_err();
        assert_eq!((busy.code(), busy.in_use), (Code::HostMemoryBudget, 60));
        let never = budgets.reserve("a", 101, "decoding the request").unwrap_err();
        assert_eq!(never.code(), Code::DecodedTooLarge);
        assert!(never.to_string().contains("more than tenant \"a\"'s budget of 100"), "{never}");
        let _other = budgets.reserve("b", 100, "decoding the request").expect("another tenant's own budget");
        let mut shrunk = held;
        shrunk.shrink_to(10);
        let _more = budgets.reserve("a", 90, "encoding the response").expect("room after the shrink");
        drop(shrunk);
        let a = &budgets.status(Some("a")).tenants[0];
        assert_eq!((a.used_bytes, a.peak_bytes, a.refused), (90, 100, 2));
        assert!(budgets.status(Some("a")).stream_stalls.is_none(), "a tenant sees no totals");
    }
}
