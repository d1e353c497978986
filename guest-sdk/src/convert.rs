//! Conversions done in the guest: between the generated WIT types and the host API's
//! (shared with the host through [`sluice_host_api::wit_conversions!`]), little-endian
//! byte packing for uploads and read-backs, and f16/bf16 bit patterns to f32 (no `half`
//! dependency).

// `From` between the generated WIT types and the host API's (dtype, op enums, error
// codes and records): the same code the host's engine uses, written once in host-api.
sluice_host_api::wit_conversions!(crate::bindings::sluice::gpu);

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
    use crate::bindings::sluice::gpu::ops::UnaryOp as WitUnaryOp;
    use crate::bindings::sluice::gpu::types::{Dtype, ErrorCode as WitErrorCode};
    use crate::{DType, ErrorCode, UnaryOp};

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
            assert_eq!(WitUnaryOp::from(u) as usize, i, "{u:?}");
        }
    }

    #[test]
    fn dtypes_and_codes_map_both_ways() {
        for (i, d) in DType::ALL.into_iter().chain(DType::QUANTIZED).enumerate() {
            assert_eq!(Dtype::from(d) as usize, i, "{d:?}");
            assert_eq!(DType::from(Dtype::from(d)), d);
        }
        assert_eq!(ErrorCode::from(WitErrorCode::QuotaExceeded), ErrorCode::QuotaExceeded);
    }

    #[test]
    fn generate_reads_host_apis_wit() {
        // `generate!` (src/bindings.rs) needs a literal path; it must name host-api's WIT.
        let ours = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../host-api/wit");
        let theirs = std::path::Path::new(sluice_host_api::WIT_DIR);
        assert_eq!(ours.canonicalize().unwrap(), theirs.canonicalize().unwrap());
        assert!(include_str!("bindings.rs").contains("path: \"../host-api/wit\","));
    }
}
