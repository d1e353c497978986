//! [`Tensor`]: a handle to a device-resident tensor, its constructors (uploads) and
//! read-backs. The ops live in `ops.rs`.

use std::fmt;

use crate::bindings::sluice::gpu::tensors::Tensor as RawTensor;
use crate::convert;
use crate::{DType, Error, ErrorCode, Result};

/// A tensor resident on the host's device: typed, shaped, row-major.
///
/// The guest only holds a handle. Ops on it ([`Tensor::matmul`], [`Tensor::relu`], …)
/// launch asynchronously and return the output handle at once; only the `read`/`to_*`
/// methods wait for the device. Dropping a `Tensor` frees its device memory once no
/// pending op uses it.
pub struct Tensor {
    raw: RawTensor,
}

impl Tensor {
    /// Wraps a raw generated handle (e.g. from [`crate::bindings`] calls).
    pub fn from_raw(raw: RawTensor) -> Tensor {
        Tensor { raw }
    }

    /// The raw generated handle, for calls into [`crate::bindings`].
    pub fn as_raw(&self) -> &RawTensor {
        &self.raw
    }

    /// Unwraps the raw generated handle.
    pub fn into_raw(self) -> RawTensor {
        self.raw
    }

    /// Uploads little-endian element bytes: `bytes.len()` must be
    /// `product(shape) * dtype.size_of()` (for a block format, its blocks:
    /// `product(shape) / 32` blocks of `dtype.block_bytes()`).
    pub fn from_bytes(dtype: DType, shape: &[u32], bytes: &[u8]) -> Result<Tensor> {
        Ok(Tensor::from_raw(RawTensor::from_bytes(dtype.into(), shape, bytes)?))
    }

    /// Uploads an f32 tensor.
    pub fn from_f32(shape: &[u32], data: &[f32]) -> Result<Tensor> {
        Ok(Tensor::from_raw(RawTensor::from_f32(shape, data)?))
    }

    /// Uploads an i32 tensor.
    pub fn from_i32(shape: &[u32], data: &[i32]) -> Result<Tensor> {
        Ok(Tensor::from_raw(RawTensor::from_i32(shape, data)?))
    }

    /// Uploads an i64 tensor.
    pub fn from_i64(shape: &[u32], data: &[i64]) -> Result<Tensor> {
        Tensor::from_bytes(DType::I64, shape, &convert::i64_le(data))
    }

    /// Uploads a u8 tensor.
    pub fn from_u8(shape: &[u32], data: &[u8]) -> Result<Tensor> {
        Tensor::from_bytes(DType::U8, shape, data)
    }

    /// Uploads an f16 tensor from raw IEEE 754 binary16 bit patterns.
    pub fn from_f16_bits(shape: &[u32], bits: &[u16]) -> Result<Tensor> {
        Tensor::from_bytes(DType::F16, shape, &convert::u16_le(bits))
    }

    /// Uploads a bf16 tensor from raw bfloat16 bit patterns.
    pub fn from_bf16_bits(shape: &[u32], bits: &[u16]) -> Result<Tensor> {
        Tensor::from_bytes(DType::BF16, shape, &convert::u16_le(bits))
    }

    /// A tensor of zeros (all-zero bits are zero in every dtype). One of a plain dtype
    /// is made on the device (the host's `tensor.zeros`) and is the kind of tensor
    /// [`Tensor::write_rows`] may change, e.g. a KV cache; one of a block format is an
    /// upload of zero blocks.
    pub fn zeros(dtype: DType, shape: &[u32]) -> Result<Tensor> {
        if !dtype.is_quantized() {
            return Ok(Tensor::from_raw(RawTensor::zeros(dtype.into(), shape)?));
        }
        let n = checked_numel(shape)?;
        let bytes = (n / dtype.block_len()).checked_mul(dtype.block_bytes()).ok_or_else(too_large)?;
        Tensor::from_bytes(dtype, shape, &vec![0u8; bytes])
    }

    /// An f32 tensor with every element equal to `value`.
    pub fn full_f32(shape: &[u32], value: f32) -> Result<Tensor> {
        Tensor::from_f32(shape, &vec![value; checked_numel(shape)?])
    }

    /// A rank-0 f32 tensor (broadcasts against anything in binary ops).
    pub fn scalar_f32(value: f32) -> Result<Tensor> {
        Tensor::from_f32(&[], &[value])
    }

    /// Writes `src` in place into rows `offset .. offset + src.shape[0]` of this
    /// tensor's first axis (a tensor made by [`Tensor::zeros`]), queued in launch order
    /// with the other ops: how a KV cache `[ctx, kv-heads, d]` grows by a step's
    /// positions without copying what it holds. `src` has this tensor's dtype and its
    /// other axes.
    pub fn write_rows(&self, offset: u32, src: &Tensor) -> Result<()> {
        Ok(self.raw.write_rows(offset, &src.raw)?)
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.raw.dtype().into()
    }

