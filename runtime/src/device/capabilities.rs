//! What only some devices can do, as small traits reached from [`Device`]'s accessors
//! (`rows()`, `timing()`, `lanes()`; as wasmtime's wasi-nn reaches optional backend
//! capabilities), and the typed state of a device's spatial partition.
//!
//! [`Device`]: super::Device

use std::fmt;
use std::ops::Range;
use std::time::Duration;

use sluice_host_api::{Op, TensorMeta};

use super::{Buffer, DeviceError, Lane};

/// Running part of a kernel: output rows of a matmul or a linear, so the scheduler can
/// slice a long best-effort kernel into pieces that fit its preemption budget.
pub trait RowSlicing {
    /// Output rows `rows` of `op` (see [`sluice_host_api::RowSplit`] for what a row is
    /// and the block's metadata), whose whole output is `out`.
    fn launch_rows(
        &self,
        op: &Op,
        inputs: &[(&Buffer, &TensorMeta)],
        out: &TensorMeta,
        rows: Range<usize>,
    ) -> Result<Buffer, DeviceError>;
}

/// The device time of one launched op, as the device measured it (GPU events).
pub trait KernelClock: Send {
    /// The op's device time, or `None` while it has not finished. Never waits.
    fn elapsed(&self) -> Result<Option<Duration>, DeviceError>;
}

/// An output buffer with the device's clock of the op that produced it.
pub type TimedLaunch = (Buffer, Box<dyn KernelClock>);

/// Timing kernels with the device's own clock, for an asynchronous device whose
/// launches return before the kernel ran.
pub trait KernelTiming {
    /// [`Device::launch`](super::Device::launch), timed by the device itself.
    fn launch_timed(
        &self,
        op: &Op,
        inputs: &[(&Buffer, &TensorMeta)],
        out: &TensorMeta,
    ) -> Result<TimedLaunch, DeviceError>;
}

/// The lanes of a device with an active spatial partition (CUDA green contexts).
pub trait Lanes {
    /// Directs later uploads, launches and downloads to `lane`. The device keeps
    /// results correct across lanes (a kernel waits for inputs produced on another
    /// lane); the scheduler decides which lane serves which class.
    fn set_lane(&self, lane: Lane);

    /// Waits until every kernel enqueued on `lane` has finished.
    fn synchronize_lane(&self, lane: Lane) -> Result<(), DeviceError>;

    /// Whether every kernel enqueued on `lane` has finished, without waiting.
    fn lane_idle(&self, lane: Lane) -> Result<bool, DeviceError>;
}

/// Whether (and how) a device's compute units are partitioned between the classes.
///
/// Serialised (in `/v1/status`) as its one-line description, e.g. "none: the CPU
/// backend has no spatial partitions (…)" or "reserved 16 of 132 SMs for latency work,
/// 116 for the rest".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PartitionState {
    /// No partition, by design or by configuration: why.
    None { reason: String },
    /// A partition was asked for but could not be built: why.
    Unavailable { reason: String },
    /// Latency work has its own compute units.
    Active {
        /// Compute units of the [`Lane::Reserved`] partition.
        reserved_sms: u32,
        /// Compute units of the [`Lane::Remainder`] partition.
        remainder_sms: u32,
        /// Compute units of the device ([`Lane::Whole`]).
        total_sms: u32,
    },
}

impl PartitionState {
    /// Whether latency work runs on its own partition.
    pub fn is_active(&self) -> bool {
        matches!(self, PartitionState::Active { .. })
    }
}

impl fmt::Display for PartitionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PartitionState::None { reason } => write!(f, "none: {reason}"),
            PartitionState::Unavailable { reason } => {
                write!(f, "unavailable: {reason}; priorities and preemption only")
            }
            PartitionState::Active { reserved_sms, remainder_sms, total_sms } => {
                write!(f, "reserved {reserved_sms} of {total_sms} SMs for latency work, {remainder_sms} for the rest")
            }
        }
    }
}

impl serde::Serialize for PartitionState {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_states_read_as_before() {
        let none = PartitionState::None { reason: "not requested (reserved SMs = 0)".into() };
        assert_eq!(none.to_string(), "none: not requested (reserved SMs = 0)");
        let active = PartitionState::Active { reserved_sms: 16, remainder_sms: 116, total_sms: 132 };
        assert_eq!(active.to_string(), "reserved 16 of 132 SMs for latency work, 116 for the rest");
        assert_eq!(serde_json::to_value(&active).unwrap(), serde_json::json!(active.to_string()));
        assert!(active.is_active() && !none.is_active());
    }
}
