//! Device-memory accounting: quotas checked on the host before anything is queued.
//!
//! Every tensor a guest creates reserves its byte size in its invocation's account,
//! which charges the tenant's account in turn; dropping the tensor releases both.
//! Because the reservation happens at launch, a quota error is synchronous and
//! typed, and the device never sees the allocation.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sluice_host_api::{ApiError, ErrorCode};

/// Bytes in use against an optional limit, optionally charged to a parent account.
#[derive(Debug)]
pub struct MemoryAccount {
    name: String,
    used: AtomicU64,
    peak: AtomicU64,
    limit: Option<u64>,
    parent: Option<Arc<MemoryAccount>>,
}

impl MemoryAccount {
    /// A new account named `name` (used in quota messages).
    pub fn new(name: impl Into<String>, limit: Option<u64>, parent: Option<Arc<MemoryAccount>>) -> Arc<Self> {
        Arc::new(MemoryAccount { name: name.into(), used: AtomicU64::new(0), peak: AtomicU64::new(0), limit, parent })
    }

    /// Reserves `bytes` here and in every parent, or changes nothing and returns a
    /// quota error naming the account that is full.
    pub fn reserve(&self, bytes: u64) -> Result<(), ApiError> {
        let mut current = self.used.load(Ordering::Relaxed);
        loop {
            let next = current.saturating_add(bytes);
            if let Some(limit) = self.limit
                && next > limit
            {
                return Err(ApiError::new(
                    ErrorCode::QuotaExceeded,
                    format!(
                        "{}: device-memory quota of {limit} bytes exceeded ({current} in use, {bytes} requested)",
                        self.name
                    ),
                ));
            }
            match self.used.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => break,
                Err(actual) => current = actual,
            }
        }
        if let Some(parent) = &self.parent
            && let Err(e) = parent.reserve(bytes)
        {
            self.used.fetch_sub(bytes, Ordering::AcqRel);
            return Err(e);
        }
        self.peak.fetch_max(current + bytes, Ordering::Relaxed);
        Ok(())
    }

    /// Returns `bytes` reserved earlier.
    pub fn release(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
        if let Some(parent) = &self.parent {
            parent.release(bytes);
        }
    }

    /// Bytes in use now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Most bytes ever in use at once.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    /// The limit, if any.
    pub fn limit(&self) -> Option<u64> {
        self.limit
    }
}

/// Bytes held in an account and in the device's for as long as it lives: a
/// kernel's scratch and temporaries, charged to the invocation that launches it from
/// the launch until the kernel has run (the actor drops it with the work item).
#[derive(Debug)]
pub struct Reservation {
    bytes: u64,
    account: Arc<MemoryAccount>,
    device: Arc<MemoryAccount>,
}

impl Reservation {
    /// Reserves `bytes` in `account` and in `device`, or changes nothing and returns
    /// the quota error of the account that is full.
    pub fn new(account: &Arc<MemoryAccount>, device: &Arc<MemoryAccount>, bytes: u64) -> Result<Self, ApiError> {
        account.reserve(bytes)?;
        if let Err(e) = device.reserve(bytes) {
            account.release(bytes);
            return Err(e);
        }
        Ok(Reservation { bytes, account: account.clone(), device: device.clone() })
    }

    /// The bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.account.release(self.bytes);
        self.device.release(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_charges_parent_and_failure_changes_nothing() {
        let tenant = MemoryAccount::new("tenant a", Some(100), None);
        let inv = MemoryAccount::new("invocation 1", Some(80), Some(tenant.clone()));
        let other = MemoryAccount::new("invocation 2", None, Some(tenant.clone()));
        inv.reserve(60).unwrap();
        assert_eq!(tenant.used(), 60);
        let err = other.reserve(50).unwrap_err();
        assert_eq!(err.code, ErrorCode::QuotaExceeded);
        assert!(err.message.contains("tenant a"), "{}", err.message);
        assert_eq!((tenant.used(), other.used()), (60, 0));
        assert!(inv.reserve(30).is_err());
        inv.release(60);
        assert_eq!((tenant.used(), inv.used(), inv.peak()), (0, 0, 60));
    }

    #[test]
    fn a_reservation_holds_both_accounts_until_dropped() {
        let device = MemoryAccount::new("device", Some(100), None);
        let inv = MemoryAccount::new("invocation", Some(80), None);
        let r = Reservation::new(&inv, &device, 70).unwrap();
        assert_eq!((inv.used(), device.used(), r.bytes()), (70, 70, 70));
        let other = MemoryAccount::new("other", None, None);
        assert!(Reservation::new(&other, &device, 40).is_err(), "the device is full");
        assert_eq!(other.used(), 0, "a refusal changes nothing");
        drop(r);
        assert_eq!((inv.used(), device.used()), (0, 0));
    }
}
