//! Row blocks: which ops can be computed a block of output rows at a time, and the
//! shapes involved, so a scheduler can cut one long kernel into short ones whose
//! concatenation (along [`RowSplit::axis`] of [`RowSplit::whole`]) is the whole result.
//!
//! - `matmul`: rows of the M axis, in every batch: a block of `n` rows has the output's
//!   shape with M replaced by `n`.
//! - `linear`: rows of `x` flattened to `[M, K]`: a block of `n` rows is `[n, N]`, and
//!   the blocks concatenate to `[M, N]`, the same elements as the output `[..., N]`.

use crate::{Op, TensorMeta};

/// How one op's output splits into row blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowSplit {
    /// Rows in all.
    pub rows: usize,
    /// The axis of [`RowSplit::whole`] the rows run along.
    pub axis: usize,
    /// The output as the blocks see it (same elements, same order).
    whole: TensorMeta,
}

impl RowSplit {
    /// How `op`, whose output is `out`, splits into rows; `None` if it cannot, or if it
    /// has fewer than two rows.
    pub fn of(op: &Op, out: &TensorMeta) -> Option<RowSplit> {
        let (rows, axis, whole) = match op {
            Op::Matmul(_) if out.rank() >= 2 => (out.shape[out.rank() - 2] as usize, out.rank() - 2, out.clone()),
            Op::Linear { .. } if out.rank() >= 1 => {
                let n = *out.shape.last()?;
                let rows = out.numel().checked_div(n as usize)?;
                (rows, 0, TensorMeta::new(out.dtype, vec![u32::try_from(rows).ok()?, n]).ok()?)
            }
            _ => return None,
        };
        (rows > 1).then_some(RowSplit { rows, axis, whole })
    }

    /// The output seen as the blocks' concatenation.
    pub fn whole(&self) -> &TensorMeta {
        &self.whole
    }

    /// The metadata of a block of `n` rows.
    pub fn block(&self, n: usize) -> TensorMeta {
        let mut meta = self.whole.clone();
        meta.shape[self.axis] = n as u32;
        meta
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, MatmulArgs, UnaryOp};

    fn meta(shape: &[u32]) -> TensorMeta {
        TensorMeta::new(DType::F32, shape.to_vec()).unwrap()
    }

    #[test]
    fn matmul_splits_along_m_in_every_batch() {
        let op = Op::Matmul(MatmulArgs { transpose_a: false, transpose_b: true });
        let s = RowSplit::of(&op, &meta(&[3, 10, 7])).unwrap();
        assert_eq!((s.rows, s.axis), (10, 1));
        assert_eq!(s.whole(), &meta(&[3, 10, 7]));
        assert_eq!(s.block(4), meta(&[3, 4, 7]));
        assert_eq!(RowSplit::of(&op, &meta(&[3, 1, 7])), None, "one row: nothing to split");
    }

    #[test]
    fn linear_splits_its_flattened_rows() {
        let op = Op::Linear { transpose_w: true, activation: Some(UnaryOp::Gelu) };
        let s = RowSplit::of(&op, &meta(&[2, 5, 8])).unwrap();
        assert_eq!((s.rows, s.axis), (10, 0));
        assert_eq!(s.whole(), &meta(&[10, 8]));
        assert_eq!(s.block(3), meta(&[3, 8]));
        assert_eq!(RowSplit::of(&op, &meta(&[8])), None);
        assert_eq!(RowSplit::of(&op, &meta(&[4, 0])), None, "no columns");
    }

    #[test]
    fn other_ops_do_not_split() {
        assert_eq!(RowSplit::of(&Op::Unary(UnaryOp::Exp), &meta(&[64, 64])), None);
    }
}
