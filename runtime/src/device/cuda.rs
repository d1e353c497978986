//! The CUDA device: `sluice-backend-cuda` (cudarc, loaded at run time) behind [`Device`].
//!
//! Built into every binary; where no driver is installed, [`CudaDevice::open`]
//! fails with a reason ("no CUDA driver found ...") and the CPU serves instead.
//! Supported drivers: the bindings target the CUDA 13.0 driver API (cudarc's
//! `cuda-13000`), so the driver must support CUDA 13.0 (R580 or newer).
//!
//! A sticky CUDA error (an illegal address) loses the device: its errors come back as
//! [`DeviceError::Lost`], and [`Device::recover`] resets the GPU and opens it again in
//! place (the backend's `recovery` module); buffers of the lost device are refused.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;

use sluice_backend_cuda::{CudaBuffer, CudaError, CudaOptions};
use sluice_host_api::{Op, TensorMeta};

use super::{
    Buffer, Device, DeviceError, DeviceInfo, DeviceKind, KernelClock, KernelTiming, Lane, Lanes, PartitionState,
    RowSlicing, ScratchFn, TimedLaunch,
};

pub use sluice_backend_cuda::CudaUnavailable;

/// One NVIDIA GPU.
pub struct CudaDevice {
    /// Replaced by a fresh device when the GPU is reset after a loss.
    inner: RwLock<sluice_backend_cuda::CudaDevice>,
    resets: AtomicU64,
}

impl CudaDevice {
    /// Opens GPU `options.ordinal`, or says why it cannot.
    pub fn open(options: CudaOptions) -> Result<CudaDevice, CudaUnavailable> {
        Ok(CudaDevice {
            inner: RwLock::new(sluice_backend_cuda::CudaDevice::open(options)?),
            resets: AtomicU64::new(0),
        })
    }

    /// How many times the GPU was reset after a loss ([`Device::recover`]).
    pub fn resets(&self) -> u64 {
        self.resets.load(Ordering::Relaxed)
    }

    /// `e` as a device error; a failure on a lost device is [`DeviceError::Lost`].
    fn error(&self, e: CudaError) -> DeviceError {
        error(self.inner.read().classify(e))
    }
}

/// The scratch an op takes on the GPU, exactly, in the caching allocator's blocks
/// (`sluice_backend_cuda::scratch_bytes`): the same on every GPU whatever its SMs.
fn scratch_bytes(op: &Op, inputs: &[&TensorMeta], out: &TensorMeta, _sms: u32) -> u64 {
    sluice_backend_cuda::scratch_bytes(op, inputs, out)
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
        CudaError::Lost(m) => DeviceError::Lost(m),
    }
}

impl Device for CudaDevice {
    fn info(&self) -> DeviceInfo {
        let inner = self.inner.read();
        let (major, minor) = inner.compute_capability();
        DeviceInfo {
            kind: DeviceKind::Cuda,
            name: format!("{} (sm_{major}{minor}, driver {})", inner.name(), inner.driver_version()),
            memory_bytes: inner.total_memory(),
            compute_units: inner.sm_count(),
        }
    }

    fn upload(&self, meta: &TensorMeta, bytes: &[u8]) -> Result<Buffer, DeviceError> {
        let r = self.inner.read().upload(meta, bytes);
        r.map(Buffer::Cuda).map_err(|e| self.error(e))
    }

    fn upload_owned(&self, meta: &TensorMeta, bytes: Vec<u8>) -> Result<Buffer, DeviceError> {
        let r = self.inner.read().upload_owned(meta, bytes);
        r.map(Buffer::Cuda).map_err(|e| self.error(e))
    }

    fn launch(&self, op: &Op, inputs: &[(&Buffer, &TensorMeta)], out: &TensorMeta) -> Result<Buffer, DeviceError> {
        let args = gpu_inputs(inputs)?;
        let r = self.inner.read().launch(op, &args, out);
        r.map(Buffer::Cuda).map_err(|e| self.error(e))
    }

    fn ready(&self, buffer: &Buffer) -> bool {
        gpu(buffer).map_or(true, |b| !b.staging_pending())
    }

    fn download(&self, buffer: &Buffer, meta: &TensorMeta) -> Result<Vec<u8>, DeviceError> {
        let r = self.inner.read().download(gpu(buffer)?, meta);
        r.map_err(|e| self.error(e))
    }

    fn synchronize(&self) -> Result<(), DeviceError> {
        let r = self.inner.read().synchronize();
        r.map_err(|e| self.error(e))
    }

    fn scratch(&self) -> Option<ScratchFn> {
        Some(scratch_bytes)
    }

    fn recover(&self) -> Result<(), DeviceError> {
        let mut inner = self.inner.write();
        let fresh = inner.recover().map_err(error)?;
        // The scheduler sets lanes only when they change: keep the one it set.
        fresh.set_lane(inner.lane());
        let lost = std::mem::replace(&mut *inner, fresh);
        drop(inner);
        drop(lost);
        let resets = self.resets.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::warn!(resets, "cuda device recovered after a loss: buffers it held are gone");
        Ok(())
    }

