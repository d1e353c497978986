//! Requests and responses between the protocol's messages and [`crate::oip`]'s
//! transport-neutral [`InferRequest`] / [`InferResponse`].
//!
//! Inputs come either all as `raw_input_contents` (one entry per input, in order, in
//! the binary tensor form of [`oip::binary`]: what the standard clients send) or each
//! in its typed `contents`. Outputs always go back as `raw_output_contents`, as Triton
//! answers. Parameters (request, input and requested-output) become
//! [`oip::Parameters`]. Every malformed input becomes an [`OipError`] naming the tensor.

use prost::bytes::Bytes;

use super::proto::infer_parameter::ParameterChoice;
use super::proto::model_infer_response::InferOutputTensor;
use super::proto::{InferParameter, InferTensorContents, ModelInferRequest, ModelInferResponse};
use crate::engine::{IoData, IoTensor};
use crate::oip::{self, InferRequest, InferResponse, OipError, ParamValue, Parameters, RequestedOutput};

/// A model named in a request: its name, and its version (`None`: the serving one).
pub fn model_ref(name: &str, version: &str) -> Result<Option<u32>, tonic::Status> {
    if name.is_empty() {
        return Err(super::status::bad_request("the request needs a model name"));
    }
    if version.is_empty() {
        return Ok(None);
    }
    // As over HTTP, a version that is not a version number does not exist.
    let v = version.parse().map_err(|_| {
        super::status::status(crate::server::error::HttpError::new(
            sluice_host_api::Code::NotFound,
            format!("function {name:?} has no version {version:?}"),
        ))
    })?;
    Ok(Some(v))
}

/// The request, decoded (the model name and version are the caller's business).
pub fn decode_request(request: ModelInferRequest) -> Result<InferRequest, OipError> {
    let inputs = decode_inputs(&request)?;
    let outputs = request
        .outputs
        .into_iter()
        .map(|o| RequestedOutput { name: o.name, parameters: parameters(o.parameters) })
        .collect();
    Ok(InferRequest {
        id: Some(request.id).filter(|id| !id.is_empty()),
        inputs,
        outputs,
        parameters: parameters(request.parameters),
    })
}

/// Parameters as [`oip`] sees them; a parameter with no value set is left out.
fn parameters(map: std::collections::HashMap<String, InferParameter>) -> Parameters {
    map.into_iter()
        .filter_map(|(name, p)| {
            let value = match p.parameter_choice? {
                ParameterChoice::BoolParam(b) => ParamValue::Bool(b),
                ParameterChoice::Int64Param(i) => ParamValue::Int(i),
                ParameterChoice::Uint64Param(u) => ParamValue::Uint(u),
                ParameterChoice::DoubleParam(d) => ParamValue::Double(d),
                ParameterChoice::StringParam(s) => ParamValue::String(s),
            };
            Some((name, value))
        })
        .collect()
}

/// The request's inputs, checked against their shapes.
fn decode_inputs(request: &ModelInferRequest) -> Result<Vec<IoTensor>, OipError> {
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
                (Some(bytes), None) => oip::binary::decode(&input.datatype, count, bytes).map_err(|e| at(e.0))?,
                (None, Some(contents)) => decode_typed(&input.datatype, count, contents).map_err(at)?,
                (None, None) => decode_typed(&input.datatype, count, &InferTensorContents::default()).map_err(at)?,
            };
            Ok(IoTensor { name: input.name.clone(), shape, data })
        })
        .collect()
}

fn shape_of(dims: &[i64]) -> Result<Vec<u64>, String> {
    dims.iter().map(|&d| u64::try_from(d).map_err(|_| format!("shape {dims:?} has a negative axis"))).collect()
}

fn element_count(shape: &[u64]) -> Result<u64, String> {
    shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).ok_or_else(|| format!("shape {shape:?} is too large"))
}

/// Elements from the typed contents list of the datatype.
fn decode_typed(datatype: &str, count: u64, c: &InferTensorContents) -> Result<IoData, String> {
    fn take<S: Clone, T>(count: u64, list: &[S], field: &str, f: impl Fn(S) -> Option<T>) -> Result<Vec<T>, String> {
        if list.len() as u64 != count {
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
        // No typed list exists for these: only an empty tensor can do without raw contents.
        "FP16" | "BF16" if count == 0 => oip::binary::decode(datatype, 0, &[]).map_err(|e| e.0)?,
        "FP16" | "BF16" => {
            return Err(format!("{datatype} has no typed contents in the protocol; send it in raw_input_contents"));
        }
        // Unsupported datatypes get the binary decoder's message, which lists the supported ones.
        other => oip::binary::decode(other, count, &[]).map_err(|e| e.0)?,
    })
}

