//! Element types of device tensors and their names in the Open Inference Protocol,
//! and the block-quantized weight formats (ggml's Q4_1 and Q8_0).
//!
//! A block format stores a row of elements in blocks of [`QUANT_BLOCK`] consecutive
//! elements of the last axis, each block a scale (and an offset) and packed integers.
//! Its tensors keep their logical element shape (a `[n, k]` weight is `[n, k]`, with
//! `k` a multiple of the block), and their size in bytes is their number of blocks
//! times the block's bytes ([`DType::block_bytes`]), which
//! [`crate::TensorMeta::byte_len`] computes.

use std::fmt;

/// Element type of a device tensor; mirrors the WIT `dtype` enum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F16,
    BF16,
    I32,
    I64,
    U8,
    /// ggml Q4_1: blocks of 32 elements in 20 bytes: f16 scale `d`, f16 minimum `m`,
    /// 16 bytes of 4-bit `q` (element `j` in the low nibble of byte `j`, element
    /// `j + 16` in its high nibble); element = `d * q + m`.
    Q4_1,
    /// ggml Q8_0: blocks of 32 elements in 34 bytes: f16 scale `d`, 32 signed bytes
    /// `q`; element = `d * q`.
    Q8_0,
}

/// Elements per block of the block formats (ggml's `QK4_1` and `QK8_0`).
pub const QUANT_BLOCK: usize = 32;

impl DType {
    /// Every element dtype (one value per element), in WIT order.
    pub const ALL: [DType; 6] = [DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8];

    /// The block-quantized formats, in WIT order (after [`DType::ALL`]).
    pub const QUANTIZED: [DType; 2] = [DType::Q4_1, DType::Q8_0];

    /// Bytes per element of an element dtype; for a block format, bytes per block
    /// (use [`crate::TensorMeta::byte_len`] for the size of a tensor).
    pub const fn size_of(self) -> usize {
        self.block_bytes()
    }

    /// Elements per block: [`QUANT_BLOCK`] for a block format, 1 otherwise.
    pub const fn block_len(self) -> usize {
        if self.is_quantized() { QUANT_BLOCK } else { 1 }
    }

    /// Bytes per block ([`DType::block_len`] elements).
    pub const fn block_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::I64 => 8,
            DType::U8 => 1,
            DType::Q4_1 => 20,
            DType::Q8_0 => 34,
        }
    }

    /// Whether the dtype is a floating-point type (block formats are not: only the ops
    /// that say so take them).
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// Whether the dtype is a block-quantized format.
    pub const fn is_quantized(self) -> bool {
        matches!(self, DType::Q4_1 | DType::Q8_0)
    }

    /// Lower-case name as used in WIT and messages (`f32`, `bf16`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::Q4_1 => "q4_1",
            DType::Q8_0 => "q8_0",
        }
    }

    /// The Open Inference Protocol datatype name (`FP32`, `INT64`, ...); block formats
    /// have none (they never cross the function boundary).
    pub const fn oip_name(self) -> Option<&'static str> {
        Some(match self {
            DType::F32 => "FP32",
            DType::F16 => "FP16",
            DType::BF16 => "BF16",
            DType::I32 => "INT32",
            DType::I64 => "INT64",
            DType::U8 => "UINT8",
            DType::Q4_1 | DType::Q8_0 => return None,
        })
    }

    /// Parses an Open Inference Protocol datatype name; `BYTES` is not a device dtype.
    pub fn from_oip_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.oip_name() == Some(name))
    }

    /// Parses a lower-case name (`f32`, `f16`, ...), also accepting safetensors' names.
    pub fn from_name(name: &str) -> Option<DType> {
        match name.to_ascii_lowercase().as_str() {
            "f32" | "float32" => Some(DType::F32),
            "f16" | "float16" => Some(DType::F16),
            "bf16" | "bfloat16" => Some(DType::BF16),
            "i32" | "int32" => Some(DType::I32),
            "i64" | "int64" => Some(DType::I64),
            "u8" | "uint8" => Some(DType::U8),
            "q4_1" | "q4-1" => Some(DType::Q4_1),
            "q8_0" | "q8-0" => Some(DType::Q8_0),
            _ => None,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_oip_name(d.oip_name().unwrap()), Some(d));
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        for d in DType::QUANTIZED {
            assert_eq!((d.oip_name(), DType::from_name(d.name()), d.block_len()), (None, Some(d), 32));
        }
        assert_eq!(DType::from_oip_name("BYTES"), None);
    }
}
