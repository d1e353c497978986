//! The CUDA device: `sluice-backend-cuda` (cudarc, loaded at run time) behind [`Device`].
//!
//! Built into every binary; where no driver is installed, [`CudaDevice::open`]
//! fails with a reason ("no CUDA driver found ...") and the CPU serves instead.
//! Supported drivers: the bindings target the CUDA 13.0 driver API (cudarc's
//! `cuda-13000`), so the driver must support CUDA 13.0 (R580 or newer).

use std::ops::Range;

use sluice_backend_cuda::{CudaBuffer, CudaError, CudaOptions};
use sluice_host_api::{Op, TensorMeta};

use super::{
    Buffer, Device, DeviceError, DeviceInfo, DeviceKind, KernelClock, KernelTiming, Lane, Lanes, PartitionState,
    RowSlicing, TimedLaunch,
};

pub use sluice_backend_cuda::CudaUnavailable;

/// One NVIDIA GPU.
pub struct CudaDevice {
    inner: sluice_backend_cuda::CudaDevice,
}

impl CudaDevice {
    /// Opens GPU `options.ordinal`, or says why it cannot.
    pub fn open(options: CudaOptions) -> Result<CudaDevice, CudaUnavailable> {
        Ok(CudaDevice { inner: sluice_backend_cuda::CudaDevice::open(options)? })
    }
}

fn gpu(buffer: &Buffer) -> Result<&CudaBuffer, DeviceError> {
    match buffer {
        Buffer::Cuda(b) => Ok(b),
        _ => Err(DeviceError::Failure("buffer of another device passed to the GPU".into())),
    }
}

impl KernelClock for sluice_backend_cuda::KernelTimer {
    fn elapsed(&self) -> Result<Option<std::time::Duration>, DeviceError> {
        sluice_backend_cuda::KernelTimer::elapsed(self).map_err(error)
    }
}

fn lane(lane: Lane) -> sluice_backend_cuda::Lane {
    match lane {
        Lane::Whole => sluice_backend_cuda::Lane::Whole,
        Lane::Reserved => sluice_backend_cuda::Lane::Reserved,
        Lane::Remainder => sluice_backend_cuda::Lane::Remainder,
    }
}

/// The GPU buffers of `inputs`, with their metadata.
fn gpu_inputs<'a>(
    inputs: &[(&'a Buffer, &'a TensorMeta)],
) -> Result<Vec<(&'a CudaBuffer, &'a TensorMeta)>, DeviceError> {
    inputs.iter().map(|(b, m)| Ok((gpu(b)?, *m))).collect()
}

fn error(e: CudaError) -> DeviceError {
    match e {
        CudaError::OutOfMemory(m) => DeviceError::OutOfMemory(m),
        CudaError::Failure(m) => DeviceError::Failure(m),
    }
}

impl Device for CudaDevice {
    fn info(&self) -> DeviceInfo {
        let (major, minor) = self.inner.compute_capability();
        DeviceInfo {
            kind: DeviceKind::Cuda,
            name: format!("{} (sm_{major}{minor}, driver {})", self.inner.name(), self.inner.driver_version()),
            memory_bytes: self.inner.total_memory(),
            compute_units: self.inner.sm_count(),
        }
    }

    fn upload(&self, meta: &TensorMeta, bytes: &[u8]) -> Result<Buffer, DeviceError> {
        self.inner.upload(meta, bytes).map(Buffer::Cuda).map_err(error)
    }

    fn launch(&self, op: &Op, inputs: &[(&Buffer, &TensorMeta)], out: &TensorMeta) -> Result<Buffer, DeviceError> {
        let args = gpu_inputs(inputs)?;
        self.inner.launch(op, &args, out).map(Buffer::Cuda).map_err(error)
    }

    fn download(&self, buffer: &Buffer, meta: &TensorMeta) -> Result<Vec<u8>, DeviceError> {
        self.inner.download(gpu(buffer)?, meta).map_err(error)
    }

    fn synchronize(&self) -> Result<(), DeviceError> {
        self.inner.synchronize().map_err(error)
    }

    fn is_async(&self) -> bool {
        true
    }

    fn partition(&self) -> PartitionState {
        use sluice_backend_cuda::PartitionState as Cuda;
        match self.inner.partition() {
            Cuda::NotRequested => PartitionState::None { reason: "not requested (reserved SMs = 0)".into() },
            Cuda::Unavailable(reason) => PartitionState::Unavailable { reason: reason.clone() },
            &Cuda::Active { reserved_sms, remainder_sms, total_sms } => {
                PartitionState::Active { reserved_sms, remainder_sms, total_sms }
            }
        }
    }

    fn rows(&self) -> Option<&dyn RowSlicing> {
        Some(self)
    }

    fn timing(&self) -> Option<&dyn KernelTiming> {
        Some(self)
    }

    fn lanes(&self) -> Option<&dyn Lanes> {
        self.inner.partition().is_active().then_some(self as &dyn Lanes)
    }
}

impl RowSlicing for CudaDevice {
    fn launch_rows(
        &self,
        op: &Op,
        inputs: &[(&Buffer, &TensorMeta)],
        out: &TensorMeta,
        rows: Range<usize>,
    ) -> Result<Buffer, DeviceError> {
        let args = gpu_inputs(inputs)?;
        self.inner.launch_rows(op, &args, out, rows).map(Buffer::Cuda).map_err(error)
    }
}

impl KernelTiming for CudaDevice {
    fn launch_timed(
        &self,
        op: &Op,
        inputs: &[(&Buffer, &TensorMeta)],
        out: &TensorMeta,
    ) -> Result<TimedLaunch, DeviceError> {
        let args = gpu_inputs(inputs)?;
        let (buffer, timer) = self.inner.launch_timed(op, &args, out).map_err(error)?;
        Ok((Buffer::Cuda(buffer), Box::new(timer) as Box<dyn KernelClock>))
    }
}

impl Lanes for CudaDevice {
    fn set_lane(&self, l: Lane) {
        self.inner.set_lane(lane(l));
    }

    fn synchronize_lane(&self, l: Lane) -> Result<(), DeviceError> {
        self.inner.synchronize_lane(lane(l)).map_err(error)
    }

    fn lane_idle(&self, l: Lane) -> Result<bool, DeviceError> {
        self.inner.lane_idle(lane(l)).map_err(error)
    }
}
