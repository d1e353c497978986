//! Tensors between the protocol's messages and the engine's [`IoTensor`]s.
//!
//! Inputs come either all as `raw_input_contents` (one entry per input, in order: the
//! elements little-endian, BYTES elements each behind a 4-byte little-endian length;
//! what the standard clients send) or each in its typed `contents`. Outputs always go
//! back as `raw_output_contents`, as Triton answers. Every malformed input becomes an
//! [`OipError`] that names the tensor.

use prost::bytes::Bytes;

use super::proto::model_infer_response::InferOutputTensor;
use super::proto::{InferTensorContents, ModelInferRequest};
use crate::engine::{IoData, IoTensor};
use crate::oip::{OipError, datatype_name};

/// The datatypes sluice's tensors have.
const SUPPORTED: &str = "FP32, FP16, BF16, INT32, INT64, UINT8 or BYTES";

/// The request's inputs, checked against their shapes.
pub fn decode_inputs(request: &ModelInferRequest) -> Result<Vec<IoTensor>, OipError> {
    let raw = &request.raw_input_contents;
    if !raw.is_empty() && raw.len() != request.inputs.len() {
        return Err(OipError(format!(
            "raw_input_contents has {} entries for {} inputs (one per input, in order)",
            raw.len(),
            request.inputs.len()
        )));
    }
    request
        .inputs
        .iter()
        .enumerate()
        .map(|(i, input)| {
            let at = |msg: String| OipError(format!("input {:?}: {msg}", input.name));
            if input.name.is_empty() {
                return Err(OipError(format!("inputs[{i}] needs a name")));
            }
            let shape = shape_of(&input.shape).map_err(at)?;
            let count = element_count(&shape).map_err(at)?;
            let data = match (raw.get(i), &input.contents) {
                (Some(_), Some(_)) => return Err(at("has both contents and raw_input_contents".into())),
                (Some(bytes), None) => decode_raw(&input.datatype, count, bytes),
                (None, Some(contents)) => decode_typed(&input.datatype, count, contents),
                (None, None) => decode_typed(&input.datatype, count, &InferTensorContents::default()),
            }
            .map_err(at)?;
            Ok(IoTensor { name: input.name.clone(), shape, data })
        })
        .collect()
}

fn shape_of(dims: &[i64]) -> Result<Vec<u64>, String> {
    dims.iter().map(|&d| u64::try_from(d).map_err(|_| format!("shape {dims:?} has a negative axis"))).collect()
}

fn element_count(shape: &[u64]) -> Result<usize, String> {
    shape
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| format!("shape {shape:?} is too large"))
}

/// Elements from their little-endian bytes.
fn decode_raw(datatype: &str, count: usize, bytes: &Bytes) -> Result<IoData, String> {
    fn fixed<const N: usize, T>(
        count: usize,
        bytes: &[u8],
        kind: &str,
        f: impl Fn([u8; N]) -> T,
    ) -> Result<Vec<T>, String> {
        if count.checked_mul(N) != Some(bytes.len()) {
            return Err(format!(
                "{count} {kind} elements need {} bytes of raw contents, got {}",
                count.saturating_mul(N),
                bytes.len()
            ));
        }
        Ok(bytes.chunks_exact(N).map(|c| f(c.try_into().expect("chunks of N bytes"))).collect())
    }
    Ok(match datatype {
        "FP32" => IoData::F32(fixed(count, bytes, datatype, f32::from_le_bytes)?),
        "FP16" => IoData::F16(fixed(count, bytes, datatype, u16::from_le_bytes)?),
        "BF16" => IoData::Bf16(fixed(count, bytes, datatype, u16::from_le_bytes)?),
        "INT32" => IoData::I32(fixed(count, bytes, datatype, i32::from_le_bytes)?),
        "INT64" => IoData::I64(fixed(count, bytes, datatype, i64::from_le_bytes)?),
        "UINT8" => IoData::U8(fixed(count, bytes, datatype, u8::from_le_bytes)?),
        "BYTES" => IoData::Bytes(decode_byte_elements(count, bytes)?),
        other => return Err(unsupported(other)),
    })
}

/// BYTES elements, each behind its 4-byte little-endian length.
fn decode_byte_elements(count: usize, mut bytes: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let mut elements = Vec::with_capacity(count.min(bytes.len() / 4));
    while !bytes.is_empty() {
        let Some((len, rest)) = bytes.split_first_chunk::<4>() else {
            return Err(format!("BYTES element {} has a truncated 4-byte length", elements.len()));
        };
        let len = u32::from_le_bytes(*len) as usize;
        let Some((element, rest)) = rest.split_at_checked(len) else {
            return Err(format!("BYTES element {} declares {len} bytes, {} remain", elements.len(), rest.len()));
        };
        elements.push(element.to_vec());
        bytes = rest;
    }
    if elements.len() != count {
        return Err(format!("the shape needs {count} BYTES elements, raw contents hold {}", elements.len()));
    }
    Ok(elements)
}

