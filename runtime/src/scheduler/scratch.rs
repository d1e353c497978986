//! Scratch memory of an op (issue 11, defect 5): what a kernel takes besides its output
//! (attention scores, a broadcast copy, an im2col buffer), reserved with the output.
//!
//! The device says how much from the shapes alone ([`Device::scratch_model`], kept by
//! the [`DeviceQueue`]); the engine reserves it in the invocation's account (and so the
//! tenant's) and in the device's account when the op is launched, so an op whose output
//! and scratch pass the quota fails at once with `quota_exceeded`. The
//! [`ScratchCharge`] travels with the queued op and returns the reservation when the
//! op has run (or was cancelled).
//!
//! [`Device::scratch_model`]: crate::device::Device::scratch_model

use std::sync::Arc;

use sluice_host_api::{ApiError, Op, TensorMeta};

use super::{DeviceQueue, MemoryAccount};

/// Scratch memory reserved for one queued op; returned when dropped.
pub struct ScratchCharge {
    bytes: u64,
    account: Arc<MemoryAccount>,
    device: Arc<MemoryAccount>,
}

impl ScratchCharge {
    /// Reserves the scratch `op` on `inputs` producing `out` takes on `queue`'s device
    /// in `account` and in the device's account; `None` for an op that takes none, a
    /// quota error (changing nothing) for one that does not fit.
    pub fn reserve(
        queue: &DeviceQueue,
        account: &Arc<MemoryAccount>,
        op: &Op,
        inputs: &[&TensorMeta],
        out: &TensorMeta,
    ) -> Result<Option<ScratchCharge>, ApiError> {
        let bytes = queue.scratch_bytes(op, inputs, out);
        if bytes == 0 {
            return Ok(None);
        }
        let refused = |e: ApiError| {
            let name = op.name();
            ApiError::new(e.code, format!("{} (the scratch memory {name} takes while it runs)", e.message))
        };
        account.reserve(bytes).map_err(refused)?;
        if let Err(e) = queue.memory().reserve(bytes) {
            account.release(bytes);
            return Err(refused(e));
        }
        Ok(Some(ScratchCharge { bytes, account: account.clone(), device: queue.memory().clone() }))
    }

    /// Bytes reserved.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for ScratchCharge {
    fn drop(&mut self) {
        self.account.release(self.bytes);
        self.device.release(self.bytes);
    }
}
