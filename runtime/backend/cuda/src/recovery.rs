//! A lost device and its recovery (issue 11, defect 8).
//!
//! A sticky CUDA error (an illegal address, a failed launch) poisons the context: every
//! later call in the process on that device fails with it, for every tenant, and every
//! buffer on it is gone. The backend reports it as [`CudaError::Lost`]: driver calls that
//! return a sticky code map to it directly, and [`CudaDevice::classify`] turns the vaguer
//! errors cuBLAS or NVRTC report on a poisoned context into it, after asking the device
//! ([`CudaDevice::lost`], which never waits: `cuStreamQuery` returns the sticky error).
//!
//! [`CudaDevice::recover`] resets the device's primary context (`cuDevicePrimaryCtxReset`)
//! and opens the device again with the same options (partition included). The old
//! device's pool is marked lost first: the driver may give the values of the dead
//! handles (memory, events, streams, modules, cuBLAS handles) to the new context, so
//! nothing of the old device, nor of a buffer of it still held anywhere, is handed back
//! to the driver; those handles are leaked instead (a few kilobytes per reset). What was
//! resident must be uploaded again by whoever holds its bytes: the new device refuses a
//! buffer of the old one ("lives on another device").

use cudarc::driver::{DriverError, result};

use crate::error::is_sticky;
use crate::{CudaDevice, CudaError};

impl CudaDevice {
    /// The error the device is poisoned with, if it is lost; never waits.
    pub fn lost(&self) -> Option<CudaError> {
        if self.pool.is_lost() {
            return Some(CudaError::Lost("the device was reset after a sticky error".into()));
        }
        for slot in self.pool.lanes.slots() {
            if let Err(e) = slot.bind() {
                if e.is_lost() {
                    return Some(e);
                }
                continue;
            }
            // SAFETY: a live stream of a context bound above.
            let r = unsafe { cudarc::driver::sys::cuStreamQuery(slot.stream.cu_stream()) };
            if is_sticky(r) {
                return Some(CudaError::driver("querying the device", DriverError(r)));
            }
        }
        None
    }

    /// `e`, or [`CudaError::Lost`] with `e`'s message if the device is lost.
    pub fn classify(&self, e: CudaError) -> CudaError {
        match e {
            CudaError::Failure(m) => match self.lost() {
                Some(lost) => CudaError::Lost(format!("{m} ({lost})")),
                None => CudaError::Failure(m),
            },
            other => other,
        }
    }

    /// Resets the lost device and opens it again with the same options; this device
    /// stays lost (drop it, and its buffers, whenever convenient).
    pub fn recover(&self) -> Result<CudaDevice, CudaError> {
        self.pool.mark_lost();
        let ordinal = self.opts.ordinal;
        let dev = result::device::get(ordinal as i32).map_err(|e| CudaError::driver("finding the device", e))?;
        // SAFETY: the device handle was just returned by the driver; nothing of the old
        // context is used again (its pool is marked lost above).
        unsafe { cudarc::driver::sys::cuDevicePrimaryCtxReset_v2(dev) }
            .result()
            .map_err(|e| CudaError::driver("resetting the device", e))?;
        tracing::warn!(ordinal, "cuda device reset after a sticky error; opening it again");
        CudaDevice::open(self.opts.clone())
            .map_err(|e| CudaError::Lost(format!("opening the device again after a reset: {e}")))
    }
}