/// Elements from the typed contents list of the datatype.
fn decode_typed(datatype: &str, count: usize, c: &InferTensorContents) -> Result<IoData, String> {
    fn take<S: Clone, T>(count: usize, list: &[S], field: &str, f: impl Fn(S) -> Option<T>) -> Result<Vec<T>, String> {
        if list.len() != count {
            return Err(format!("the shape needs {count} elements, contents.{field} has {}", list.len()));
        }
        list.iter()
            .enumerate()
            .map(|(i, v)| f(v.clone()).ok_or_else(|| format!("contents.{field}[{i}] is out of range")))
            .collect()
    }
    Ok(match datatype {
        "FP32" => IoData::F32(take(count, &c.fp32_contents, "fp32_contents", Some)?),
        "INT32" => IoData::I32(take(count, &c.int_contents, "int_contents", Some)?),
        "INT64" => IoData::I64(take(count, &c.int64_contents, "int64_contents", Some)?),
        "UINT8" => IoData::U8(take(count, &c.uint_contents, "uint_contents", |v| u8::try_from(v).ok())?),
        "BYTES" => IoData::Bytes(take(count, &c.bytes_contents, "bytes_contents", Some)?),
        "FP16" | "BF16" if count == 0 => decode_raw(datatype, 0, &Bytes::new())?,
        "FP16" | "BF16" => {
            return Err(format!("{datatype} has no typed contents in the protocol; send it in raw_input_contents"));
        }
        other => return Err(unsupported(other)),
    })
}

fn unsupported(datatype: &str) -> String {
    format!("datatype {datatype:?} is not supported (use {SUPPORTED})")
}

/// The outputs' descriptions and their raw contents, in the same order.
pub fn encode_outputs(outputs: &[IoTensor]) -> (Vec<InferOutputTensor>, Vec<Bytes>) {
    outputs
        .iter()
        .map(|t| {
            let described = InferOutputTensor {
                name: t.name.clone(),
                datatype: datatype_name(&t.data).to_owned(),
                shape: t.shape.iter().map(|&d| d as i64).collect(),
                ..Default::default()
            };
            (described, Bytes::from(encode_raw(&t.data)))
        })
        .unzip()
}

