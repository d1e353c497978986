//! Slicing: a long best-effort matmul or linear runs as row blocks that each fit the
//! preemption budget while latency work is active, one block per scheduling step, and
//! the blocks are concatenated into the result (see `sluice_host_api::RowSplit`).
//!
//! A kernel is cut into at most [`MAX_SLICES`] blocks, whatever its estimate says: a
//! kernel never run whole (best-effort work that only ever ran beside latency work)
//! is estimated from its family's rate, which small kernels set, and for an 8192³ GEMM
//! on the H200 that was ~100× its real time. Cut to the budget, it became thousands
//! of 3-row slices that each read the whole 128 MiB weight: the best-effort tenant
//! kept 1 % of its throughput, and concatenating the parts held the scheduler for
//! tens of milliseconds. Row blocks of a 32nd of the kernel keep ≥ 80 % of a whole
//! GEMM's throughput there (DESIGN.md: M=256 of 8192). On an asynchronous device each
//! slice, scaled up by its share of the rows, also teaches the cost model the whole
//! kernel (`InFlight::add_slice`), so the next slices are cut to the budget.

use std::time::Duration;

use sluice_host_api::{ApiError, Op, RowSplit, TensorMeta};

use super::{Actor, contain};
use crate::device::Buffer;
use crate::scheduler::cost::KernelKey;
use crate::scheduler::work::SliceProgress;

/// The most row blocks one kernel is cut into.
pub(super) const MAX_SLICES: usize = 32;

impl Actor {
    /// One slice of a best-effort matmul or linear; `Some` with the whole result once
    /// the last rows are done. Without latency work active, the remaining rows run at
    /// once. On an asynchronous device each slice is work in flight, so the next one is
    /// enqueued only when the lane has room for it.
    #[allow(clippy::too_many_arguments, reason = "the kernel, its split and the slicing state")]
    pub(super) fn slice_rows(
        &mut self,
        op: &Op,
        split: &RowSplit,
        inputs: &[(&Buffer, &TensorMeta)],
        out: &TensorMeta,
        (key, estimate): (KernelKey, Duration),
        slice_now: bool,
        progress: &mut Option<SliceProgress>,
    ) -> Option<Result<Buffer, ApiError>> {
        let m = split.rows;
        let p =
            progress.get_or_insert_with(|| SliceProgress { next_row: 0, parts: Vec::new(), elapsed: Duration::ZERO });
        if p.next_row == 0 {
            self.stats.sliced_kernels += 1;
        }
        let left = m - p.next_row;
        let rows = if slice_now {
            let per_row = estimate.as_nanos() as f64 / m as f64;
            let fit = (self.config.preemption_budget.as_nanos() as f64 / per_row.max(1.0)) as usize;
            fit.max(m.div_ceil(MAX_SLICES)).clamp(1, left)
        } else {
            left
        };
        let range = p.next_row..p.next_row + rows;
        let started = self.config.clock.now();
        let Some(slicing) = self.device.rows() else {
            // The device cannot slice: run the rest whole.
            self.enqueued_slice(key, left as f64 / m as f64, estimate);
            return Some(
                contain(&self.faults, "a launch", || self.device.launch(op, inputs, out)).map_err(ApiError::from),
            );
        };
        match contain(&self.faults, "a row slice", || slicing.launch_rows(op, inputs, out, range)) {
            Err(e) => return Some(Err(e.into())),
            Ok(b) => p.parts.push((b, split.block(rows))),
        }
        self.enqueued_slice(key, rows as f64 / m as f64, estimate);
        p.next_row += rows;
        if p.next_row < m {
            p.elapsed += self.config.clock.now().saturating_sub(started);
            return None;
        }
        let parts = std::mem::take(&mut p.parts);
        if parts.len() == 1 {
            return parts.into_iter().next().map(|(b, _)| Ok(b));
        }
        // The blocks concatenate to the output seen as rows (the same elements).
        let refs: Vec<(&Buffer, &TensorMeta)> = parts.iter().map(|(b, m)| (b, m)).collect();
        let concat = Op::Concat { axis: split.axis as u32 };
        Some(
            contain(&self.faults, "a launch", || self.device.launch(&concat, &refs, split.whole()))
                .map_err(ApiError::from),
        )
    }

    /// Counts a slice just enqueued on an asynchronous device, `share` of kernel `key`
    /// (estimated at `estimate` whole), as work in flight on the current lane.
    fn enqueued_slice(&mut self, key: KernelKey, share: f64, estimate: Duration) {
        if self.asynchronous {
            let now = self.now();
            self.inflight[self.lane.index()].add_slice(key, share, estimate.mul_f64(share), now);
        }
    }
}
