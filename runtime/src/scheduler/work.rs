//! What the scheduler queues: a unit of work ([`Work`]), its place in the queues
//! ([`Queued`]) and, for a best-effort kernel run in slices, the rows done so far
//! ([`SliceProgress`]).

use std::time::Duration;

use sluice_host_api::{Op, TensorMeta};

use super::{Reservation, TensorId};
use crate::device::Buffer;

/// One unit of queued work.
pub(crate) enum Work {
    Upload {
        id: TensorId,
        meta: TensorMeta,
        bytes: Vec<u8>,
    },
    Launch {
        id: TensorId,
        op: Op,
        inputs: Vec<(TensorId, TensorMeta)>,
        out: TensorMeta,
        /// The kernel's scratch, charged to its invocation until the item is dropped
        /// (run or cancelled).
        #[expect(dead_code, reason = "held only for its Drop, which returns the reservation")]
        scratch: Option<Reservation>,
    },
}

impl Work {
    /// The tensor the work produces.
    pub(crate) fn output(&self) -> TensorId {
        match self {
            Work::Upload { id, .. } | Work::Launch { id, .. } => *id,
        }
    }

    /// The tensors the work reads.
    pub(crate) fn inputs(&self) -> &[(TensorId, TensorMeta)] {
        match self {
            Work::Upload { .. } => &[],
            Work::Launch { inputs, .. } => inputs,
        }
    }
}

/// A queued unit of work with its arrival order and time.
pub(super) struct Queued {
    pub work: Work,
    pub seq: u64,
    /// When it was submitted, on the scheduler's clock.
    pub at: Duration,
    /// Rows of a sliced matmul already computed, with their buffers.
    pub slices: Option<SliceProgress>,
}

/// Rows of a sliced matmul or linear computed so far.
pub(super) struct SliceProgress {
    pub next_row: usize,
    pub parts: Vec<(Buffer, TensorMeta)>,
    /// Device time of the slices so far.
    pub elapsed: Duration,
}
