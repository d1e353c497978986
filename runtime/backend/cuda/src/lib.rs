//! sluice's CUDA backend: every op of the host API catalog on an NVIDIA GPU.
//!
//! The driver, NVRTC and cuBLAS are loaded at run time (cudarc's dynamic loading), so
//! this crate always compiles and links; on a machine without CUDA [`CudaDevice::open`]
//! returns [`CudaUnavailable::NoDriver`] ("no CUDA driver found") instead of panicking.
//!
//! - [`device`]: [`CudaDevice`]; `launch` is asynchronous on the current lane's stream,
//!   `download` waits. [`CudaDevice::matmul_rows`] computes a block of output rows so the
//!   scheduler can slice a big GEMM.
//! - [`partition`]: the optional SM partition through CUDA green contexts: [`Lane`]s
//!   (whole device, reserved partition, remainder), [`PartitionState`], and how work on
//!   different lanes is kept ordered.
//! - `lanes` (private): the streams behind the lanes, events and cross-stream ordering.
//! - [`alloc`]: the stream-ordered caching allocator behind [`CudaBuffer`], safe for
//!   buffers shared between lanes.
//! - [`kernels`] and [`nvrtc_cache`]: the `.cu` sources in `src/kernels/`, compiled by
//!   NVRTC for the device's architecture, loaded lazily per module and cached on disk.
//! - `fault` (private): the fault records through which kernels report an embedding id
//!   out of range or an integer division by zero, checked when a result is read.
//! - [`gemm`]: matmul and convolution GEMMs through cuBLAS.
//! - [`ops`]: one file per op family, mapping an [`sluice_host_api::Op`] onto kernels.
//! - [`timing`]: [`KernelTimer`], an op's device time from a pair of CUDA events.
//! - [`scratch`]: [`scratch_bytes`], the device memory an op takes besides its output,
//!   for quotas.
//! - [`staging`]: large uploads copied through pinned memory by a stager thread, off
//!   the caller's thread ([`CudaDevice::upload_owned`]).
//! - `recovery` (private): a device lost to a sticky error ([`CudaError::Lost`]), and
//!   [`CudaDevice::recover`], which resets it and opens it again.
//! - `mutants` (test builds only): planted bugs in the GEMM planning and lane ordering,
//!   each shown caught on the fake CUDA device.

pub mod alloc;
pub mod device;
mod error;
mod fault;
pub mod gemm;
pub mod kernels;
mod lanes;
pub mod layout;
mod module_cache;
#[cfg(test)]
mod mutants;
pub mod nvrtc_cache;
pub mod ops;
pub mod partition;
pub mod probe;
mod recovery;
pub mod scratch;
pub mod staging;
pub mod timing;

use std::path::PathBuf;

pub use alloc::{CudaBuffer, MemoryStats};
pub use device::CudaDevice;
pub use error::{CudaError, CudaUnavailable};
pub use partition::{Lane, PartitionState};
pub use scratch::scratch_bytes;
pub use staging::{StagingHold, StagingStats};
pub use timing::KernelTimer;

/// How to open a device.
#[derive(Clone, Debug, Default)]
pub struct CudaOptions {
    /// CUDA device ordinal.
    pub ordinal: usize,
    /// Where compiled kernel modules (CUBIN) are kept across restarts; `None` keeps them
    /// in memory only.
    pub kernel_cache_dir: Option<PathBuf>,
    /// Let f32 GEMMs use TF32 tensor cores (faster, ~1e-3 relative error).
    pub allow_tf32: bool,
    /// SMs to reserve for latency-class work in a green-context partition (rounded up to
    /// the hardware granularity: 8 SMs on compute capability 9.x); 0 (the default) means
    /// no partition. If the partition cannot be built the device still opens, without
    /// one; [`CudaDevice::partition`] says why.
    pub reserved_sms: u32,
}
