//! Per-invocation store state and the host representation of a guest tensor.
//!
//! Each invocation gets a fresh [`InvocationState`] in a fresh store. Tensor handles
//! live in its `ResourceTable`, so an instance can only ever name its own tensors;
//! when the store is dropped (normally or after a trap) every handle is dropped, and
//! with it the device memory and the quota reservation.

use std::sync::Arc;

use sluice_host_api::TensorMeta;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::artifacts::ArtifactSet;
use super::guest_cpu::GuestCpu;
use crate::scheduler::{DeviceQueue, InvocationId, MemoryAccount, QueueRoom, TensorId, TensorLease};

/// A device tensor held by a guest: its id, metadata and the lease that frees it.
pub struct TensorHandle {
    pub(crate) id: TensorId,
    pub(crate) meta: TensorMeta,
    /// Made by `tensor.zeros`: its own memory, which `tensor.write-rows` may change
    /// (no other tensor may be written: a weight is shared, and an op's output, e.g. a
    /// reshape, may share its input's memory).
    pub(crate) writable: bool,
    _lease: Lease,
}

#[expect(dead_code, reason = "the leases are held only for their Drop")]
enum Lease {
    /// The tensor belongs to this handle alone.
    Owned(TensorLease),
    /// A shared read-only tensor (weights); freed with its last holder.
    Shared(Arc<TensorLease>),
}

impl TensorHandle {
    pub(crate) fn owned(lease: TensorLease, meta: TensorMeta) -> Self {
        TensorHandle { id: lease.id(), meta, writable: false, _lease: Lease::Owned(lease) }
    }

    pub(crate) fn shared(lease: Arc<TensorLease>, meta: TensorMeta) -> Self {
        TensorHandle { id: lease.id(), meta, writable: false, _lease: Lease::Shared(lease) }
    }
}

/// Limits of one invocation's sandbox.
#[derive(Clone, Debug)]
pub struct SandboxLimits {
    /// Largest linear memory the guest may grow to.
    pub memory_bytes: usize,
    /// Largest tensor the guest may read back in one call.
    pub max_read_bytes: usize,
    /// Largest artifact the guest may read as raw bytes.
    pub max_artifact_read_bytes: usize,
}

/// Refuses linear-memory growth past the cap, and remembers that it did, so a
/// resulting trap can be reported as "memory limit exceeded".
pub(crate) struct Limiter {
    pub(crate) memory_bytes: usize,
    pub(crate) denied: Option<usize>,
}

impl wasmtime::ResourceLimiter for Limiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            self.denied = Some(desired);
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 1 << 20)
    }
}

/// Everything the host side of one invocation needs.
pub struct InvocationState {
    pub(crate) table: ResourceTable,
    pub(crate) wasi: WasiCtx,
    pub(crate) limiter: Limiter,
    pub(crate) queue: DeviceQueue,
    pub(crate) invocation: InvocationId,
    /// The invocation's room in the device queue, waited on before each submission.
    pub(crate) room: Arc<QueueRoom>,
    pub(crate) account: Arc<MemoryAccount>,
    pub(crate) artifacts: Arc<ArtifactSet>,
    pub(crate) limits: SandboxLimits,
    pub(crate) stderr: MemoryOutputPipe,
    /// Where this invocation's output in `stderr` starts (a reused instance keeps
    /// its pipe).
    pub(crate) stderr_from: usize,
    /// Ops launched by this invocation.
    pub(crate) launches: u64,
    /// Tensor handles the guest holds.
    pub(crate) live_tensors: usize,
    /// Most tensor handles it may hold at once ([`super::EngineConfig::max_live_tensors`]).
    pub(crate) max_live_tensors: usize,
    /// The first quota refusal of this invocation (memory or handles), if any: a
    /// guest failing after one is reported with the quota's code.
    pub(crate) quota_refusal: Option<String>,
    /// Time the guest computed between host calls.
    pub(crate) guest_cpu: GuestCpu,
}

impl WasiView for InvocationState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}
