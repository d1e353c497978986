//! The [`Tensor`]/[`Device`] traits over the guest SDK: every method is one host call
//! (`sluice_guest::Tensor` op, `artifacts::load_tensor`, `Tensor::read`).

use sluice_guest::{DType, Error, UnaryOp, artifacts};

use crate::backend::{Device, Precision, Tensor};

/// The SDK's dtype for a compute precision.
pub fn dtype(p: Precision) -> DType {
    match p {
        Precision::F32 => DType::F32,
        Precision::F16 => DType::F16,
        Precision::Bf16 => DType::BF16,
    }
}

impl Tensor for sluice_guest::Tensor {
    type Error = Error;

    fn linear(&self, weight: &Self, bias: &Self, gelu: bool) -> Result<Self, Error> {
        sluice_guest::Tensor::linear(self, weight, Some(bias), true, gelu.then_some(UnaryOp::Gelu))
    }
    fn add_layer_norm(&self, residual: &Self, gamma: &Self, beta: &Self, eps: f32) -> Result<Self, Error> {
        sluice_guest::Tensor::add_layer_norm(self, residual, gamma, beta, eps)
    }
    fn attention(q: &Self, k: &Self, v: &Self, mask: &Self, heads: u32, scale: f32) -> Result<Self, Error> {
        sluice_guest::Tensor::attention(q, k, v, Some(mask), heads, scale)
    }
    fn add(&self, rhs: &Self) -> Result<Self, Error> {
        sluice_guest::Tensor::add(self, rhs)
    }
    fn mul(&self, rhs: &Self) -> Result<Self, Error> {
        sluice_guest::Tensor::mul(self, rhs)
    }
    fn div(&self, rhs: &Self) -> Result<Self, Error> {
        sluice_guest::Tensor::div(self, rhs)
    }
    fn maximum(&self, rhs: &Self) -> Result<Self, Error> {
        sluice_guest::Tensor::maximum(self, rhs)
    }
    fn sqrt(&self) -> Result<Self, Error> {
        sluice_guest::Tensor::sqrt(self)
    }
    fn layer_norm(&self, gamma: &Self, beta: &Self, eps: f32) -> Result<Self, Error> {
        sluice_guest::Tensor::layer_norm(self, gamma, beta, eps)
    }
    fn sum(&self, axis: u32, keep_dim: bool) -> Result<Self, Error> {
        sluice_guest::Tensor::sum(self, axis, keep_dim)
    }
    fn slice(&self, axis: u32, start: u32, end: u32) -> Result<Self, Error> {
        sluice_guest::Tensor::slice(self, axis, start, end)
    }
    fn cast(&self, precision: Precision) -> Result<Self, Error> {
        sluice_guest::Tensor::cast(self, dtype(precision))
    }
    fn embedding(table: &Self, ids: &Self) -> Result<Self, Error> {
        sluice_guest::Tensor::embedding(table, ids)
    }
}

/// The host device, with weights from one safetensors artifact.
pub struct Host {
    /// The artifact holding the weights (`model`).
    pub weights: &'static str,
}

impl Device for Host {
    type Tensor = sluice_guest::Tensor;
    type Error = Error;

    fn load(&self, name: &str, precision: Precision) -> Result<Self::Tensor, Error> {
        // f32 is how the weights are stored: no conversion asked for.
        let as_dtype = (precision != Precision::F32).then(|| dtype(precision));
        artifacts::load_tensor(self.weights, name, as_dtype)
            .map_err(|e| e.context(format!("weight `{name}` of artifact `{}`", self.weights)))
    }
    fn upload_f32(&self, shape: &[u32], data: &[f32]) -> Result<Self::Tensor, Error> {
        sluice_guest::Tensor::from_f32(shape, data)
    }
    fn upload_i32(&self, shape: &[u32], data: &[i32]) -> Result<Self::Tensor, Error> {
        sluice_guest::Tensor::from_i32(shape, data)
    }
    fn read_f32(&self, t: &Self::Tensor) -> Result<Vec<f32>, Error> {
        t.to_vec_f32()
    }
}
