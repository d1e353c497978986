//! Device backends behind one [`Device`] trait.
//!
//! A backend turns the op catalog of [`sluice_host_api::Op`] into kernels on one
//! device. The CPU backend ([`cpu`]) is the reference implementation and is always
//! present; the CUDA backend plugs in behind the same trait. Backends never validate
//! shapes: every op they receive has passed [`sluice_host_api::infer`] with the same
//! inputs, and they receive the inferred output metadata with it.
//!
//! Buffers are an enum over backends (as candle's `Storage`), so the scheduler and the
//! engine hold one concrete type and every backend matches only its own variant.

mod cpu;
pub mod cuda;
mod select;

use std::fmt;

use std::ops::Range;

use sluice_host_api::{ApiError, ErrorCode, Op, TensorMeta};

pub use cpu::CpuDevice;
pub use select::{CudaRequired, DeviceChoice, DeviceSettings, OpenedDevice, open_device};
pub use sluice_backend_cpu::CpuBuffer;

/// Device memory holding one tensor's elements. Immutable once produced: ops always
/// write new buffers, so a buffer may be shared (weights) between invocations.
#[derive(Clone)]
pub enum Buffer {
    Cpu(CpuBuffer),
    Cuda(sluice_backend_cuda::CudaBuffer),
}

impl Buffer {
    /// Size of the elements in bytes.
    pub fn byte_len(&self) -> usize {
        match self {
            Buffer::Cpu(b) => b.byte_len(),
            Buffer::Cuda(b) => b.byte_len(),
        }
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Buffer::Cpu(b) => write!(f, "Buffer::Cpu({} bytes)", b.byte_len()),
            Buffer::Cuda(b) => write!(f, "Buffer::Cuda({} bytes)", b.byte_len()),
        }
    }
}

/// Where on a device with a spatial partition work runs (CUDA green contexts).
///
/// Latency-class work runs on the [`Lane::Reserved`] partition; best-effort work runs on
/// [`Lane::Remainder`] while latency work is active and takes the [`Lane::Whole`]
/// device back when it is not. A device without a partition runs every lane on its
/// one queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Lane {
    /// All compute units.
    Whole,
    /// The compute units reserved for latency-class work.
    Reserved,
    /// The compute units outside the reservation.
    Remainder,
}

impl Lane {
    pub const ALL: [Lane; 3] = [Lane::Whole, Lane::Reserved, Lane::Remainder];

    /// A dense index, for per-lane tables.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Which kind of device a backend drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    Cpu,
    Cuda,
}

/// What a backend tells about its device, for logs, status and placement.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DeviceInfo {
    pub kind: DeviceKind,
    /// Human-readable name, e.g. "CPU (2 threads)" or "NVIDIA H200".
    pub name: String,
    /// Device memory in bytes (for the CPU: the memory the process may use).
    pub memory_bytes: u64,
    /// Parallel compute units: CPU threads or GPU SMs.
    pub compute_units: u32,
}

/// A failure of the device itself (as opposed to a bad call, which `infer` rejects).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    #[error("device out of memory: {0}")]
    OutOfMemory(String),
    #[error("device failure: {0}")]
    Failure(String),
}

impl From<DeviceError> for ApiError {
    fn from(e: DeviceError) -> Self {
        match e {
            DeviceError::OutOfMemory(m) => ApiError::new(ErrorCode::OutOfMemory, m),
            DeviceError::Failure(m) => ApiError::new(ErrorCode::DeviceFailure, m),
        }
    }
}

/// The device time of one launched op, as the device measured it (GPU events).
pub trait KernelClock: Send {
    /// The op's device time, or `None` while it has not finished. Never waits.
    fn elapsed(&self) -> Result<Option<std::time::Duration>, DeviceError>;
}

/// An output buffer with the device's clock of the op that produced it.
pub type TimedLaunch = (Buffer, Box<dyn KernelClock>);

/// One device. Called from the device's scheduler thread only, in launch order.
pub trait Device: Send + Sync + 'static {
    /// What the device is.
    fn info(&self) -> DeviceInfo;

    /// Copies little-endian element bytes (exactly `meta.byte_len()`) to the device.
    fn upload(&self, meta: &TensorMeta, bytes: &[u8]) -> Result<Buffer, DeviceError>;

    /// Runs (or enqueues) `op` on `inputs` and returns the output buffer, whose
    /// metadata is `out` as inferred by [`sluice_host_api::infer`].
    fn launch(&self, op: &Op, inputs: &[(&Buffer, &TensorMeta)], out: &TensorMeta) -> Result<Buffer, DeviceError>;

    /// Waits for the buffer's producers and copies its elements back as
    /// little-endian bytes.
    fn download(&self, buffer: &Buffer, meta: &TensorMeta) -> Result<Vec<u8>, DeviceError>;

    /// Waits until every enqueued kernel has finished.
    fn synchronize(&self) -> Result<(), DeviceError>;

    /// Output rows `rows` of `op` (a matmul or a linear; see
    /// [`sluice_host_api::RowSplit`] for what a row is and the block's metadata), whose
    /// whole output is `out`, so the scheduler can slice a long best-effort kernel into
    /// pieces that fit its preemption budget. `None` if the device cannot.
    fn launch_rows(
        &self,
        _op: &Op,
        _inputs: &[(&Buffer, &TensorMeta)],
        _out: &TensorMeta,
        _rows: Range<usize>,
    ) -> Option<Result<Buffer, DeviceError>> {
        None
    }

    /// [`Device::launch`], timed by the device itself, for an asynchronous device whose
    /// launches return before the kernel ran. `None` if the device cannot time kernels.
    fn launch_timed(
        &self,
        _op: &Op,
        _inputs: &[(&Buffer, &TensorMeta)],
        _out: &TensorMeta,
    ) -> Option<Result<TimedLaunch, DeviceError>> {
        None
    }

    /// Whether `launch` returns before the kernel ran (work queues on the device, as
    /// on a GPU stream), so the scheduler must bound what it hands over.
    fn is_async(&self) -> bool {
        false
    }

    /// The spatial partition in force, or why there is none.
    fn partition(&self) -> String {
        "none: this device has no spatial partitions".into()
    }

    /// Whether the device has a reserved partition, so [`Device::set_lane`] matters.
    fn has_partition(&self) -> bool {
        false
    }

    /// Directs later uploads, launches and downloads to `lane`. The device keeps
    /// results correct across lanes (a kernel waits for inputs produced on another
    /// lane); the scheduler decides which lane serves which class.
    fn set_lane(&self, _lane: Lane) {}

    /// Waits until every kernel enqueued on `lane` has finished.
    fn synchronize_lane(&self, _lane: Lane) -> Result<(), DeviceError> {
        self.synchronize()
    }

    /// Whether every kernel enqueued on `lane` has finished, without waiting.
    fn lane_idle(&self, lane: Lane) -> Result<bool, DeviceError> {
        self.synchronize_lane(lane).map(|()| true)
    }
}
