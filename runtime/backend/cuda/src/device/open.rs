//! Opening a GPU: the driver, the device's properties, the SM partition when one is
//! asked for (any failure leaves the device whole, saying why), the caching pool and a
//! module cache and cuBLAS handle per stream slot.

use std::sync::Mutex;
use std::sync::atomic::AtomicU8;

use cudarc::cublas::CudaBlas;
use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaContext, result};

use super::{CudaDevice, Info, Kit};
use crate::alloc::Pool;
use crate::lanes::Lanes;
use crate::module_cache::{CubinStore, ModuleCache};
use crate::nvrtc_cache::{self, Target};
use crate::partition::{self, Lane, PartitionState};
use crate::{CudaOptions, CudaUnavailable, probe};

impl CudaDevice {
    /// Opens device `opts.ordinal`. Probes for libcuda, libnvrtc and libcublas before
    /// touching anything that would panic, so a machine without CUDA gets
    /// [`CudaUnavailable::NoDriver`] ("no CUDA driver found") and nothing else happens.
    ///
    /// With `opts.reserved_sms > 0` it also builds the SM partition; if that fails the
    /// device opens without one ([`CudaDevice::partition`] says why).
    pub fn open(opts: CudaOptions) -> Result<CudaDevice, CudaUnavailable> {
        probe::libraries().check()?;
        // Belt and braces: cudarc panics on some loader failures; never let one escape.
        match std::panic::catch_unwind(|| Self::open_checked(&opts)) {
            Ok(r) => r,
            Err(panic) => Err(CudaUnavailable::Init(crate::error::panic_message(panic.as_ref()))),
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

        // The partition: any failure leaves the device unpartitioned, with the reason.
        let mut blases = vec![blas];
        let (lanes, partition) = if opts.reserved_sms == 0 {
            (Lanes::single(ctx.clone(), stream, info.sm_count), PartitionState::NotRequested)
        } else {
            let built = partition::create(&ctx, opts.reserved_sms, info.cc.0, driver_version).and_then(|split| {
                let mut green = Vec::new();
                for lane in [&split.reserved, &split.remainder] {
                    // On failure the handles made so far drop before `split` does.
                    let blas =
                        CudaBlas::new(lane.stream.clone()).map_err(|e| format!("cuBLAS in a green context: {e:?}"))?;
                    partition::set_sm_count_target(&blas, lane.sms)?;
                    green.push(blas);
                }
                Ok((split, green))
            });
            match built {
                Ok((split, green)) => {
                    let state = split.state();
                    tracing::info!(
                        ordinal = opts.ordinal,
                        requested = opts.reserved_sms,
                        partition = %state,
                        "cuda SM partition active"
                    );
                    blases.extend(green);
                    (Lanes::partitioned(ctx.clone(), stream, info.sm_count, split), state)
                }
                Err(why) => {
                    tracing::warn!(
                        ordinal = opts.ordinal,
                        requested = opts.reserved_sms,
                        reason = %why,
                        "cuda SM partition unavailable; priorities and preemption only"
                    );
                    (Lanes::single(ctx.clone(), stream, info.sm_count), PartitionState::Unavailable(why))
                }
            }
        };
        // Bind the primary context again (building green contexts switches it).
        ctx.bind_to_thread().map_err(|e| init("binding the context", e))?;
        let pool = Pool::new(ctx.clone(), lanes);
        let store: Option<CubinStore> = if pool.lanes.partitioned_now() { Some(CubinStore::default()) } else { None };
        let kits = pool
            .lanes
            .slots()
            .iter()
            .zip(blases)
            .map(|(slot, blas)| Kit {
                kernels: ModuleCache::new(
                    slot.ctx.clone(),
                    target.clone(),
                    opts.kernel_cache_dir.clone(),
                    store.clone(),
                ),
                blas: Mutex::new(blas),
            })
            .collect();
        tracing::info!(
            ordinal = opts.ordinal,
            name = %info.name,
            arch = %target.arch,
            sms = info.sm_count,
            driver = driver_version,
            nvrtc = ?nvrtc_version,
            partition = %partition,
            "cuda device opened"
        );
        Ok(CudaDevice {
            kits,
            lane: AtomicU8::new(Lane::Whole.index()),
            partition,
            allow_tf32: opts.allow_tf32,
            opts: opts.clone(),
            stager: std::sync::OnceLock::new(),
            info,
            pool,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::{CudaDevice, CudaOptions, CudaUnavailable, probe};

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
