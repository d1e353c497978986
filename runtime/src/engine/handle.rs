//! The host representation of a guest tensor: a [`TensorHandle`] in the invocation's
//! resource table, holding the lease that frees the device memory when it is dropped.

use std::sync::Arc;

use sluice_host_api::TensorMeta;

use crate::scheduler::{TensorId, TensorLease};

/// A device tensor held by a guest: its id, metadata and the lease that frees it.
pub struct TensorHandle {
    pub(crate) id: TensorId,
    pub(crate) meta: TensorMeta,
    /// Made by `tensor.zeros`: its own memory, which `tensor.write-rows` may change
    /// (no other tensor may be written: a weight is shared, and an op's output, e.g. a
    /// reshape, may share its input's memory).
    pub(crate) writable: bool,
    _lease: Lease,
}

#[expect(dead_code, reason = "the leases are held only for their Drop")]
enum Lease {
    /// The tensor belongs to this handle alone.
    Owned(TensorLease),
    /// A shared read-only tensor (weights); freed with its last holder.
    Shared(Arc<TensorLease>),
}

impl TensorHandle {
    pub(crate) fn owned(lease: TensorLease, meta: TensorMeta) -> Self {
        TensorHandle { id: lease.id(), meta, writable: false, _lease: Lease::Owned(lease) }
    }

    pub(crate) fn shared(lease: Arc<TensorLease>, meta: TensorMeta) -> Self {
        TensorHandle { id: lease.id(), meta, writable: false, _lease: Lease::Shared(lease) }
    }
}
