//! A tensor's hold on device memory: the engine holds a [`TensorLease`] per tensor a
//! guest (or an artifact set) owns; creating it reserves the tensor's bytes in a
//! [`MemoryAccount`] and names the tensor, dropping it frees the tensor on the device
//! and returns the reservation.

use std::sync::Arc;

use sluice_host_api::{ApiError, TensorMeta};

use super::{DeviceQueue, MemoryAccount, TensorId};

/// Device memory reserved against an account for one tensor; dropping it frees the
/// tensor (once no queued kernel reads it) and returns the reservation.
pub struct TensorLease {
    id: TensorId,
    bytes: u64,
    account: Arc<MemoryAccount>,
    queue: DeviceQueue,
}

impl TensorLease {
    /// Reserves `meta`'s bytes in `account` and in the device's account for a new
    /// tensor on `queue`, or changes nothing and returns the quota error of the
    /// account that is full.
    pub fn reserve(queue: &DeviceQueue, account: &Arc<MemoryAccount>, meta: &TensorMeta) -> Result<Self, ApiError> {
        let bytes = meta.byte_len() as u64;
        account.reserve(bytes)?;
        if let Err(e) = queue.memory().reserve(bytes) {
            account.release(bytes);
            return Err(e);
        }
        Ok(TensorLease { id: queue.new_tensor_id(), bytes, account: account.clone(), queue: queue.clone() })
    }

    /// The tensor this lease holds.
    pub fn id(&self) -> TensorId {
        self.id
    }
}

impl Drop for TensorLease {
    fn drop(&mut self) {
        self.queue.free(self.id);
        self.account.release(self.bytes);
        self.queue.memory().release(self.bytes);
    }
}
