//! [`CudaDevice`]: one CUDA context, one stream, a cuBLAS handle, a caching allocator and
//! the lazily compiled kernel modules of one GPU.
//!
//! Every op is queued on the device's stream and returns at once; `download` and
//! `synchronize` wait. Work from several threads interleaves on the one stream in the
//! order the calls reach it; callers that need an order (the scheduler) impose it.

use std::sync::{Arc, Mutex};

use cudarc::cublas::CudaBlas;
use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaContext, CudaStream, result};
use sluice_host_api::{Op, TensorMeta};

use crate::alloc::{MemoryStats, Pool};
use crate::module_cache::ModuleCache;
use crate::nvrtc_cache::{self, Target};
use crate::{CudaBuffer, CudaError, CudaOptions, CudaUnavailable, probe};

/// What the device reports about itself, read once at `open`.
#[derive(Clone, Debug)]
struct Info {
    name: String,
    total_memory: u64,
    sm_count: u32,
    cc: (u32, u32),
    driver_version: i32,
}

/// An open GPU. `Send + Sync`; clone-free (wrap it in an `Arc` to share).
pub struct CudaDevice {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    pub(crate) blas: Mutex<CudaBlas>,
    pub(crate) pool: Arc<Pool>,
    pub(crate) kernels: ModuleCache,
    pub(crate) allow_tf32: bool,
    info: Info,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDevice")
            .field("ordinal", &self.ctx.ordinal())
            .field("name", &self.info.name)
            .field("arch", &self.kernels.target().arch)
            .finish()
    }
}