/// The response message: every selected output described, its elements in
/// `raw_output_contents`.
pub fn encode_response(response: InferResponse) -> ModelInferResponse {
    let (outputs, raw_output_contents) = response
        .outputs
        .iter()
        .map(|(t, _)| {
            let described = InferOutputTensor {
                name: t.name.clone(),
                datatype: oip::datatype_name(&t.data).to_owned(),
                shape: t.shape.iter().map(|&d| d as i64).collect(),
                ..Default::default()
            };
            let mut raw = Vec::new();
            oip::binary::encode(&t.data, &mut raw);
            (described, Bytes::from(raw))
        })
        .unzip();
    ModelInferResponse {
        model_name: response.model_name,
        model_version: response.model_version.unwrap_or_default(),
        id: response.id.unwrap_or_default(),
        outputs,
        raw_output_contents,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use half::{bf16, f16};

    use super::super::proto::model_infer_request::{InferInputTensor, InferRequestedOutputTensor};
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
        let response = InferResponse {
            model_name: "echo".into(),
            model_version: Some("3".into()),
            id: None,
            outputs: tensors.iter().map(|t| (t.clone(), Parameters::new())).collect(),
            timing: Default::default(),
        };
        let encoded = encode_response(response);
        assert_eq!((encoded.model_version.as_str(), encoded.id.as_str()), ("3", ""));
        assert_eq!(
            encoded.raw_output_contents[6].as_ref(),
            b"\x02\0\0\0hi\0\0\0\0\x03\0\0\0\xff\x00\xc3\x02\0\0\0\xc3\xa9"
        );
        let request = ModelInferRequest {
            inputs: encoded
                .outputs
                .iter()
                .map(|d| InferInputTensor {
                    name: d.name.clone(),
                    datatype: d.datatype.clone(),
                    shape: d.shape.clone(),
                    ..Default::default()
                })
                .collect(),
            raw_input_contents: encoded.raw_output_contents,
            ..Default::default()
        };
        assert_eq!(decode_request(request).unwrap().inputs, tensors);
    }

    #[test]
    fn id_outputs_and_parameters_are_carried_over() {
        let p = |c| InferParameter { parameter_choice: Some(c) };
        let request = ModelInferRequest {
            id: "r-1".into(),
            parameters: [
                ("priority".to_owned(), p(ParameterChoice::Int64Param(2))),
                ("timeout".to_owned(), p(ParameterChoice::Uint64Param(5000))),
                ("flag".to_owned(), p(ParameterChoice::BoolParam(true))),
                ("ratio".to_owned(), p(ParameterChoice::DoubleParam(0.5))),
                ("mode".to_owned(), p(ParameterChoice::StringParam("x".into()))),
                ("unset".to_owned(), InferParameter { parameter_choice: None }),
            ]
            .into(),
            outputs: vec![InferRequestedOutputTensor { name: "embedding".into(), ..Default::default() }],
            ..Default::default()
        };
        let r = decode_request(request).unwrap();
        assert_eq!(r.id.as_deref(), Some("r-1"));
        assert_eq!(r.outputs, [RequestedOutput { name: "embedding".into(), parameters: Parameters::new() }]);
        let expected: Parameters = [
            ("priority".to_owned(), ParamValue::Int(2)),
            ("timeout".to_owned(), ParamValue::Uint(5000)),
            ("flag".to_owned(), ParamValue::Bool(true)),
            ("ratio".to_owned(), ParamValue::Double(0.5)),
            ("mode".to_owned(), ParamValue::String("x".into())),
        ]
        .into();
        assert_eq!(r.parameters, expected);
        assert_eq!(decode_request(ModelInferRequest::default()).unwrap().id, None);
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
        let data: Vec<IoData> = decode_request(request).unwrap().inputs.into_iter().map(|t| t.data).collect();
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
            (raw(vec![input("x", "FP32", &[2])], vec![&[0; 4]]), "\"x\": 2 FP32 elements take 8 bytes"),
            (raw(vec![input("x", "FP32", &[1]), input("y", "FP32", &[1])], vec![&[0; 4]]), "1 entries for 2 inputs"),
            (raw(vec![input("x", "FP32", &[-1])], vec![&[]]), "negative axis"),
            (raw(vec![input("x", "FP64", &[1])], vec![&[0; 8]]), "\"FP64\" is not supported"),
            (raw(vec![input("s", "BYTES", &[1])], vec![&[1, 0]]), "need at least 1×4 bytes"),
            (raw(vec![input("s", "BYTES", &[1])], vec![&[5, 0, 0, 0, b'a']]), "length 5 runs past"),
            (raw(vec![input("s", "BYTES", &[2])], vec![&[0, 0, 0, 0]]), "need at least 2×4 bytes"),
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
            let e = decode_request(request).unwrap_err();
            assert!(e.0.contains(needle), "expected {needle:?} in {:?}", e.0);
        }
    }
}
