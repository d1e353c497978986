//! Scratch memory: the device memory an op takes besides its output (issue 11, defect 5).
//!
//! Some ops allocate temporaries from the pool while they are queued: attention its
//! scores and probabilities (and, over several batch elements, its GEMM pointer table),
//! kv-attention its table of spans and rows, a matmul the broadcast copy of a partially
//! broadcast operand, a quantized linear its Q8 activations, a convolution its im2col
//! buffer, an integer division or an embedding its 16-byte fault record (which stays
//! with the output's lineage). [`scratch_bytes`] says how much, in the pool's block
//! sizes, from the op and the shapes alone, so the host can charge it to the
//! invocation's quota before anything is queued; `tests/conformance/defects.rs` checks
//! it against the pool's peak for every op that takes scratch.

use sluice_host_api::{BinaryOp, Op, TensorMeta};

use crate::alloc::bucket_size;
use crate::gemm::{MatmulPlan, Operand};
use crate::ops::conv::images_per_chunk;
use crate::ops::fused::AttentionDims;
use crate::ops::kv::kv_table_bytes;
use crate::{CudaDevice, MemoryStats};

/// Bytes of the fault record an op allocates.
const FAULT_RECORD: usize = 16;

/// Device memory `op` over `inputs` (as `infer` accepted them, producing `out`) takes
/// besides its output, in the caching allocator's block sizes.
pub fn scratch_bytes(op: &Op, inputs: &[&TensorMeta], out: &TensorMeta) -> u64 {
    let block = |bytes: u64| bucket_size(bytes as usize) as u64;
    // Its cache writes run (and take the table) even when the output is empty.
    if let (Op::KvAttention(args), &[_, k, ..]) = (op, inputs) {
        return block(kv_table_bytes(args, k));
    }
    if out.numel() == 0 {
        return 0;
    }
    let es = out.dtype.size_of() as u64;
    match (op, inputs) {
        (Op::Matmul(args), &[a, b]) => {
            let plan = MatmulPlan::new(args, a, b);
            if plan.k == 0 {
                return 0;
            }
            let copy = |o: &Operand| match o {
                Operand::Materialize(full) => block(full.iter().map(|&d| d as u64).product::<u64>() * es),
                _ => 0,
            };
            copy(&plan.a) + copy(&plan.b)
        }
        (Op::Attention { heads, .. }, &[q, k, ..]) => {
            let dims = AttentionDims::new(q, k, *heads);
            if dims.sk == 0 {
                return 0;
            }
            let scores: u64 = dims.scores_shape().iter().map(|&d| d as u64).product::<u64>() * es;
            let table = if dims.b > 1 { block(6 * dims.b * dims.heads * 8) } else { 0 };
            2 * block(scores) + table
        }
        (Op::Conv2d(args), &[x, w, ..]) => {
            let n = x.shape[0] as u64;
            let kg = w.shape[1] as u64 * w.shape[2] as u64 * w.shape[3] as u64;
            if kg == 0 {
                return 0;
            }
            let per_image = args.groups as u64 * kg * out.shape[2] as u64 * out.shape[3] as u64;
            block(images_per_chunk(n, per_image * es) * per_image * es)
        }
        // A quantized linear's activations as their Q8 blocks stand for (f32, x's size).
        (Op::Linear { .. }, &[x, w, ..]) if w.dtype.is_quantized() => block(x.numel() as u64 * 4),
        (Op::Binary(BinaryOp::Div), &[a, _]) if !a.dtype.is_float() => block(FAULT_RECORD as u64),
        (Op::Embedding, _) => block(FAULT_RECORD as u64),
        _ => 0,
    }
}

impl CudaDevice {
    /// Restarts [`MemoryStats::peak_in_use`] from what is in use now; returns the stats
    /// before the restart.
    pub fn reset_memory_peak(&self) -> MemoryStats {
        self.pool.reset_peak()
    }
}
