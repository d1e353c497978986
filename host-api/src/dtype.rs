//! Element types of device tensors and their names in the Open Inference Protocol.

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
}

impl DType {
    /// Every dtype, in WIT order.
    pub const ALL: [DType; 6] = [DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8];

    /// Bytes per element.
    pub const fn size_of(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::I64 => 8,
            DType::U8 => 1,
        }
    }

    /// Whether the dtype is a floating-point type.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
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
        }
    }

    /// The Open Inference Protocol datatype name (`FP32`, `INT64`, ...).
    pub const fn oip_name(self) -> &'static str {
        match self {
            DType::F32 => "FP32",
            DType::F16 => "FP16",
            DType::BF16 => "BF16",
            DType::I32 => "INT32",
            DType::I64 => "INT64",
            DType::U8 => "UINT8",
        }
    }

    /// Parses an Open Inference Protocol datatype name; `BYTES` is not a device dtype.
    pub fn from_oip_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.oip_name() == name)
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
            assert_eq!(DType::from_oip_name(d.oip_name()), Some(d));
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        assert_eq!(DType::from_oip_name("BYTES"), None);
    }
}
