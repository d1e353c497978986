//! A tenant's placed weights: the artifact bytes of its loaded versions, which each
//! version reserves on a device when it is placed, bounded by the tenant's device-memory
//! quota.
//!
//! Placing a version reserves its artifacts' bytes on a device (`DevicePool::place`) so
//! that the device is not promised twice; without a bound per tenant, one tenant's
//! artifacts could take the room of every other's. A [`WeightLedger`] per tenant counts
//! what its placed versions hold; a version is charged here *before* it is placed, and a
//! charge that would take the tenant past its quota is refused ([`OverQuota`]): 413 when
//! the version alone is larger than the quota (it can never be placed), 429 when the
//! tenant's other placed versions hold the room. A new serving version may be charged
//! while the one it replaces is still placed (it goes when its last invocation ends), so
//! the replaced version's bytes do not count against its successor.

use std::sync::Arc;

use parking_lot::Mutex;

/// The weight bytes placed by one tenant's loaded versions, against its quota.
pub(crate) struct WeightLedger {
    quota: Option<u64>,
    placed: Mutex<u64>,
}

/// A version's charge; dropping it gives the bytes back.
pub(crate) struct WeightCharge {
    ledger: Arc<WeightLedger>,
    bytes: u64,
}

/// A refused charge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverQuota {
    /// The version's weight bytes.
    pub needed: u64,
    /// The tenant's device-memory quota.
    pub quota: u64,
    /// Bytes its other placed versions hold (less the version being replaced).
    pub placed: u64,
}

impl OverQuota {
    /// Whether the version alone is larger than the quota (it never fits).
    pub fn never_fits(&self) -> bool {
        self.needed > self.quota
    }
}

impl std::fmt::Display for OverQuota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let OverQuota { needed, quota, placed } = self;
        if self.never_fits() {
            write!(
                f,
                "the version's artifacts total {needed} bytes, more than the tenant's device-memory quota of {quota} bytes"
            )
        } else {
            write!(
                f,
                "the version's artifacts ({needed} bytes) do not fit in the tenant's device-memory quota of {quota} bytes: \
                 its other loaded versions hold {placed} bytes of weights"
            )
        }
    }
}

impl WeightLedger {
    /// A ledger bounded by `quota` (`None`: unbounded here; the device still is).
    pub(crate) fn new(quota: Option<u64>) -> Arc<Self> {
        Arc::new(WeightLedger { quota, placed: Mutex::new(0) })
    }

    /// Bytes placed now.
    pub(crate) fn placed(&self) -> u64 {
        *self.placed.lock()
    }

    /// Bytes a version may place now, `replacing` one that holds `replacing` bytes here
    /// (`None`: no quota).
    pub(crate) fn room(&self, replacing: u64) -> Option<u64> {
        let others = self.placed().saturating_sub(replacing);
        self.quota.map(|q| q.saturating_sub(others))
    }

    /// Charges `bytes`, replacing a version that holds `replacing` bytes here, or
    /// changes nothing and says why.
    pub(crate) fn charge(self: &Arc<Self>, bytes: u64, replacing: u64) -> Result<WeightCharge, OverQuota> {
        let mut placed = self.placed.lock();
        let others = placed.saturating_sub(replacing);
        if let Some(quota) = self.quota
            && others.saturating_add(bytes) > quota
        {
            return Err(OverQuota { needed: bytes, quota, placed: others });
        }
        *placed += bytes;
        Ok(WeightCharge { ledger: self.clone(), bytes })
    }
}

impl WeightCharge {
    /// Its bytes, if charged to `ledger` (0 if to another: a ledger the tenant's policy
    /// replaced).
    pub(crate) fn bytes_in(&self, ledger: &Arc<WeightLedger>) -> u64 {
        if Arc::ptr_eq(&self.ledger, ledger) { self.bytes } else { 0 }
    }
}

impl Drop for WeightCharge {
    fn drop(&mut self) {
        *self.ledger.placed.lock() -= self.bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_stay_within_the_quota_and_come_back() {
        let ledger = WeightLedger::new(Some(100));
        let a = ledger.charge(60, 0).expect("room");
        let refused = ledger.charge(50, 0).err().expect("over the quota");
        assert_eq!(refused, OverQuota { needed: 50, quota: 100, placed: 60 });
        assert!(!refused.never_fits());
        assert_eq!(ledger.placed(), 60, "a refusal changes nothing");
        assert!(ledger.charge(101, 0).err().expect("never fits").never_fits());
        // A successor of `a` may be charged while `a` is still placed.
        let b = ledger.charge(90, a.bytes_in(&ledger)).expect("replacing a");
        assert_eq!((ledger.placed(), ledger.room(b.bytes_in(&ledger))), (150, Some(40)));
        drop(a);
        assert_eq!((ledger.placed(), ledger.room(0)), (90, Some(10)));
        drop(b);
        assert_eq!(ledger.placed(), 0);
        let other = WeightLedger::new(None);
        assert_eq!(ledger.charge(10, 0).unwrap().bytes_in(&other), 0);
        assert!(other.charge(u64::MAX / 2, 0).is_ok(), "no quota");
    }
}
