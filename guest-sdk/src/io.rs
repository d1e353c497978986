//! Tensors crossing the function boundary: [`IoTensor`] constructors and typed
//! accessors, the [`Inputs`] wrapper, and conversions to and from device [`Tensor`]s.
//!
//! Every accessor error is `invalid-input` and names the tensor, because a wrong
//! request tensor is the caller's fault.

pub use crate::bindings::sluice::gpu::io::{IoData, IoTensor, RunError};
use crate::convert;
use crate::{DType, Error, Result, Tensor};

impl IoData {
    /// The device dtype of these elements; `None` for BYTES.
    pub fn dtype(&self) -> Option<DType> {
        match self {
            IoData::F32(_) => Some(DType::F32),
            IoData::F16(_) => Some(DType::F16),
            IoData::Bf16(_) => Some(DType::BF16),
            IoData::I32(_) => Some(DType::I32),
            IoData::I64(_) => Some(DType::I64),
            IoData::U8(_) => Some(DType::U8),
            IoData::Bytes(_) => None,
        }
    }

    /// The Open Inference Protocol datatype name (`FP32`, …, `BYTES`).
    pub fn datatype(&self) -> &'static str {
        self.dtype().and_then(DType::oip_name).unwrap_or("BYTES")
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            IoData::F32(v) => v.len(),
            IoData::F16(v) | IoData::Bf16(v) => v.len(),
            IoData::I32(v) => v.len(),
            IoData::I64(v) => v.len(),
            IoData::U8(v) => v.len(),
            IoData::Bytes(v) => v.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

macro_rules! accessor {
    ($(#[$doc:meta])* $name:ident, $variant:ident, $t:ty) => {
        $(#[$doc])*
        pub fn $name(&self) -> Result<&[$t]> {
            match &self.data {
                IoData::$variant(v) => Ok(v),
                other => Err(self.wrong_type(stringify!($variant), other)),
            }
        }
    };
}

impl IoTensor {
    /// A tensor with the given name, shape and elements.
    pub fn new(name: impl Into<String>, shape: &[u64], data: IoData) -> IoTensor {
        IoTensor { name: name.into(), shape: shape.to_vec(), data }
    }

    /// An FP32 tensor.
    pub fn f32(name: impl Into<String>, shape: &[u64], data: Vec<f32>) -> IoTensor {
        IoTensor::new(name, shape, IoData::F32(data))
    }

    /// An FP16 tensor from raw binary16 bit patterns.
    pub fn f16_bits(name: impl Into<String>, shape: &[u64], bits: Vec<u16>) -> IoTensor {
        IoTensor::new(name, shape, IoData::F16(bits))
    }

    /// A BF16 tensor from raw bfloat16 bit patterns.
    pub fn bf16_bits(name: impl Into<String>, shape: &[u64], bits: Vec<u16>) -> IoTensor {
        IoTensor::new(name, shape, IoData::Bf16(bits))
    }

    /// An INT32 tensor.
    pub fn i32(name: impl Into<String>, shape: &[u64], data: Vec<i32>) -> IoTensor {
        IoTensor::new(name, shape, IoData::I32(data))
    }

    /// An INT64 tensor.
    pub fn i64(name: impl Into<String>, shape: &[u64], data: Vec<i64>) -> IoTensor {
        IoTensor::new(name, shape, IoData::I64(data))
    }

    /// A UINT8 tensor.
    pub fn u8(name: impl Into<String>, shape: &[u64], data: Vec<u8>) -> IoTensor {
        IoTensor::new(name, shape, IoData::U8(data))
    }

    /// A BYTES tensor: one byte string per element.
    pub fn bytes(name: impl Into<String>, shape: &[u64], data: Vec<Vec<u8>>) -> IoTensor {
        IoTensor::new(name, shape, IoData::Bytes(data))
    }

    /// A 1-D BYTES tensor of UTF-8 strings.
    pub fn text<S: AsRef<str>>(name: impl Into<String>, strings: &[S]) -> IoTensor {
        let data: Vec<Vec<u8>> = strings.iter().map(|s| s.as_ref().as_bytes().to_vec()).collect();
        IoTensor::bytes(name, &[data.len() as u64], data)
    }

    /// The device dtype of the elements; `None` for BYTES.
    pub fn dtype(&self) -> Option<DType> {
        self.data.dtype()
    }

    /// The number of elements the shape says (`None` on overflow).
    pub fn numel(&self) -> Option<u64> {
        self.shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
    }

    /// Fails with `invalid-input` unless the element count matches the shape.
    pub fn check(&self) -> Result<()> {
        if self.numel() == Some(self.data.len() as u64) {
            Ok(())
        } else {
            Err(Error::invalid_input(format!(
                "tensor `{}`: shape {:?} does not match its {} elements",
                self.name,
                self.shape,
                self.data.len()
            )))
        }
    }

    /// Fails with `invalid-input` unless the shape matches `pattern`, where `None`
    /// accepts any size: `expect_shape(&[None, Some(16)])` accepts `[n, 16]`.
    pub fn expect_shape(&self, pattern: &[Option<u64>]) -> Result<()> {
        let ok =
            self.shape.len() == pattern.len() && self.shape.iter().zip(pattern).all(|(&d, p)| p.is_none_or(|p| p == d));
        if ok {
            return Ok(());
        }
        let want: Vec<String> = pattern.iter().map(|p| p.map_or_else(|| "?".to_string(), |d| d.to_string())).collect();
        Err(Error::invalid_input(format!(
            "tensor `{}`: expected shape [{}], got {:?}",
            self.name,
            want.join(", "),
            self.shape
        )))
    }

    accessor!(
        /// The FP32 elements, or `invalid-input` for another datatype.
        as_f32, F32, f32
    );
    accessor!(
        /// The INT32 elements, or `invalid-input` for another datatype.
        as_i32, I32, i32
    );
    accessor!(
        /// The INT64 elements, or `invalid-input` for another datatype.
        as_i64, I64, i64
    );
    accessor!(
        /// The UINT8 elements, or `invalid-input` for another datatype.
        as_u8, U8, u8
    );
    accessor!(
        /// The BYTES elements, or `invalid-input` for another datatype.
        as_bytes, Bytes, Vec<u8>
    );

    /// The BYTES elements as UTF-8 strings, or `invalid-input`.
    pub fn as_strings(&self) -> Result<Vec<&str>> {
        self.as_bytes()?
            .iter()
            .map(|b| {
                std::str::from_utf8(b)
                    .map_err(|e| Error::invalid_input(format!("tensor `{}`: not UTF-8: {e}", self.name)))
            })
            .collect()
    }

    /// Uploads the elements as a device tensor of the same dtype and shape.
    /// BYTES, a shape that does not match the elements, or a dimension over
    /// `u32::MAX` is `invalid-input`.
    pub fn to_tensor(&self) -> Result<Tensor> {
        self.check()?;
        let shape = self
            .shape
            .iter()
            .map(|&d| u32::try_from(d))
            .collect::<core::result::Result<Vec<u32>, _>>()
            .map_err(|_| Error::invalid_input(format!("tensor `{}`: dimension over u32::MAX", self.name)))?;
        let uploaded = match &self.data {
            IoData::F32(v) => Tensor::from_f32(&shape, v),
            IoData::F16(v) => Tensor::from_f16_bits(&shape, v),
            IoData::Bf16(v) => Tensor::from_bf16_bits(&shape, v),
            IoData::I32(v) => Tensor::from_i32(&shape, v),
            IoData::I64(v) => Tensor::from_i64(&shape, v),
            IoData::U8(v) => Tensor::from_u8(&shape, v),
            IoData::Bytes(_) => {
                return Err(Error::invalid_input(format!(
                    "tensor `{}`: BYTES cannot be uploaded as a device tensor",
                    self.name
                )));
            }
        };
        uploaded.map_err(|e| e.context(format!("uploading `{}`", self.name)))
    }

    fn wrong_type(&self, want: &str, got: &IoData) -> Error {
        Error::invalid_input(format!(
            "tensor `{}`: expected {}, got {}",
            self.name,
            oip_of_variant(want),
            got.datatype()
        ))
    }
}

fn oip_of_variant(variant: &str) -> &'static str {
    match variant {
        "F32" => "FP32",
        "I32" => "INT32",
        "I64" => "INT64",
        "U8" => "UINT8",
        _ => "BYTES",
    }
}

impl Tensor {
    /// Reads this tensor back as an output named `name`, keeping dtype and shape (a
    /// block-quantized tensor is dequantized to f32 on the device first).
    pub fn to_io(&self, name: impl Into<String>) -> Result<IoTensor> {
        if self.dtype().is_quantized() {
            return self.cast(DType::F32)?.to_io(name);
        }
        let shape: Vec<u64> = self.shape().iter().map(|&d| u64::from(d)).collect();
        let bytes = self.read_bytes()?;
        let data = match self.dtype() {
            DType::F32 => IoData::F32(convert::from_le(&bytes, f32::from_le_bytes)),
            DType::F16 => IoData::F16(convert::from_le(&bytes, u16::from_le_bytes)),
            DType::BF16 => IoData::Bf16(convert::from_le(&bytes, u16::from_le_bytes)),
            DType::I32 => IoData::I32(convert::from_le(&bytes, i32::from_le_bytes)),
            DType::I64 => IoData::I64(convert::from_le(&bytes, i64::from_le_bytes)),
            DType::U8 => IoData::U8(bytes),
            DType::Q4_1 | DType::Q8_0 => unreachable!("dequantized above"),
        };
        Ok(IoTensor::new(name, &shape, data))
    }
}

/// The named inputs of one invocation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Inputs {
    tensors: Vec<IoTensor>,
}

impl Inputs {
    /// Wraps the inputs as received.
    pub fn new(tensors: Vec<IoTensor>) -> Inputs {
        Inputs { tensors }
    }

