//! The binary tensor data extension: tensor elements as raw bytes after the JSON.
//!
//! A tensor's binary form is its elements in row-major order, little-endian, at their
//! native size, with no padding (FP16 and BF16 as their 2-byte patterns); a `BYTES`
//! element is a 4-byte little-endian length followed by that many bytes. Over HTTP the
//! body is the JSON object followed by the binary data of each binary tensor in the
//! order the JSON lists them; `Inference-Header-Content-Length` gives the JSON's length
//! and each tensor's `binary_data_size` parameter its byte count ([`super::json`] reads
//! and writes those). Decoding goes straight from the body into the tensor's buffer.

use super::{OipError, err};
use crate::engine::IoData;

/// The extension's name in server metadata.
pub const EXTENSION: &str = "binary_tensor_data";

/// Decodes `count` elements of `datatype` from exactly `bytes`.
pub fn decode(datatype: &str, count: u64, bytes: &[u8]) -> Result<IoData, OipError> {
    fn fixed<const N: usize, T>(
        datatype: &str,
        count: u64,
        bytes: &[u8],
        f: impl Fn([u8; N]) -> T,
    ) -> Result<Vec<T>, OipError> {
        let needed = count.checked_mul(N as u64);
        if needed != Some(bytes.len() as u64) {
            return err(format!(
                "{count} {datatype} elements take {} bytes, binary_data_size is {}",
                needed.map_or("too many".into(), |n| n.to_string()),
                bytes.len()
            ));
        }
        Ok(bytes.chunks_exact(N).map(|c| f(c.try_into().expect("chunks of N bytes"))).collect())
    }
    Ok(match datatype {
        "FP32" => IoData::F32(fixed(datatype, count, bytes, f32::from_le_bytes)?),
        "FP16" => IoData::F16(fixed(datatype, count, bytes, u16::from_le_bytes)?),
        "BF16" => IoData::Bf16(fixed(datatype, count, bytes, u16::from_le_bytes)?),
        "INT32" => IoData::I32(fixed(datatype, count, bytes, i32::from_le_bytes)?),
        "INT64" => IoData::I64(fixed(datatype, count, bytes, i64::from_le_bytes)?),
        "UINT8" => IoData::U8(fixed(datatype, count, bytes, |[b]: [u8; 1]| b)?),
        "BYTES" => IoData::Bytes(decode_bytes(count, bytes)?),
        other => {
            return err(format!(
                "datatype {other:?} is not supported (use FP32, FP16, BF16, INT32, INT64, UINT8 or BYTES)"
            ));
        }
    })
}

/// `count` length-prefixed elements filling exactly `bytes`.
fn decode_bytes(count: u64, mut bytes: &[u8]) -> Result<Vec<Vec<u8>>, OipError> {
    // Each element needs at least its 4-byte length: bounds the allocation by the body.
    if count > bytes.len() as u64 / 4 {
        return err(format!(
            "{count} BYTES elements need at least {count}×4 bytes, binary_data_size is {}",
            bytes.len()
        ));
    }
    let mut elements = Vec::with_capacity(count as usize);
    for i in 0..count {
        let Some((len, rest)) = bytes.split_first_chunk::<4>() else {
            return err(format!("BYTES element {i}: its 4-byte length is cut off"));
        };
        let len = u32::from_le_bytes(*len) as usize;
        if len > rest.len() {
            return err(format!(
                "BYTES element {i}: length {len} runs past the tensor's {} remaining bytes",
                rest.len()
            ));
        }
        let (element, rest) = rest.split_at(len);
        elements.push(element.to_vec());
        bytes = rest;
    }
    if !bytes.is_empty() {
        return err(format!("{} bytes follow the last of the {count} BYTES elements", bytes.len()));
    }
    Ok(elements)
}

/// Appends `data`'s binary form to `out`; returns its length.
pub fn encode(data: &IoData, out: &mut Vec<u8>) -> usize {
    let start = out.len();
    match data {
        IoData::F32(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        IoData::F16(v) | IoData::Bf16(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        IoData::I32(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        IoData::I64(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        IoData::U8(v) => out.extend_from_slice(v),
        IoData::Bytes(v) => v.iter().for_each(|b| {
            // Elements come from the guest, whose outputs are bounded far below 4 GiB.
            out.extend_from_slice(&u32::try_from(b.len()).unwrap_or(u32::MAX).to_le_bytes());
            out.extend_from_slice(b);
        }),
    }
    out.len() - start
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_datatype() {
        let cases = [
            ("FP32", IoData::F32(vec![1.5, -0.0, f32::MAX])),
            ("FP16", IoData::F16(vec![0x3c00, 0xffff])),
            ("BF16", IoData::Bf16(vec![0x3f80])),
            ("INT32", IoData::I32(vec![i32::MIN, 7])),
            ("INT64", IoData::I64(vec![i64::MAX, -1, 0])),
            ("UINT8", IoData::U8(vec![0, 255])),
            ("BYTES", IoData::Bytes(vec![b"".to_vec(), vec![0xff, 0x00, 0xc3], b"hi".to_vec()])),
        ];
        for (datatype, data) in cases {
            let mut out = vec![9];
            let n = encode(&data, &mut out);
            assert_eq!(n, out.len() - 1);
            let count = crate::engine::element_count(&data);
            assert_eq!(decode(datatype, count as u64, &out[1..]).unwrap(), data, "{datatype}");
        }
    }

    #[test]
    fn bytes_elements_are_length_prefixed_little_endian() {
        let mut out = Vec::new();
        encode(&IoData::Bytes(vec![b"ab".to_vec(), Vec::new()]), &mut out);
        assert_eq!(out, [2, 0, 0, 0, b'a', b'b', 0, 0, 0, 0]);
        assert_eq!(decode("FP32", 1, &1.0f32.to_le_bytes()).unwrap(), IoData::F32(vec![1.0]));
        assert_eq!(decode("INT32", 1, &[1, 0, 0, 0]).unwrap(), IoData::I32(vec![1]));
    }

    #[test]
    fn refuses_sizes_that_do_not_match() {
        let cases: &[(&str, u64, &[u8], &str)] = &[
            ("FP32", 2, &[0; 7], "2 FP32 elements take 8 bytes, binary_data_size is 7"),
            ("INT64", 1, &[0; 16], "take 8 bytes"),
            ("UINT8", 3, &[1, 2], "3 UINT8 elements take 3 bytes, binary_data_size is 2"),
            ("FP32", u64::MAX, &[0; 4], "take too many bytes"),
            ("BYTES", 2, &[1, 0, 0, 0, b'a'], "need at least 2×4 bytes"),
            ("BYTES", 1, &[5, 0, 0, 0, b'a'], "length 5 runs past"),
            ("BYTES", 2, &[1, 0, 0, 0, b'a', 0, 0, 0], "length is cut off"),
            ("BYTES", 1, &[0, 0, 0, 0, 1], "1 bytes follow"),
            ("BOOL", 1, &[1], "not supported"),
        ];
        for (datatype, count, bytes, needle) in cases {
            let e = decode(datatype, *count, bytes).unwrap_err();
            assert!(e.0.contains(needle), "{datatype} {count} {bytes:?}: {e}");
        }
    }
}
