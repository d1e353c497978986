//! Planted bugs in the backend's own GEMM planning (matmul, row blocks, the fused
//! attention and linear), lane ordering and staged uploads: issue 11's mutation
//! check, the backend half (`tests/fake_mutations.rs` plants the kernel, cuBLAS-call and
//! stream bugs in copies of the sources). Test builds only: each hook is a
//! `#[cfg(test)]` statement at the place the bug would be, and [`plant`] switches one
//! [`Mutant`] on for the calling thread (the device runs an op on the thread that calls
//! it), so other tests running at the same time see the unmodified backend.
//!
//! `mutants/tests.rs` runs each mutant on the fake CUDA device (`cargo xtask
//! test-cuda-fake`) and shows it caught: a wrong result against the CPU backend or an
//! error (the fake cuBLAS refuses an operand outside its allocation).

use std::cell::Cell;

/// One planted bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mutant {
    /// `GemmCall::row_major` gives cuBLAS's A (our B) the leading dimension of the other
    /// storage layout (n for a transposed B, k for a plain one).
    LdaOfTheOtherLayout,
    /// `MatmulPlan::rows_call` starts op(A)'s rows one row late.
    RowsOffsetOneRowLate,
    /// `MatmulPlan::rows_call` gives A the leading dimension of the row block instead of
    /// the whole matrix's.
    RowsLdOfTheBlock,
    /// `MatmulPlan::call` strides over a shared (broadcast) operand as if it were dense.
    SharedOperandStrided,
    /// `MatmulPlan::new` folds the batch into m even when A is transposed.
    FoldTransposedA,
    /// `Lanes::order_after` queues no wait: a lane reads another lane's buffer without
    /// waiting for its production.
    NoCrossLaneWait,
    /// `CudaDevice::prepare` does not note a cross-lane use: a buffer goes back to the
    /// pool while another lane's reader has not run.
    NoCrossLaneUseNote,
    /// `CudaDevice::after_staged` queues no wait: a kernel reads a staged upload before
    /// its copy ran.
    StagedReadWithoutWait,
    /// The stager copies into a reused block without waiting for the uploading lane's
    /// earlier work, which may still read it.
    StagedCopyNotOrdered,
    /// `AttentionDims::pointer_table` points every head's query at the first head's.
    AttentionQueryOfTheFirstHead,
    /// `linear_rows` starts x's rows one row late.
    LinearRowsOneRowLate,
}

impl Mutant {
    pub(crate) const ALL: [Mutant; 11] = [
        Mutant::LdaOfTheOtherLayout,
        Mutant::RowsOffsetOneRowLate,
        Mutant::RowsLdOfTheBlock,
        Mutant::SharedOperandStrided,
        Mutant::FoldTransposedA,
        Mutant::NoCrossLaneWait,
        Mutant::NoCrossLaneUseNote,
        Mutant::StagedReadWithoutWait,
        Mutant::StagedCopyNotOrdered,
        Mutant::AttentionQueryOfTheFirstHead,
        Mutant::LinearRowsOneRowLate,
    ];
}

thread_local! {
    static PLANTED: Cell<Option<Mutant>> = const { Cell::new(None) };
}

/// Whether `m` is planted on this thread.
pub(crate) fn planted(m: Mutant) -> bool {
    PLANTED.with(|p| p.get() == Some(m))
}

/// Keeps a mutant planted on this thread until dropped.
pub(crate) struct Planted(());

impl Drop for Planted {
    fn drop(&mut self) {
        PLANTED.with(|p| p.set(None));
    }
}

/// Plants `m` on this thread (one at a time).
pub(crate) fn plant(m: Mutant) -> Planted {
    PLANTED.with(|p| p.set(Some(m)));
    Planted(())
}

mod tests;
