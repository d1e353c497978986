//! Admission control: concurrency limits that refuse at once instead of queueing.
//!
//! Each tenant has a [`ConcurrencyLimit`] and so has the server. [`admit`] takes a permit
//! from the tenant's limit and then from the server's with `try_acquire`, so a full
//! server answers "retry later" (429, [`PlatformError::Overloaded`]) at once rather than
//! building an unbounded queue. The permits are held by the returned [`Admitted`] for as
//! long as the invocation runs.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{LimitScope, PlatformError};

/// At most `limit` invocations in flight at once, for a tenant or for the whole server.
pub(crate) struct ConcurrencyLimit {
    permits: Arc<Semaphore>,
    limit: u32,
    scope: LimitScope,
}

impl ConcurrencyLimit {
    pub(crate) fn new(scope: LimitScope, limit: u32) -> Self {
        ConcurrencyLimit { permits: Arc::new(Semaphore::new(limit as usize)), limit, scope }
    }

    /// Its size.
    pub(crate) fn limit(&self) -> u32 {
        self.limit
    }

    /// Permits held now.
    pub(crate) fn in_use(&self) -> u32 {
        self.limit.saturating_sub(self.permits.available_permits() as u32)
    }

    /// A permit now, or [`PlatformError::Overloaded`] naming this limit.
    fn try_acquire(&self) -> Result<OwnedSemaphorePermit, PlatformError> {
        self.permits
            .clone()
            .try_acquire_owned()
            .map_err(|_| PlatformError::Overloaded { scope: self.scope, limit: self.limit })
    }
}

/// An admitted invocation's permits; dropping it gives them back.
pub(crate) struct Admitted {
    _tenant: OwnedSemaphorePermit,
    _global: OwnedSemaphorePermit,
}

/// Admits one invocation under the tenant's limit and then the server's, or refuses at once.
pub(crate) fn admit(tenant: &ConcurrencyLimit, global: &ConcurrencyLimit) -> Result<Admitted, PlatformError> {
    let tenant = tenant.try_acquire()?;
    let global = global.try_acquire()?;
    Ok(Admitted { _tenant: tenant, _global: global })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused_scope(r: Result<Admitted, PlatformError>) -> Option<(LimitScope, u32)> {
        match r {
            Err(PlatformError::Overloaded { scope, limit }) => Some((scope, limit)),
            _ => None,
        }
    }

    #[test]
    fn the_tenant_limit_refuses_first_and_permits_come_back() {
        let (tenant, global) =
            (ConcurrencyLimit::new(LimitScope::Tenant, 1), ConcurrencyLimit::new(LimitScope::Global, 5));
        let first = admit(&tenant, &global).expect("room");
        assert_eq!(refused_scope(admit(&tenant, &global)), Some((LimitScope::Tenant, 1)));
        drop(first);
        assert!(admit(&tenant, &global).is_ok(), "the permit came back");
    }

    #[test]
    fn the_server_limit_refuses_other_tenants_and_a_refusal_holds_nothing() {
        let global = ConcurrencyLimit::new(LimitScope::Global, 1);
        let (a, b) = (ConcurrencyLimit::new(LimitScope::Tenant, 2), ConcurrencyLimit::new(LimitScope::Tenant, 2));
        let held = admit(&a, &global).expect("room");
        assert_eq!(refused_scope(admit(&b, &global)), Some((LimitScope::Global, 1)));
        drop(held);
        // b's tenant permit taken by the refused attempt was given back.
        let _x = admit(&b, &global).expect("room again");
        assert_eq!(b.permits.available_permits(), 1);
    }
}
