//! Errors: why a device cannot be opened ([`CudaUnavailable`]) and why an operation on
//! an open device failed ([`CudaError`]), with conversions from cudarc's error types.

use cudarc::cublas::result::CublasError;
use cudarc::cublas::sys::cublasStatus_t;
use cudarc::driver::DriverError;
use cudarc::driver::sys::CUresult;

/// Why [`crate::CudaDevice::open`] found no usable device. Never a panic.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CudaUnavailable {
    /// `libcuda` is not installed or cannot be loaded.
    #[error("no CUDA driver found (libcuda could not be loaded)")]
    NoDriver,
    /// The driver loaded but NVRTC (`libnvrtc`) did not: kernels cannot be compiled.
    #[error("CUDA driver found but no NVRTC library (libnvrtc) could be loaded")]
    NoNvrtc,
    /// The driver loaded but cuBLAS (`libcublas`, `libcublasLt`) did not.
    #[error("CUDA driver found but no cuBLAS library (libcublas) could be loaded")]
    NoCublas,
    /// The driver reports no device with this ordinal.
    #[error("no CUDA device with ordinal {ordinal} ({count} device(s) present)")]
    NoDevice { ordinal: usize, count: usize },
    /// The driver failed while initialising the device.
    #[error("CUDA initialisation failed: {0}")]
    Init(String),
}

/// Why an upload, launch, download or synchronize failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CudaError {
    /// The device has no memory left for an allocation, even after the cache was freed.
    #[error("CUDA out of memory: {0}")]
    OutOfMemory(String),
    /// Any other failure (driver, NVRTC, cuBLAS, a bad argument).
    #[error("CUDA failure: {0}")]
    Failure(String),
    /// The device hit a sticky error (an illegal address, a failed launch): its context
    /// is poisoned, every later call on it fails and every buffer on it is lost, until
    /// [`crate::CudaDevice::recover`] resets it and opens it again.
    #[error("CUDA device lost: {0}")]
    Lost(String),
}

/// Whether a driver error poisons the context (a "sticky" error, in CUDA's terms): once
/// one is returned, every later call in the process on that device fails with it until
/// the primary context is reset.
pub(crate) fn is_sticky(r: CUresult) -> bool {
    matches!(
        r,
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
            | CUresult::CUDA_ERROR_LAUNCH_FAILED
            | CUresult::CUDA_ERROR_LAUNCH_TIMEOUT
            | CUresult::CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUresult::CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUresult::CUDA_ERROR_MISALIGNED_ADDRESS
            | CUresult::CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUresult::CUDA_ERROR_INVALID_PC
            | CUresult::CUDA_ERROR_ECC_UNCORRECTABLE
    )
}

impl CudaError {
    pub(crate) fn failure(msg: impl Into<String>) -> Self {
        CudaError::Failure(msg.into())
    }

    /// A driver error with what was being done; out-of-memory and sticky errors
    /// ([`CudaError::Lost`]) keep their own variants.
    pub(crate) fn driver(what: &str, e: DriverError) -> Self {
        let text = format!("{what}: {}", describe_driver(&e));
        match e.0 {
            CUresult::CUDA_ERROR_OUT_OF_MEMORY => CudaError::OutOfMemory(text),
            r if is_sticky(r) => CudaError::Lost(text),
            _ => CudaError::Failure(text),
        }
    }

    /// Whether the device that returned this error is lost ([`CudaError::Lost`]).
    pub fn is_lost(&self) -> bool {
        matches!(self, CudaError::Lost(_))
    }

    pub(crate) fn cublas(what: &str, e: CublasError) -> Self {
        let text = format!("{what}: cuBLAS {:?}", e.0);
        if e.0 == cublasStatus_t::CUBLAS_STATUS_ALLOC_FAILED {
            CudaError::OutOfMemory(text)
        } else {
            CudaError::Failure(text)
        }
    }
}

/// `CUDA_ERROR_X (description)` for a driver error.
pub(crate) fn describe_driver(e: &DriverError) -> String {
    let name = e.error_name().map(|s| s.to_string_lossy().into_owned());
    let text = e.error_string().map(|s| s.to_string_lossy().into_owned());
    match (name, text) {
        (Ok(n), Ok(t)) => format!("{n} ({t})"),
        _ => format!("{:?}", e.0),
    }
}

/// The message of a caught panic (cudarc panics when a library or symbol is missing).
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into())
}