/// A tensor's elements as raw contents.
pub fn encode_raw(data: &IoData) -> Vec<u8> {
    fn le<const N: usize, T: Copy>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
        let mut out = Vec::with_capacity(v.len() * N);
        v.iter().for_each(|&x| out.extend_from_slice(&f(x)));
        out
    }
    match data {
        IoData::F32(v) => le(v, f32::to_le_bytes),
        IoData::F16(v) | IoData::Bf16(v) => le(v, u16::to_le_bytes),
        IoData::I32(v) => le(v, i32::to_le_bytes),
        IoData::I64(v) => le(v, i64::to_le_bytes),
        IoData::U8(v) => v.clone(),
        IoData::Bytes(v) => {
            let mut out = Vec::with_capacity(v.iter().map(|e| e.len() + 4).sum());
            for e in v {
                out.extend_from_slice(&(e.len() as u32).to_le_bytes());
                out.extend_from_slice(e);
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use half::{bf16, f16};

    use super::super::proto::model_infer_request::InferInputTensor;
    use super::*;

    fn input(name: &str, datatype: &str, shape: &[i64]) -> InferInputTensor {
        InferInputTensor { name: name.into(), datatype: datatype.into(), shape: shape.to_vec(), ..Default::default() }
    }

    fn every_datatype() -> Vec<IoTensor> {
        let t = |name: &str, shape: &[u64], data| IoTensor { name: name.into(), shape: shape.to_vec(), data };
        vec![
            t("f32", &[2, 2], IoData::F32(vec![1.5, -0.0, f32::MAX, f32::MIN_POSITIVE])),
            t("f16", &[2], IoData::F16(vec![f16::from_f32(0.5).to_bits(), f16::from_f32(-65504.0).to_bits()])),
            t("bf16", &[3], IoData::Bf16([1.0f32, -2.5, 1e30].map(|x| bf16::from_f32(x).to_bits()).to_vec())),
            t("i32", &[2], IoData::I32(vec![i32::MIN, 7])),
            t("i64", &[1, 2], IoData::I64(vec![i64::MAX, -1])),
            t("u8", &[3], IoData::U8(vec![0, 128, 255])),
            t("bytes", &[4], IoData::Bytes(vec![b"hi".to_vec(), vec![], vec![0xff, 0x00, 0xc3], "é".into()])),
            t("empty", &[0, 3], IoData::F32(vec![])),
        ]
    }

    #[test]
    fn raw_contents_round_trip_every_datatype() {
        let tensors = every_datatype();
        let (described, raw) = encode_outputs(&tensors);
        let request = ModelInferRequest {
            inputs: described
                .iter()
                .map(|d| InferInputTensor {
                    name: d.name.clone(),
                    datatype: d.datatype.clone(),
                    shape: d.shape.clone(),
                    ..Default::default()
                })
                .collect(),
            raw_input_contents: raw,
            ..Default::default()
        };
        assert_eq!(decode_inputs(&request).unwrap(), tensors);
    }

    #[test]
    fn bytes_elements_are_length_prefixed_little_endian() {
        let raw = encode_raw(&IoData::Bytes(vec![b"ab".to_vec(), vec![]]));
        assert_eq!(raw, [2, 0, 0, 0, b'a', b'b', 0, 0, 0, 0]);
        assert_eq!(encode_raw(&IoData::I32(vec![1, -2])), [1, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff]);
    }

    #[test]
    fn typed_contents_decode_per_datatype() {
        let mut request = ModelInferRequest::default();
        let typed = |mut i: InferInputTensor, c: InferTensorContents| {
            i.contents = Some(c);
            i
        };
        request.inputs = vec![
            typed(
                input("a", "FP32", &[2]),
                InferTensorContents { fp32_contents: vec![1.0, 2.0], ..Default::default() },
            ),
            typed(input("b", "INT32", &[1]), InferTensorContents { int_contents: vec![-3], ..Default::default() }),
            typed(
                input("c", "INT64", &[1]),
                InferTensorContents { int64_contents: vec![1 << 40], ..Default::default() },
            ),
            typed(input("d", "UINT8", &[2]), InferTensorContents { uint_contents: vec![0, 255], ..Default::default() }),
            typed(
                input("e", "BYTES", &[2]),
                InferTensorContents { bytes_contents: vec![vec![0xfe], vec![]], ..Default::default() },
            ),
        ];
        let data: Vec<IoData> = decode_inputs(&request).unwrap().into_iter().map(|t| t.data).collect();
        assert_eq!(
            data,
            [
                IoData::F32(vec![1.0, 2.0]),
                IoData::I32(vec![-3]),
                IoData::I64(vec![1 << 40]),
                IoData::U8(vec![0, 255]),
                IoData::Bytes(vec![vec![0xfe], vec![]]),
            ]
        );
    }

    #[test]
    fn malformed_inputs_are_refused_with_the_tensor_named() {
        let raw = |inputs: Vec<InferInputTensor>, raw: Vec<&[u8]>| ModelInferRequest {
            inputs,
            raw_input_contents: raw.into_iter().map(Bytes::copy_from_slice).collect(),
            ..Default::default()
        };
        let mut both = raw(vec![input("x", "FP32", &[1])], vec![&[0; 4]]);
        both.inputs[0].contents = Some(InferTensorContents { fp32_contents: vec![1.0], ..Default::default() });
        let mut big_u8 = ModelInferRequest { inputs: vec![input("x", "UINT8", &[1])], ..Default::default() };
        big_u8.inputs[0].contents = Some(InferTensorContents { uint_contents: vec![256], ..Default::default() });
        let cases = [
            (raw(vec![input("x", "FP32", &[2])], vec![&[0; 4]]), "\"x\": 2 FP32 elements need 8 bytes"),
            (raw(vec![input("x", "FP32", &[1]), input("y", "FP32", &[1])], vec![&[0; 4]]), "1 entries for 2 inputs"),
            (raw(vec![input("x", "FP32", &[-1])], vec![&[]]), "negative axis"),
            (raw(vec![input("x", "FP64", &[1])], vec![&[0; 8]]), "\"FP64\" is not supported"),
            (raw(vec![input("s", "BYTES", &[1])], vec![&[1, 0]]), "truncated 4-byte length"),
            (raw(vec![input("s", "BYTES", &[1])], vec![&[5, 0, 0, 0, b'a']]), "declares 5 bytes, 1 remain"),
            (raw(vec![input("s", "BYTES", &[2])], vec![&[0, 0, 0, 0]]), "needs 2 BYTES elements, raw contents hold 1"),
            (raw(vec![input("", "FP32", &[0])], vec![&[]]), "inputs[0] needs a name"),
            (raw(vec![input("x", "FP32", &[1 << 40, 1 << 40])], vec![&[]]), "too large"),
            (
                ModelInferRequest { inputs: vec![input("x", "FP32", &[3])], ..Default::default() },
                "contents.fp32_contents has 0",
            ),
            (ModelInferRequest { inputs: vec![input("h", "FP16", &[1])], ..Default::default() }, "raw_input_contents"),
            (both, "both contents and raw_input_contents"),
            (big_u8, "uint_contents[0] is out of range"),
        ];
        for (request, needle) in cases {
            let e = decode_inputs(&request).unwrap_err();
            assert!(e.0.contains(needle), "expected {needle:?} in {:?}", e.0);
        }
    }
}