impl CudaDevice {
    /// Opens device `opts.ordinal`. Probes for libcuda, libnvrtc and libcublas before
    /// touching anything that would panic, so a machine without CUDA gets
    /// [`CudaUnavailable::NoDriver`] ("no CUDA driver found") and nothing else happens.
    pub fn open(opts: CudaOptions) -> Result<CudaDevice, CudaUnavailable> {
        probe::libraries().check()?;
        // Belt and braces: cudarc panics on some loader failures; never let one escape.
        match std::panic::catch_unwind(|| Self::open_checked(&opts)) {
            Ok(r) => r,
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "unknown panic".into());
                Err(CudaUnavailable::Init(msg))
            }
        }
    }

    fn open_checked(opts: &CudaOptions) -> Result<CudaDevice, CudaUnavailable> {
        let init = |what: &str, e: cudarc::driver::DriverError| {
            CudaUnavailable::Init(format!("{what}: {}", crate::error::describe_driver(&e)))
        };
        result::init().map_err(|e| match e.0 {
            cudarc::driver::sys::CUresult::CUDA_ERROR_NO_DEVICE => {
                CudaUnavailable::NoDevice { ordinal: opts.ordinal, count: 0 }
            }
            _ => init("cuInit", e),
        })?;
        let count = result::device::get_count().map_err(|e| init("cuDeviceGetCount", e))?.max(0) as usize;
        if opts.ordinal >= count {
            return Err(CudaUnavailable::NoDevice { ordinal: opts.ordinal, count });
        }
        let ctx = CudaContext::new(opts.ordinal).map_err(|e| init("creating the context", e))?;
        let stream = ctx.new_stream().map_err(|e| init("creating a stream", e))?;
        let (major, minor) = ctx.compute_capability().map_err(|e| init("compute capability", e))?;
        let sm_count = ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|e| init("SM count", e))?;
        let mut driver_version = 0i32;
        // SAFETY: an out-pointer to a live integer; the driver library is loaded.
        unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver_version) }
            .result()
            .map_err(|e| init("cuDriverGetVersion", e))?;
        let info = Info {
            name: ctx.name().map_err(|e| init("device name", e))?,
            total_memory: ctx.total_mem().map_err(|e| init("device memory", e))? as u64,
            sm_count: sm_count.max(1) as u32,
            cc: (major as u32, minor as u32),
            driver_version,
        };
        let nvrtc_version = nvrtc_cache::nvrtc_version().map_err(|e| CudaUnavailable::Init(e.to_string()))?;
        let target = Target { arch: nvrtc_cache::arch_for(info.cc.0, info.cc.1), driver_version, nvrtc_version };
        let blas = CudaBlas::new(stream.clone()).map_err(|e| CudaUnavailable::Init(format!("cuBLAS: {e:?}")))?;
        tracing::info!(
            ordinal = opts.ordinal,
            name = %info.name,
            arch = %target.arch,
            sms = info.sm_count,
            driver = driver_version,
            nvrtc = ?nvrtc_version,
            "cuda device opened"
        );
        Ok(CudaDevice {
            pool: Pool::new(ctx.clone()),
            kernels: ModuleCache::new(ctx.clone(), target, opts.kernel_cache_dir.clone()),
            blas: Mutex::new(blas),
            ctx,
            stream,
            allow_tf32: opts.allow_tf32,
            info,
        })
    }

    pub fn name(&self) -> String {
        self.info.name.clone()
    }

    /// Device memory in bytes.
    pub fn total_memory(&self) -> u64 {
        self.info.total_memory
    }

    pub fn sm_count(&self) -> u32 {
        self.info.sm_count
    }

    pub fn compute_capability(&self) -> (u32, u32) {
        self.info.cc
    }

    /// `cuDriverGetVersion`, e.g. 13000 for CUDA 13.0.
    pub fn driver_version(&self) -> i32 {
        self.info.driver_version
    }

    /// What the caching allocator holds.
    pub fn memory_stats(&self) -> MemoryStats {
        self.pool.stats()
    }

    /// Returns cached (free) device memory to the driver; waits for the device.
    pub fn release_cached_memory(&self) -> Result<u64, CudaError> {
        self.pool.release_cached()
    }

    /// Compiles (or loads from the disk cache) every kernel module now, instead of on
    /// first use; returns how many modules are loaded.
    pub fn warm_up(&self) -> Result<usize, CudaError> {
        for m in crate::kernels::Module::ALL {
            self.kernels.module(m)?;
        }
        Ok(crate::kernels::Module::ALL.len())
    }

    /// Copies little-endian element bytes to a new device buffer (queued on the stream;
    /// `bytes` may be dropped as soon as this returns).
    pub fn upload(&self, meta: &TensorMeta, bytes: &[u8]) -> Result<CudaBuffer, CudaError> {
        if bytes.len() != meta.byte_len() {
            return Err(CudaError::failure(format!(
                "upload of {:?} {} needs {} bytes, got {}",
                meta.shape,
                meta.dtype,
                meta.byte_len(),
                bytes.len()
            )));
        }
        let buf = self.alloc(bytes.len())?;
        if !bytes.is_empty() {
            self.bind()?;
            // SAFETY: `buf` holds at least `bytes.len()` bytes; pageable source memory is
            // staged by the driver before this returns.
            unsafe { result::memcpy_htod_async(buf.device_ptr(), bytes, self.stream.cu_stream()) }
                .map_err(|e| CudaError::driver("copying to the device", e))?;
        }
        Ok(buf)
    }

    /// Queues `op` on the device's stream and returns its output buffer at once. The
    /// launch must have passed [`sluice_host_api::infer`] with these inputs, giving `out`.
    pub fn launch(
        &self,
        op: &Op,
        inputs: &[(&CudaBuffer, &TensorMeta)],
        out: &TensorMeta,
    ) -> Result<CudaBuffer, CudaError> {
        for (i, (buf, meta)) in inputs.iter().enumerate() {
            if !buf.belongs_to(&self.pool) {
                return Err(CudaError::failure(format!("{} input {i} lives on another device", op.name())));
            }
            if buf.byte_len() < meta.byte_len() {
                return Err(CudaError::failure(format!(
                    "{} input {i}: buffer of {} bytes is too small for {:?} {}",
                    op.name(),
                    buf.byte_len(),
                    meta.shape,
                    meta.dtype
                )));
            }
        }
        debug_assert_eq!(
            sluice_host_api::infer(op, &inputs.iter().map(|(_, m)| *m).collect::<Vec<_>>()).as_ref(),
            Ok(out),
            "launch of {op:?} did not pass infer"
        );
        crate::ops::launch(self, op, inputs, out)
    }

    /// Waits for the work queued so far and returns the buffer's bytes (`meta.byte_len()`).
    pub fn download(&self, buf: &CudaBuffer, meta: &TensorMeta) -> Result<Vec<u8>, CudaError> {
        let n = meta.byte_len();
        if buf.byte_len() < n {
            return Err(CudaError::failure(format!("download of {n} bytes from a {}-byte buffer", buf.byte_len())));
        }
        let mut out = vec![0u8; n];
        if n > 0 {
            self.bind()?;
            // SAFETY: `out` has `n` bytes and stays alive until the synchronize below.
            unsafe { result::memcpy_dtoh_async(&mut out, buf.device_ptr(), self.stream.cu_stream()) }
                .map_err(|e| CudaError::driver("copying from the device", e))?;
        }
        self.synchronize()?;
        Ok(out)
    }

    /// Waits until everything queued on the device's stream has run; reports a kernel
    /// fault of any earlier op.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.stream.synchronize().map_err(|e| CudaError::driver("synchronizing the stream", e))
    }

    pub(crate) fn bind(&self) -> Result<(), CudaError> {
        self.ctx.bind_to_thread().map_err(|e| CudaError::driver("binding the context", e))
    }

    /// A buffer of `bytes` bytes from the pool, for work on this device's stream.
    pub(crate) fn alloc(&self, bytes: usize) -> Result<CudaBuffer, CudaError> {
        self.pool.alloc(self.stream.cu_stream() as usize, bytes)
    }

    /// Queues a zero fill of the whole buffer.
    pub(crate) fn memset_zero(&self, buf: &CudaBuffer) -> Result<(), CudaError> {
        if buf.byte_len() == 0 {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: the buffer holds `byte_len` bytes.
        unsafe { result::memset_d8_async(buf.device_ptr(), 0, buf.byte_len(), self.stream.cu_stream()) }
            .map_err(|e| CudaError::driver("zero fill", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_and_buffers_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<CudaDevice>();
        check::<CudaBuffer>();
    }

    #[test]
    fn open_without_a_driver_fails_cleanly() {
        if probe::driver_present() {
            eprintln!("a CUDA driver is present; this test checks the no-driver path only");
            return;
        }
        let err = CudaDevice::open(CudaOptions::default()).unwrap_err();
        assert_eq!(err, CudaUnavailable::NoDriver);
        assert!(err.to_string().contains("no CUDA driver found"), "{err}");
    }
}
