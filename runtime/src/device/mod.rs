//! Devices behind one [`Device`] trait: the runtime's side of the backend crates.
//!
//! A device turns the op catalog of [`sluice_host_api::Op`] into kernels. The CPU
//! device (over `sluice-backend-cpu`, the reference implementation) is always
//! present; the CUDA device (over `sluice-backend-cuda`) plugs in behind the same
//! trait; [`sim`] is a simulated device for tests and benchmarks. Every op a device
//! receives has passed [`sluice_host_api::infer`] with the same inputs, and it
//! receives the inferred output metadata with it.
//!
//! Buffers are an enum over backends (as candle's `Storage`), so the scheduler and the
//! engine hold one concrete type and every backend matches only its own variant.

mod capabilities;
mod cpu;
pub mod cuda;
mod select;
pub mod sim;

use std::fmt;

use sluice_host_api::{ApiError, ErrorCode, Op, TensorMeta};

pub use capabilities::{KernelClock, KernelTiming, Lanes, PartitionState, RowSlicing, TimedLaunch};
pub use cpu::CpuDevice;
pub use select::{CudaRequired, DeviceChoice, DeviceSettings, OpenedDevice, OpenedDevices, open_device, open_devices};
pub use sluice_backend_cpu::CpuBuffer;

/// Device memory holding one tensor's elements. Immutable once produced: ops always
/// write new buffers, so a buffer may be shared (weights) between invocations. The
/// exceptions are [`sluice_host_api::Op::WriteRows`] and the caches of
/// [`sluice_host_api::Op::KvAttention`] ([`sluice_host_api::Op::written_inputs`]), which
/// write rows in place into buffers the host made for them (`tensor.zeros`, owned by one
/// invocation): every clone of such a buffer (a reshape of it) shows the rows.
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
    /// The device is lost (a sticky GPU error): everything on it is gone and every call
    /// fails until [`Device::recover`] resets it.
    #[error("device lost: {0}")]
    Lost(String),
}

impl From<DeviceError> for ApiError {
    fn from(e: DeviceError) -> Self {
        match e {
            DeviceError::OutOfMemory(m) => ApiError::new(ErrorCode::OutOfMemory, m),
            DeviceError::Failure(m) => ApiError::new(ErrorCode::DeviceFailure, m),
            DeviceError::Lost(m) => ApiError::new(ErrorCode::DeviceFailure, format!("device lost: {m}")),
        }
    }
}

/// One device. Called from the device's scheduler thread only, in launch order.
///
/// The trait is the core every device has; what only some devices can do (run a
/// kernel's rows, time kernels on the device, run work on SM partitions) are small
/// traits reached through the accessors at the end, which answer `None` by default.
pub trait Device: Send + Sync + 'static {
    /// What the device is.
    fn info(&self) -> DeviceInfo;

    /// Copies little-endian element bytes (exactly `meta.byte_len()`) to the device.
    fn upload(&self, meta: &TensorMeta, bytes: &[u8]) -> Result<Buffer, DeviceError>;

    /// [`Device::upload`] of bytes the device may keep: a device that copies large
    /// uploads off the calling thread (the CUDA device, through pinned staging) returns
    /// before the copy is made, and work reading the buffer waits for it.
    fn upload_owned(&self, meta: &TensorMeta, bytes: Vec<u8>) -> Result<Buffer, DeviceError> {
        self.upload(meta, &bytes)
    }

    /// Runs (or enqueues) `op` on `inputs` and returns the output buffer, whose
    /// metadata is `out` as inferred by [`sluice_host_api::infer`].
    fn launch(&self, op: &Op, inputs: &[(&Buffer, &TensorMeta)], out: &TensorMeta) -> Result<Buffer, DeviceError>;

    /// Whether work reading `buffer` can be queued at once. A device that copies large
    /// uploads on a thread of its own (the CUDA device's stager) says `false` until
    /// that copy is queued: a [`Device::launch`] reading the buffer before then waits
    /// on the calling thread, which is the scheduler's, and every tenant would wait
    /// with it.
    fn ready(&self, buffer: &Buffer) -> bool {
        let _ = buffer;
        true
    }

    /// Waits for the buffer's producers and copies its elements back as
    /// little-endian bytes.
    fn download(&self, buffer: &Buffer, meta: &TensorMeta) -> Result<Vec<u8>, DeviceError>;

    /// Waits until every enqueued kernel has finished.
    fn synchronize(&self) -> Result<(), DeviceError>;

    /// Device memory `launch` of `op` takes besides its output (attention scores, a
    /// broadcast copy, an im2col buffer): [`Device::scratch`]'s estimate, 0 for a device
    /// that gives none.
    fn scratch_bytes(&self, op: &Op, inputs: &[&TensorMeta], out: &TensorMeta) -> u64 {
        self.scratch().map_or(0, |f| f(op, inputs, out, self.info().compute_units))
    }

    /// Resets a device that returned [`DeviceError::Lost`] and makes it usable again;
    /// every buffer it held is gone (later use of one is an error), so what was
    /// resident must be uploaded again. Devices that cannot be lost say so.
    fn recover(&self) -> Result<(), DeviceError> {
        Err(DeviceError::Failure(format!("{} cannot be reset", self.info().name)))
    }

    /// Called once, on the scheduler's thread, before the scheduler's first call. The
    /// CPU device makes that thread one of its kernel threads, so that a kernel starts
    /// where it is launched instead of waking a pool thread and waiting for it.
    fn adopt_scheduler_thread(&self) {}

    /// Whether `launch` returns before the kernel ran (work queues on the device, as
    /// on a GPU stream), so the scheduler must bound what it hands over.
    fn is_async(&self) -> bool {
        false
    }

    /// The spatial partition in force, or why there is none (for logs and status).
    fn partition(&self) -> PartitionState {
        PartitionState::None { reason: "this device has no spatial partitions".into() }
    }

    /// Running a matmul's or a linear's output rows alone, if the device can.
    fn rows(&self) -> Option<&dyn RowSlicing> {
        None
    }

    /// Timing kernels with the device's own clock, if the device can.
    fn timing(&self) -> Option<&dyn KernelTiming> {
        None
    }

    /// The lanes of an active spatial partition, if the device has one.
    fn lanes(&self) -> Option<&dyn Lanes> {
        None
    }

    /// How the device estimates the scratch and temporaries of a kernel (bytes it
    /// allocates besides the output), so the engine charges them to the invocation
    /// that launches it; `None`: it does not say (nothing is charged).
    fn scratch(&self) -> Option<ScratchFn> {
        None
    }
}

/// A device's estimate of a kernel's scratch bytes: from the op, the inputs' and the
/// output's metadata and the device's compute units (kernels that run in parallel
/// hold one scratch block per unit). A plain function, so the engine can call it on
/// its own thread, before the kernel is queued.
pub type ScratchFn = fn(&Op, &[&TensorMeta], &TensorMeta, u32) -> u64;