    /// The dimensions, outermost first (empty for a scalar).
    pub fn shape(&self) -> Vec<u32> {
        self.raw.shape()
    }

    /// The number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape().len()
    }

    /// The number of elements.
    pub fn numel(&self) -> u64 {
        self.shape().iter().map(|&d| u64::from(d)).product()
    }

    /// Waits for the ops producing this tensor and returns its little-endian bytes.
    pub fn read_bytes(&self) -> Result<Vec<u8>> {
        Ok(self.raw.read()?)
    }

    /// Reads the elements as f32, converting f16, bf16 and integers (`as f32`; a
    /// block-quantized tensor is dequantized on the device first).
    pub fn to_vec_f32(&self) -> Result<Vec<f32>> {
        if self.dtype().is_quantized() {
            return self.cast(DType::F32)?.to_vec_f32();
        }
        let b = self.read_bytes()?;
        Ok(match self.dtype() {
            DType::F32 => convert::from_le(&b, f32::from_le_bytes),
            DType::F16 => convert::from_le(&b, |c| convert::f16_bits_to_f32(u16::from_le_bytes(c))),
            DType::BF16 => convert::from_le(&b, |c| convert::bf16_bits_to_f32(u16::from_le_bytes(c))),
            DType::I32 => convert::from_le(&b, |c| i32::from_le_bytes(c) as f32),
            DType::I64 => convert::from_le(&b, |c| i64::from_le_bytes(c) as f32),
            DType::U8 => b.iter().map(|&x| f32::from(x)).collect(),
            DType::Q4_1 | DType::Q8_0 => unreachable!("dequantized above"),
        })
    }

    /// Reads the elements of an integer tensor as i64 (exact); floating dtypes are a
    /// `dtype-mismatch` error (use [`Tensor::cast`] first to truncate on the device).
    pub fn to_vec_i64(&self) -> Result<Vec<i64>> {
        let dtype = self.dtype();
        let b = self.read_bytes()?;
        match dtype {
            DType::I64 => Ok(convert::from_le(&b, i64::from_le_bytes)),
            DType::I32 => Ok(convert::from_le(&b, |c| i64::from(i32::from_le_bytes(c)))),
            DType::U8 => Ok(b.iter().map(|&x| i64::from(x)).collect()),
            _ => Err(not_integer(dtype)),
        }
    }

    /// Reads the elements of an i32 tensor; other dtypes are a `dtype-mismatch` error.
    pub fn to_vec_i32(&self) -> Result<Vec<i32>> {
        self.read_exact(DType::I32, i32::from_le_bytes)
    }

    /// Reads the elements of a u8 tensor; other dtypes are a `dtype-mismatch` error.
    pub fn to_vec_u8(&self) -> Result<Vec<u8>> {
        self.expect_dtype(DType::U8)?;
        self.read_bytes()
    }

    /// Reads the raw bit patterns of an f16 or bf16 tensor.
    pub fn to_vec_u16_bits(&self) -> Result<Vec<u16>> {
        match self.dtype() {
            DType::F16 | DType::BF16 => Ok(convert::from_le(&self.read_bytes()?, u16::from_le_bytes)),
            d => Err(Error::new(ErrorCode::DtypeMismatch, format!("expected an f16 or bf16 tensor, got {d}"))),
        }
    }

    /// Reads a single-element tensor as f32.
    pub fn to_scalar_f32(&self) -> Result<f32> {
        let v = self.to_vec_f32()?;
        match v.as_slice() {
            [x] => Ok(*x),
            _ => Err(Error::new(ErrorCode::ShapeMismatch, format!("expected one element, tensor has {}", v.len()))),
        }
    }

    /// Fails with `dtype-mismatch` unless the tensor has dtype `want`.
    pub fn expect_dtype(&self, want: DType) -> Result<()> {
        let got = self.dtype();
        if got == want {
            Ok(())
        } else {
            Err(Error::new(ErrorCode::DtypeMismatch, format!("expected a {want} tensor, got {got}")))
        }
    }

    fn read_exact<const N: usize, T>(&self, dtype: DType, f: impl Fn([u8; N]) -> T) -> Result<Vec<T>> {
        self.expect_dtype(dtype)?;
        Ok(convert::from_le(&self.read_bytes()?, f))
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor({} {:?}, handle {})", self.dtype(), self.shape(), self.raw.handle())
    }
}

/// Element count of `shape`, as usize, or a `too-large` error on overflow.
pub(crate) fn checked_numel(shape: &[u32]) -> Result<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d as usize)).ok_or_else(too_large)
}

fn too_large() -> Error {
    Error::new(ErrorCode::TooLarge, "tensor size overflows the guest's address space")
}

fn not_integer(dtype: DType) -> Error {
    Error::new(ErrorCode::DtypeMismatch, format!("expected an integer tensor, got {dtype}"))
}
