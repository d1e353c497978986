//! The host representation of a guest tensor: a [`TensorHandle`] in the invocation's
//! resource table, holding the lease that frees the device memory when it is dropped.
//!
//! Several handles may hold one tensor: every holder of a shared artifact weight, and a
//! reshape and its input ([`TensorHandle::view`]: a new shape over the same device
//! tensor, made without a kernel). The tensor is freed with its last holder.

use std::sync::Arc;

use sluice_host_api::TensorMeta;

use crate::scheduler::{TensorId, TensorLease};

/// A device tensor held by a guest: its id, metadata and the lease that frees it.
pub struct TensorHandle {
    pub(crate) id: TensorId,
    pub(crate) meta: TensorMeta,
    /// Made by `tensor.zeros`: its own memory, which `tensor.write-rows` and
    /// `ops.kv-attention` (as a cache) may change
    /// (no other tensor may be written: a weight is shared, and a reshape is a view of
    /// its input's memory).
    pub(crate) writable: bool,
    lease: Arc<TensorLease>,
}

impl TensorHandle {
    pub(crate) fn owned(lease: TensorLease, meta: TensorMeta) -> Self {
        Self::shared(Arc::new(lease), meta)
    }

    pub(crate) fn shared(lease: Arc<TensorLease>, meta: TensorMeta) -> Self {
        TensorHandle { id: lease.id(), meta, writable: false, lease }
    }

    /// The same device tensor as `meta` (a reshape: the same dtype and element count),
    /// never writable: it shows the writes into this tensor that ran before it is read.
    pub(crate) fn view(&self, meta: TensorMeta) -> Self {
        debug_assert!(meta.dtype == self.meta.dtype && meta.byte_len() == self.meta.byte_len());
        Self::shared(Arc::clone(&self.lease), meta)
    }
}
