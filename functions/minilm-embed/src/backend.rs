//! The handful of tensor operations the BERT forward pass needs, as a trait.
//!
//! In the function they are host calls through `sluice_guest::Tensor` (see `guest.rs`);
//! in native tests a naive CPU implementation (`cpu_ref.rs`) runs the very same model
//! code against the reference embeddings. Every method maps onto one op of the WIT
//! catalog (`ops` or `fused`), so the trait adds no behaviour of its own.

/// Compute precision: the dtype weights are loaded as and activations run in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// IEEE binary32 (the default; matches the reference to ~1e-6).
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    Bf16,
}

impl Precision {
    /// Parses `"f32"`, `"f16"`/`"fp16"` or `"bf16"` (case-insensitive).
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "fp32" | "float32" => Some(Self::F32),
            "f16" | "fp16" | "float16" => Some(Self::F16),
            "bf16" | "bfloat16" => Some(Self::Bf16),
            _ => None,
        }
    }
}

/// A device tensor with the ops of the catalog that BERT uses.
pub trait Tensor: Sized {
    /// The error of a refused or failed op.
    type Error;
    /// A dense layer with PyTorch's `[out, in]` weight: `self · weightᵀ + bias` over the
    /// last axis, then exact GELU if `gelu` (the fused `linear`).
    fn linear(&self, weight: &Self, bias: &Self, gelu: bool) -> Result<Self, Self::Error>;
    /// Layer norm over the last axis of `self + residual` (the fused `add-layer-norm`).
    fn add_layer_norm(&self, residual: &Self, gamma: &Self, beta: &Self, eps: f32) -> Result<Self, Self::Error>;
    /// Multi-head attention on `[n, s, heads * d]` q, k, v with an additive mask that
    /// broadcasts to the scores `[n, heads, s, s]` (the fused `attention`).
    fn attention(q: &Self, k: &Self, v: &Self, mask: &Self, heads: u32, scale: f32) -> Result<Self, Self::Error>;
    /// Broadcasting `self + rhs`.
    fn add(&self, rhs: &Self) -> Result<Self, Self::Error>;
    /// Broadcasting `self * rhs`.
    fn mul(&self, rhs: &Self) -> Result<Self, Self::Error>;
    /// Broadcasting `self / rhs`.
    fn div(&self, rhs: &Self) -> Result<Self, Self::Error>;
    /// Broadcasting `max(self, rhs)`.
    fn maximum(&self, rhs: &Self) -> Result<Self, Self::Error>;
    /// Elementwise square root.
    fn sqrt(&self) -> Result<Self, Self::Error>;
    /// Layer norm over the last axis.
    fn layer_norm(&self, gamma: &Self, beta: &Self, eps: f32) -> Result<Self, Self::Error>;
    /// Sum over `axis`.
    fn sum(&self, axis: u32, keep_dim: bool) -> Result<Self, Self::Error>;
    /// Elements `start..end` of `axis`.
    fn slice(&self, axis: u32, start: u32, end: u32) -> Result<Self, Self::Error>;
    /// Converts to the floating dtype of `precision`.
    fn cast(&self, precision: Precision) -> Result<Self, Self::Error>;
    /// Row gather: `table[ids]`, shape `ids.shape ++ [d]`.
    fn embedding(table: &Self, ids: &Self) -> Result<Self, Self::Error>;
}

/// Where tensors come from and go to: weights, uploads and the final read-back.
pub trait Device {
    /// The tensor type of this device.
    type Tensor: Tensor<Error = Self::Error>;
    /// The error of a refused or failed call.
    type Error;
    /// Loads weight `name` of the model artifact, converted to `precision`.
    fn load(&self, name: &str, precision: Precision) -> Result<Self::Tensor, Self::Error>;
    /// Uploads an f32 tensor.
    fn upload_f32(&self, shape: &[u32], data: &[f32]) -> Result<Self::Tensor, Self::Error>;
    /// Uploads an i32 tensor.
    fn upload_i32(&self, shape: &[u32], data: &[i32]) -> Result<Self::Tensor, Self::Error>;
    /// Waits for an f32 tensor and returns its elements.
    fn read_f32(&self, t: &Self::Tensor) -> Result<Vec<f32>, Self::Error>;
}

#[cfg(test)]
mod tests {
    use super::Precision;

    #[test]
    fn parses_precisions() {
        assert_eq!(Precision::parse("f32"), Some(Precision::F32));
        assert_eq!(Precision::parse(" FP16 "), Some(Precision::F16));
        assert_eq!(Precision::parse("bf16"), Some(Precision::Bf16));
        assert_eq!(Precision::parse("int8"), None);
    }
}
