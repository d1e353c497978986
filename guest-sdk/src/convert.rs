//! Element conversions done in the guest: little-endian byte packing for uploads and
//! read-backs, and f16/bf16 bit patterns to f32 (no `half` dependency).

use crate::bindings::sluice::gpu::ops::UnaryOp as WitUnaryOp;
use crate::bindings::sluice::gpu::types::Dtype;
use crate::{DType, UnaryOp};

/// Maps the shared [`DType`] onto the generated WIT enum.
pub(crate) fn dtype_to_wit(d: DType) -> Dtype {
    match d {
        DType::F32 => Dtype::F32,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::Bf16,
        DType::I32 => Dtype::I32,
        DType::I64 => Dtype::I64,
        DType::U8 => Dtype::U8,
    }
}

/// Maps the shared [`UnaryOp`] (an activation of [`crate::Tensor::linear`]) onto the
/// generated WIT enum.
pub(crate) fn unary_to_wit(u: UnaryOp) -> WitUnaryOp {
    match u {
        UnaryOp::Relu => WitUnaryOp::Relu,
        UnaryOp::Gelu => WitUnaryOp::Gelu,
        UnaryOp::GeluTanh => WitUnaryOp::GeluTanh,
        UnaryOp::Tanh => WitUnaryOp::Tanh,
        UnaryOp::Sigmoid => WitUnaryOp::Sigmoid,
        UnaryOp::Exp => WitUnaryOp::Exp,
        UnaryOp::Log => WitUnaryOp::Log,
        UnaryOp::Sqrt => WitUnaryOp::Sqrt,
        UnaryOp::Rsqrt => WitUnaryOp::Rsqrt,
        UnaryOp::Neg => WitUnaryOp::Neg,
        UnaryOp::Abs => WitUnaryOp::Abs,
    }
}

/// Maps the generated WIT enum onto the shared [`DType`].
pub(crate) fn dtype_from_wit(d: Dtype) -> DType {
    match d {
        Dtype::F32 => DType::F32,
        Dtype::F16 => DType::F16,
        Dtype::Bf16 => DType::BF16,
        Dtype::I32 => DType::I32,
        Dtype::I64 => DType::I64,
        Dtype::U8 => DType::U8,
    }
}

/// Converts IEEE 754 binary16 bits to f32 exactly (subnormals, infinities and NaN included).
pub fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, _) => {
            // Subnormal: value = man * 2^-24, exact in f32.
            let v = man as f32 * f32::from_bits(0x3380_0000); // 2^-24
            return if sign != 0 { -v } else { v };
        }
        (0x1f, 0) => sign | 0x7f80_0000,
        (0x1f, _) => sign | 0x7fc0_0000 | (man << 13),
        _ => sign | ((exp + 112) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

/// Converts bfloat16 bits to f32 exactly.
pub fn bf16_bits_to_f32(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// Packs 16-bit values as little-endian bytes.
pub(crate) fn u16_le(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Packs 64-bit integers as little-endian bytes.
pub(crate) fn i64_le(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Unpacks little-endian bytes into `N`-byte chunks mapped by `f`.
pub(crate) fn from_le<const N: usize, T>(bytes: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
    bytes.chunks_exact(N).map(|c| f(c.try_into().expect("chunks_exact yields N bytes"))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_values() {
        assert_eq!(f16_bits_to_f32(0x3c00), 1.0);
        assert_eq!(f16_bits_to_f32(0xc000), -2.0);
        assert_eq!(f16_bits_to_f32(0x7bff), 65504.0);
        assert_eq!(f16_bits_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_bits_to_f32(0x7c00), f32::INFINITY);
        assert!(f16_bits_to_f32(0x7e00).is_nan());
        assert_eq!(bf16_bits_to_f32(0x3f80), 1.0);
    }

    #[test]
    fn activations_map_in_wit_order() {
        for (i, u) in UnaryOp::ALL.into_iter().enumerate() {
            assert_eq!(unary_to_wit(u) as usize, i, "{u:?}");
        }
    }
}
