//! Library probes run before anything that could panic.
//!
//! cudarc's dynamic loading panics on first use of a library that is missing
//! (`CudaContext::new`, NVRTC, `CudaBlas::new`). [`libraries`] asks each loader whether
//! its shared library can be opened at all, so [`crate::CudaDevice::open`] can answer
//! with a [`CudaUnavailable`] instead.

use crate::CudaUnavailable;

/// Which of the three libraries the backend needs can be loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Libraries {
    pub driver: bool,
    pub nvrtc: bool,
    pub cublas: bool,
}

impl Libraries {
    /// The first missing library as the error `open` reports, or `Ok`.
    pub fn check(self) -> Result<(), CudaUnavailable> {
        if !self.driver {
            Err(CudaUnavailable::NoDriver)
        } else if !self.nvrtc {
            Err(CudaUnavailable::NoNvrtc)
        } else if !self.cublas {
            Err(CudaUnavailable::NoCublas)
        } else {
            Ok(())
        }
    }
}

/// Probes `libcuda`, `libnvrtc` and `libcublas` (each `dlopen`ed and closed again).
pub fn libraries() -> Libraries {
    // SAFETY: these only try `libloading::Library::new` on the candidate names; loading
    // a CUDA library runs no initialisation that could fail unsafely.
    unsafe {
        let driver = cudarc::driver::sys::is_culib_present();
        Libraries {
            driver,
            nvrtc: driver && cudarc::nvrtc::sys::is_culib_present(),
            cublas: driver && cudarc::cublas::sys::is_culib_present(),
        }
    }
}

/// Whether a CUDA driver can be loaded on this machine (cheap enough for a test's skip).
pub fn driver_present() -> bool {
    libraries().driver
}

/// How many CUDA devices the driver shows this process (`cuDeviceGetCount`), or why
/// none can be used. Never panics.
pub fn device_count() -> Result<usize, CudaUnavailable> {
    libraries().check()?;
    let count = std::panic::catch_unwind(|| {
        cudarc::driver::result::init()?;
        cudarc::driver::result::device::get_count()
    });
    match count {
        Ok(Ok(n)) => Ok(n.max(0) as usize),
        Ok(Err(e)) if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_NO_DEVICE => Ok(0),
        Ok(Err(e)) => Err(CudaUnavailable::Init(format!("counting devices: {}", crate::error::describe_driver(&e)))),
        Err(panic) => Err(CudaUnavailable::Init(crate::error::panic_message(panic.as_ref()))),
    }
}
