//! The per-device scheduler: the single dispatch point of every kernel.
//!
//! Each device gets one [`DeviceQueue`]: a handle that engine code on any thread uses
//! to submit work, and one actor thread that owns the device, every tensor's buffer
//! on it and the queues of pending work. Nothing else touches a device. The host
//! side of an op launch only validates the op (shape inference), allocates a
//! [`TensorId`] and sends a message, so launches are asynchronous like CUDA: the
//! output handle exists at once, and only a read waits for the device.
//!
//! Work from one invocation runs in submission order. Between invocations the actor
//! decides the order (see [`worker`]).

mod memory;
mod worker;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_channel::Sender;
use sluice_host_api::{ApiError, Op, TensorMeta};
use tokio::sync::oneshot;

use crate::backend::{Buffer, Device, DeviceInfo};

pub use memory::MemoryAccount;

/// Names one tensor on one device. Never reused within a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub u64);

/// Names one invocation, for ordering and accounting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InvocationId(pub u64);

/// A request to the device actor.
pub(crate) enum Command {
    /// Copy host bytes into a new tensor.
    Upload { id: TensorId, meta: TensorMeta, bytes: Vec<u8> },
    /// Adopt a buffer produced elsewhere (shared weights loaded on this thread).
    Adopt { id: TensorId, buffer: Buffer },
    /// Run an op whose output is `id`.
    Launch { id: TensorId, op: Op, inputs: Vec<(TensorId, TensorMeta)>, out: TensorMeta },
    /// Copy a tensor back to the host once its producers are done.
    Read { id: TensorId, meta: TensorMeta, reply: oneshot::Sender<Result<Vec<u8>, ApiError>> },
    /// The tensor's last handle is gone.
    Free { id: TensorId },
    /// Answer once every earlier command has been executed.
    Fence { reply: oneshot::Sender<QueueStats> },
}

/// Counters of one device queue, read through a fence.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct QueueStats {
    /// Tensors currently resident.
    pub resident_tensors: usize,
    /// Bytes currently resident.
    pub resident_bytes: u64,
    /// Kernels launched since start.
    pub kernels: u64,
    /// Uploads since start.
    pub uploads: u64,
}

struct Shared {
    tx: Sender<Command>,
    info: DeviceInfo,
    next_tensor: AtomicU64,
}

/// Handle to one device's scheduler. Cheap to clone.
#[derive(Clone)]
pub struct DeviceQueue {
    shared: Arc<Shared>,
}

impl DeviceQueue {
    /// Starts the actor thread that owns `device`.
    pub fn start(device: Box<dyn Device>) -> DeviceQueue {
        let info = device.info();
        let (tx, rx) = crossbeam_channel::unbounded();
        let name = format!("sluice-{:?}", info.kind).to_lowercase();
        std::thread::Builder::new()
            .name(name)
            .spawn(move || worker::run(device, rx))
            .expect("spawning the device thread");
        DeviceQueue {
            shared: Arc::new(Shared { tx, info, next_tensor: AtomicU64::new(1) }),
        }
    }

    /// What the device is.
    pub fn info(&self) -> &DeviceInfo {
        &self.shared.info
    }

    /// A fresh tensor id.
    pub fn new_tensor_id(&self) -> TensorId {
        TensorId(self.shared.next_tensor.fetch_add(1, Ordering::Relaxed))
    }

    pub(crate) fn send(&self, command: Command) {
        // The actor only stops when every handle is gone, so a send cannot fail
        // while `self` exists.
        let _ = self.shared.tx.send(command);
    }

    /// Queues an upload of `bytes` (exactly `meta.byte_len()`) as tensor `id`.
    pub fn upload(&self, id: TensorId, meta: TensorMeta, bytes: Vec<u8>) {
        self.send(Command::Upload { id, meta, bytes });
    }

    /// Registers a buffer that already lives on this device as tensor `id`.
    pub fn adopt(&self, id: TensorId, buffer: Buffer) {
        self.send(Command::Adopt { id, buffer });
    }

    /// Queues `op` on `inputs`; its result becomes tensor `id` with metadata `out`.
    pub fn launch(&self, id: TensorId, op: Op, inputs: Vec<(TensorId, TensorMeta)>, out: TensorMeta) {
        self.send(Command::Launch { id, op, inputs, out });
    }

    /// Waits for tensor `id` and returns its little-endian bytes.
    pub async fn read(&self, id: TensorId, meta: TensorMeta) -> Result<Vec<u8>, ApiError> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Read { id, meta, reply });
        rx.await.unwrap_or_else(|_| Err(device_gone()))
    }

    /// Blocking variant of [`DeviceQueue::read`], for threads outside the async runtime.
    pub fn read_blocking(&self, id: TensorId, meta: TensorMeta) -> Result<Vec<u8>, ApiError> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Read { id, meta, reply });
        rx.blocking_recv().unwrap_or_else(|_| Err(device_gone()))
    }

    /// Releases tensor `id`.
    pub fn free(&self, id: TensorId) {
        self.send(Command::Free { id });
    }

    /// Waits until every command sent before has run, and returns the queue's counters.
    pub async fn fence(&self) -> QueueStats {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Fence { reply });
        rx.await.unwrap_or_default()
    }
}

fn device_gone() -> ApiError {
    ApiError::new(sluice_host_api::ErrorCode::DeviceFailure, "the device thread has stopped")
}
