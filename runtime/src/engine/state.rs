//! Per-invocation store state.
//!
//! Each invocation gets a fresh [`InvocationState`] in a fresh store. Tensor handles
//! ([`super::handle::TensorHandle`]) live in its `ResourceTable`, so an instance can
//! only ever name its own tensors; when the store is dropped (normally or after a trap) every handle is dropped, and
//! with it the device memory and the quota reservation.

use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::artifacts::ArtifactSet;
use super::caller::CallerState;
use super::guest_cpu::GuestCpu;
use crate::scheduler::{DeviceQueue, FreeBatch, InvocationId, MemoryAccount, QueueRoom};

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

/// Refuses linear-memory growth that would take the instance's memories, all of
/// them together, past the cap, and remembers that it did, so a resulting trap can be
/// reported as "memory limit exceeded". wasmtime asks it for each memory created
/// (from 0 bytes) and each growth.
pub(crate) struct Limiter {
    pub(crate) memory_bytes: usize,
    /// Bytes of all the instance's memories now.
    used: usize,
    /// The total a refused request asked for.
    pub(crate) denied: Option<usize>,
}

impl Limiter {
    /// A limiter allowing `memory_bytes` of linear memory in all.
    pub(crate) fn new(memory_bytes: usize) -> Limiter {
        Limiter { memory_bytes, used: 0, denied: None }
    }

    /// Bytes of all the instance's linear memories now.
    pub(crate) fn used(&self) -> usize {
        self.used
    }
}

impl wasmtime::ResourceLimiter for Limiter {
    fn memory_growing(&mut self, current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        let total = (self.used - current.min(self.used)).saturating_add(desired);
        if total > self.memory_bytes {
            self.denied = Some(total);
            return Ok(false);
        }
        self.used = total;
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
    /// Its caller: where emitted chunks go, whether it has gone.
    pub(crate) caller: CallerState,
    /// When the invocation's time limit is up (checked at every epoch tick).
    pub(crate) deadline: std::time::Instant,
    /// The queue of a serving invocation (`None` for an ordinary one).
    pub(crate) serving: Option<super::serving::ServingLink>,
    /// The requests a serving invocation holds, by the id its guest's handles carry: a
    /// store that holds any is never kept warm, and dropping one answers it.
    pub(crate) served: std::collections::HashMap<u64, super::serving::ServedRequest>,
    /// The id of the next request handed to the guest.
    pub(crate) next_served: u64,
}

impl Drop for InvocationState {
    fn drop(&mut self) {
        // The tensors the guest still holds are freed together: one message to the
        // device instead of one per handle (a guest that never drops its handles ends
        // with thousands). Its resource table is dropped here, before the fields.
        let _batch = FreeBatch::open();
        drop(std::mem::take(&mut self.table));
    }
}

impl WasiView for InvocationState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::ResourceLimiter;

    #[test]
    fn the_memory_limit_applies_to_all_linear_memories_together() {
        let mut limiter = Limiter::new(4 << 20);
        // Two memories of 3 MiB each: the second would take the total past 4 MiB.
        assert!(limiter.memory_growing(0, 3 << 20, None).unwrap());
        assert!(!limiter.memory_growing(0, 3 << 20, None).unwrap(), "6 MiB in all, over the 4 MiB limit");
        assert_eq!(limiter.denied, Some(6 << 20), "the total asked for");
        // Growing the first by 1 MiB still fits.
        assert!(limiter.memory_growing(3 << 20, 4 << 20, None).unwrap());
        assert!(!limiter.memory_growing(0, 1, None).unwrap());
    }
}