    /// The input named `name`; a missing one is `invalid-input` naming it and the
    /// inputs present.
    pub fn get(&self, name: &str) -> Result<&IoTensor> {
        self.tensors.iter().find(|t| t.name == name).ok_or_else(|| self.missing(name))
    }

    /// Removes and returns the input named `name` (no copy); missing is `invalid-input`.
    pub fn take(&mut self, name: &str) -> Result<IoTensor> {
        match self.tensors.iter().position(|t| t.name == name) {
            Some(i) => Ok(self.tensors.remove(i)),
            None => Err(self.missing(name)),
        }
    }

    /// The input named `name`, if present.
    pub fn find(&self, name: &str) -> Option<&IoTensor> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The names of the inputs, in request order.
    pub fn names(&self) -> Vec<&str> {
        self.tensors.iter().map(|t| t.name.as_str()).collect()
    }

    /// The inputs, in request order.
    pub fn iter(&self) -> std::slice::Iter<'_, IoTensor> {
        self.tensors.iter()
    }

    /// The number of inputs.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether there are no inputs.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// The inputs as a vector, in request order.
    pub fn into_vec(self) -> Vec<IoTensor> {
        self.tensors
    }

    fn missing(&self, name: &str) -> Error {
        Error::invalid_input(format!("missing input `{name}`; inputs present: {:?}", self.names()))
    }
}

impl From<Vec<IoTensor>> for Inputs {
    fn from(tensors: Vec<IoTensor>) -> Inputs {
        Inputs::new(tensors)
    }
}

impl IntoIterator for Inputs {
    type Item = IoTensor;
    type IntoIter = std::vec::IntoIter<IoTensor>;

    fn into_iter(self) -> Self::IntoIter {
        self.tensors.into_iter()
    }
}

impl<'a> IntoIterator for &'a Inputs {
    type Item = &'a IoTensor;
    type IntoIter = std::slice::Iter<'a, IoTensor>;

    fn into_iter(self) -> Self::IntoIter {
        self.tensors.iter()
    }
}
