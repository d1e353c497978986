//! Revocation for what stays open after its key was checked: gRPC streams and live feeds.
//!
//! A request is authenticated once, when it arrives; a stream or a feed goes on for as
//! long as its client keeps it open. The platform counts revocations (a key revoked, a
//! tenant deleted) in one generation number. A [`KeyCheck`] remembers the generation at
//! which its key was last found valid; [`Platform::still_valid`] compares it with the
//! current one (an atomic load) and looks the key up again only when a revocation
//! happened since, so a stream can check before every message or event for free.

use std::sync::atomic::Ordering;

use sluice_registry::Principal;

use super::{Platform, Result};

/// A key checked once, to be checked again while its stream stays open.
pub struct KeyCheck {
    key: String,
    principal: Principal,
    seen: u64,
}

impl KeyCheck {
    /// Who the key authenticated as.
    pub fn principal(&self) -> &Principal {
        &self.principal
    }
}

impl Platform {
    /// Who `key` authenticates as, with a [`KeyCheck`] for a stream it opens (`None`:
    /// unknown or revoked).
    pub fn authenticate_stream(&self, key: &str) -> Result<Option<KeyCheck>> {
        // Read before the look-up: a revocation between the two is then seen as one.
        let seen = self.revocations.load(Ordering::Acquire);
        Ok(self.authenticate(key)?.map(|principal| KeyCheck { key: key.to_owned(), principal, seen }))
    }

    /// Whether `check`'s key is still valid for the same principal; looks it up only
    /// when a key was revoked or a tenant deleted since it was last found valid.
    pub fn still_valid(&self, check: &mut KeyCheck) -> bool {
        let now = self.revocations.load(Ordering::Acquire);
        if now == check.seen {
            return true;
        }
        match self.authenticate(&check.key) {
            Ok(Some(p)) if p == check.principal => {
                check.seen = now;
                true
            }
            Ok(_) => false,
            Err(e) => {
                // Fail closed: the stream ends; its client can reconnect.
                tracing::warn!(error = %e, "could not check a stream's key again");
                false
            }
        }
    }

    /// Counts a revocation and forgets the keys checked so far; call after the
    /// registry changed.
    pub(crate) fn revoked(&self) {
        self.keys.clear();
        self.revocations.fetch_add(1, Ordering::AcqRel);
    }
}
