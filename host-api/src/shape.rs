//! Shapes, tensor metadata and NumPy broadcasting.

use crate::{ApiError, DType, ErrorCode};

/// Dimensions of a tensor, outermost first.
pub type Shape = Vec<u32>;

/// Largest rank the host accepts.
pub const MAX_RANK: usize = 8;

/// Largest element count of one tensor the host accepts (2^32).
pub const MAX_ELEMENTS: u64 = 1 << 32;

/// What the host knows of a tensor without touching the device.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorMeta {
    pub dtype: DType,
    pub shape: Shape,
}

impl TensorMeta {
    /// Checks rank and element-count limits, and that a block format's last axis is
    /// a whole number of blocks.
    pub fn new(dtype: DType, shape: Shape) -> Result<Self, ApiError> {
        if shape.len() > MAX_RANK {
            return Err(ApiError::arg(format!("rank {} exceeds the maximum of {MAX_RANK}", shape.len())));
        }
        if dtype.is_quantized() && shape.last().is_none_or(|&d| !(d as usize).is_multiple_of(dtype.block_len())) {
            return Err(ApiError::shape(format!(
                "a {dtype} tensor needs rank ≥ 1 and a last axis that is a multiple of {}, got {shape:?}",
                dtype.block_len()
            )));
        }
        let n = shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d as u64));
        match n {
            Some(n) if n <= MAX_ELEMENTS => Ok(TensorMeta { dtype, shape }),
            _ => Err(ApiError::new(
                ErrorCode::TooLarge,
                format!("shape {shape:?} has more than {MAX_ELEMENTS} elements"),
            )),
        }
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().map(|&d| d as usize).product()
    }

    /// Size of the element data in bytes (whole blocks for a block format).
    pub fn byte_len(&self) -> usize {
        self.numel() / self.dtype.block_len() * self.dtype.block_bytes()
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }
}

/// The NumPy broadcast of two shapes, or a shape error naming both.
pub fn broadcast_shapes(a: &[u32], b: &[u32]) -> Result<Shape, ApiError> {
    let rank = a.len().max(b.len());
    let mut out = vec![0u32; rank];
    for i in 0..rank {
        let da = if i < rank - a.len() { 1 } else { a[i - (rank - a.len())] };
        let db = if i < rank - b.len() { 1 } else { b[i - (rank - b.len())] };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(ApiError::shape(format!(
                    "shapes {a:?} and {b:?} do not broadcast (axis {i}: {da} vs {db})"
                )));
            }
        };
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting_follows_numpy() {
        assert_eq!(broadcast_shapes(&[2, 3], &[3]).unwrap(), vec![2, 3]);
        assert_eq!(broadcast_shapes(&[2, 1, 4], &[3, 1]).unwrap(), vec![2, 3, 4]);
        assert_eq!(broadcast_shapes(&[], &[5]).unwrap(), vec![5]);
        assert_eq!(broadcast_shapes(&[0, 1], &[1, 7]).unwrap(), vec![0, 7]);
        let err = broadcast_shapes(&[2, 3], &[4]).unwrap_err();
        assert_eq!(err.code, ErrorCode::ShapeMismatch);
    }

    #[test]
    fn limits_are_enforced() {
        assert!(TensorMeta::new(DType::F32, vec![1; 9]).is_err());
        assert_eq!(TensorMeta::new(DType::F32, vec![1 << 20, 1 << 20]).unwrap_err().code, ErrorCode::TooLarge);
        assert_eq!(TensorMeta::new(DType::F16, vec![2, 3]).unwrap().byte_len(), 12);
        assert_eq!(TensorMeta::new(DType::Q4_1, vec![3, 64]).unwrap().byte_len(), 3 * 2 * 20);
        assert_eq!(TensorMeta::new(DType::Q8_0, vec![32]).unwrap().byte_len(), 34);
        assert_eq!(TensorMeta::new(DType::Q8_0, vec![2, 48]).unwrap_err().code, ErrorCode::ShapeMismatch);
        assert_eq!(TensorMeta::new(DType::Q4_1, vec![]).unwrap_err().code, ErrorCode::ShapeMismatch);
    }
}