    fn is_async(&self) -> bool {
        true
    }

    fn partition(&self) -> PartitionState {
        use sluice_backend_cuda::PartitionState as Cuda;
        match self.inner.read().partition() {
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
        self.inner.read().partition().is_active().then_some(self as &dyn Lanes)
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
        let r = self.inner.read().launch_rows(op, &args, out, rows);
        r.map(Buffer::Cuda).map_err(|e| self.error(e))
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
        let r = self.inner.read().launch_timed(op, &args, out);
        let (buffer, timer) = r.map_err(|e| self.error(e))?;
        Ok((Buffer::Cuda(buffer), Box::new(timer) as Box<dyn KernelClock>))
    }
}

impl Lanes for CudaDevice {
    fn set_lane(&self, l: Lane) {
        self.inner.read().set_lane(lane(l));
    }

    fn synchronize_lane(&self, l: Lane) -> Result<(), DeviceError> {
        let r = self.inner.read().synchronize_lane(lane(l));
        r.map_err(|e| self.error(e))
    }

    fn lane_idle(&self, l: Lane) -> Result<bool, DeviceError> {
        let r = self.inner.read().lane_idle(lane(l));
        r.map_err(|e| self.error(e))
    }
}

/// Recording a skipped test (shared with the test crates).
#[cfg(test)]
#[path = "../../../tests/src/skip.rs"]
mod skip;

#[cfg(test)]
mod tests {
    //! On the fake CUDA device only: `cargo xtask test-cuda-fake` runs this module alone in
    //! its process with `SLUICE_FAKE_CUDA_FAIL_LAUNCH=2` (the process's second kernel
    //! launch fails with an illegal address, which poisons the device process-wide).

    use sluice_host_api::{ApiError, DType, ErrorCode, Op, TensorMeta, UnaryOp};

    use super::*;

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn a_lost_gpu_is_a_device_failure_and_recovers_in_place() {
        if std::env::var("SLUICE_FAKE_CUDA").as_deref() != Ok("1")
            || std::env::var("SLUICE_FAKE_CUDA_FAIL_LAUNCH").as_deref() != Ok("2")
        {
            super::skip::skip("CUDA device loss", "runs on the fake CUDA device, alone (cargo xtask test-cuda-fake)");
            return;
        }
        let dev = CudaDevice::open(CudaOptions::default()).expect("the fake device opens");
        let m = TensorMeta::new(DType::F32, vec![4, 8]).unwrap();
        let h: Vec<f32> = (0..32).map(|i| i as f32 - 15.5).collect();
        let want = f32_bytes(&h.iter().map(|v| v.max(0.0)).collect::<Vec<_>>());
        let relu = Op::Unary(UnaryOp::Relu);
        let x = dev.upload(&m, &f32_bytes(&h)).unwrap();
        let y = dev.launch(&relu, &[(&x, &m)], &m).unwrap();
        assert_eq!(dev.download(&y, &m).unwrap(), want, "the first launch");

        // The second launch fails: a lost device, a device-failure to the caller.
        let err = dev.launch(&relu, &[(&x, &m)], &m).and_then(|y| dev.download(&y, &m)).unwrap_err();
        assert!(matches!(err, DeviceError::Lost(_)), "{err:?}");
        let api = ApiError::from(err);
        assert_eq!(api.code, ErrorCode::DeviceFailure);
        assert!(api.message.contains("device lost") && api.message.contains("ILLEGAL_ADDRESS"), "{}", api.message);

        // Recovered in place: buffers of before are refused, new work runs, large owned
        // uploads included.
        dev.recover().expect("the device recovers");
        assert_eq!(dev.resets(), 1);
        let stale = dev.launch(&relu, &[(&x, &m)], &m).expect_err("a buffer of the lost device");
        assert!(stale.to_string().contains("another device"), "{stale}");
        let n = sluice_backend_cuda::staging::STAGED_MIN / 4 + 9;
        let big_meta = TensorMeta::new(DType::F32, vec![n as u32]).unwrap();
        let big: Vec<f32> = (0..n).map(|i| (i % 31) as f32 - 15.0).collect();
        let b = dev.upload_owned(&big_meta, f32_bytes(&big)).unwrap();
        let y = dev.launch(&relu, &[(&b, &big_meta)], &big_meta).unwrap();
        let want = f32_bytes(&big.iter().map(|v| v.max(0.0)).collect::<Vec<_>>());
        assert!(dev.download(&y, &big_meta).unwrap() == want, "relu of a staged upload after the reset");
        // The scratch an attention takes is reported for the quota.
        let q = TensorMeta::new(DType::F32, vec![1, 4, 8]).unwrap();
        let att = Op::Attention { heads: 2, scale: 0.5 };
        let out = sluice_host_api::infer(&att, &[&q, &q, &q]).unwrap();
        assert!(dev.scratch_bytes(&att, &[&q, &q, &q], &out) > 0);
    }
}
