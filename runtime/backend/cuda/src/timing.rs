//! Per-kernel device time: a pair of CUDA events recorded around one op on its lane's
//! stream. The scheduler times the kernels that matter for accounting (the long ones)
//! this way, so fair share and the cost model see what the GPU spent on each, not an
//! estimate spread over a drain window. Creating and recording two events costs a few
//! microseconds of host time, which is why short kernels are not timed.

use std::time::Duration;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, DriverError};
use sluice_host_api::{Op, TensorMeta};

use crate::{CudaBuffer, CudaDevice, CudaError};

/// The device time of one op, known once the GPU ran it.
pub struct KernelTimer {
    start: CudaEvent,
    end: CudaEvent,
}

impl std::fmt::Debug for KernelTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelTimer").finish_non_exhaustive()
    }
}

fn driver(what: &str) -> impl FnOnce(DriverError) -> CudaError + '_ {
    move |e| CudaError::driver(what, e)
}

impl KernelTimer {
    /// The op's device time, or `None` while it has not finished. Never waits.
    pub fn elapsed(&self) -> Result<Option<Duration>, CudaError> {
        if !self.end.try_is_complete().map_err(driver("querying a timing event"))? {
            return Ok(None);
        }
        // Both events are complete: `elapsed_ms` returns at once.
        let ms = self.start.elapsed_ms(&self.end).map_err(driver("reading a kernel's device time"))?;
        Ok(Some(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3)))
    }
}

impl CudaDevice {
    /// [`CudaDevice::launch`] between two timing events on the current lane's stream.
    /// The time includes any wait the op's inputs impose on the lane (another lane's
    /// producer), which the scheduler makes rare.
    pub fn launch_timed(
        &self,
        op: &Op,
        inputs: &[(&CudaBuffer, &TensorMeta)],
        out: &TensorMeta,
    ) -> Result<(CudaBuffer, KernelTimer), CudaError> {
        let event = || {
            let lane = self.active();
            let e = lane.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(driver("creating an event"))?;
            e.record(lane.stream).map_err(driver("recording an event"))?;
            Ok::<_, CudaError>(e)
        };
        let start = event()?;
        let buffer = self.launch(op, inputs, out)?;
        let end = event()?;
        Ok((buffer, KernelTimer { start, end }))
    }
}
