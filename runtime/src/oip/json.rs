//! The Open Inference Protocol's JSON tensor format.
//!
//! Requests carry `{"id"?, "parameters"?, "inputs": [{"name", "shape", "datatype",
//! "parameters"?, "data"}], "outputs"?: [{"name", "parameters"?}]}`; data may be flat
//! (row-major) or nested, numbers for numeric types and strings for `BYTES`. Responses
//! carry `{"model_name", "model_version", "id"?, "outputs": [...]}`.
//!
//! JSON has no NaN or infinities, so floating outputs carry them as the strings `"NaN"`,
//! `"Infinity"` and `"-Infinity"` (protobuf's JSON mapping, which the KServe v2 gRPC
//! clients' JSON transcoding also uses), and inputs accept the same strings. A number
//! outside the datatype's finite range (FP32 `1e39`) is refused, not rounded to
//! infinity. Shapes have at most [`sluice_host_api::MAX_RANK`] dimensions.
//!
//! Neither direction builds a `serde_json::Value` of the tensors: requests are read
//! straight into typed buffers ([`super::json_request`], which also says before decoding
//! how much memory decoding takes), responses serialised straight from them
//! ([`DataJson`]), with a bound on their size known before encoding
//! ([`encoded_bytes_bound`]).

use half::{bf16, f16};
use serde::ser::SerializeSeq;
use serde::{Serialize, Serializer};
use serde_json::{Map, Value, json};

use super::BINARY_DATA_SIZE;
use super::{InferRequest, InferResponse, OipError, ParamValue, Parameters, binary, datatype_name, err};

/// A requested output's parameter: return it as binary data.
pub const BINARY_DATA: &str = "binary_data";
/// A request parameter: return every output as binary data unless it says otherwise.
pub const BINARY_DATA_OUTPUT: &str = "binary_data_output";
use crate::engine::{IoData, element_count};

/// Parses a JSON request body (no binary tensor data).
pub fn parse_request(body: &[u8]) -> Result<InferRequest, OipError> {
    parse_request_parts(body, None)
}

/// Parses a request whose JSON is followed by `binary`, the binary data of the inputs
/// that carry a `binary_data_size` parameter, in order (`None`: the body is all JSON).
/// Every byte of `binary` must belong to an input.
pub fn parse_request_parts(json: &[u8], binary: Option<&[u8]>) -> Result<InferRequest, OipError> {
    super::json_request::scan(json, binary)?.decode()
}

/// Parses a `parameters` object: each value a bool, a number or a string.
pub fn parse_parameters(v: Option<&Value>, of: &str) -> Result<Parameters, OipError> {
    let obj = match v {
        None | Some(Value::Null) => return Ok(Parameters::new()),
        Some(Value::Object(obj)) => obj,
        Some(_) => return err(format!("{of}: \"parameters\" must be an object")),
    };
    obj.iter()
        .map(|(k, v)| {
            let value = match v {
                Value::Bool(b) => ParamValue::Bool(*b),
                Value::String(s) => ParamValue::String(s.clone()),
                Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                    (Some(i), _, _) => ParamValue::Int(i),
                    (None, Some(u), _) => ParamValue::Uint(u),
                    (None, None, Some(f)) => ParamValue::Double(f),
                    _ => return err(format!("{of}: parameter {k:?} is not a representable number")),
                },
                _ => return err(format!("{of}: parameter {k:?} must be a bool, a number or a string")),
            };
            Ok((k.clone(), value))
        })
        .collect()
}

/// The JSON of a parameter map.
pub fn parameters_json(parameters: &Parameters) -> Value {
    let map: Map<String, Value> = parameters
        .iter()
        .map(|(k, v)| {
            let v = match v {
                ParamValue::Bool(b) => json!(b),
                ParamValue::Int(i) => json!(i),
                ParamValue::Uint(u) => json!(u),
                ParamValue::Double(f) => json!(f),
                ParamValue::String(s) => json!(s),
            };
            (k.clone(), v)
        })
        .collect();
    Value::Object(map)
}

/// A floating element as JSON: a number, or a string for NaN and the infinities.
fn float_json(x: f32) -> Value {
    if x.is_nan() {
        json!("NaN")
    } else if x.is_infinite() {
        json!(if x > 0.0 { "Infinity" } else { "-Infinity" })
    } else {
        json!(x)
    }
}

/// JSON of one tensor's elements.
pub fn data_json(data: &IoData) -> Value {
    match data {
        IoData::F32(v) => Value::Array(v.iter().map(|&x| float_json(x)).collect()),
        IoData::F16(v) => Value::Array(v.iter().map(|&b| float_json(f16::from_bits(b).to_f32())).collect()),
        IoData::Bf16(v) => Value::Array(v.iter().map(|&b| float_json(bf16::from_bits(b).to_f32())).collect()),
        IoData::I32(v) => json!(v),
        IoData::I64(v) => json!(v),
        IoData::U8(v) => json!(v),
        IoData::Bytes(v) => json!(v.iter().map(|b| String::from_utf8_lossy(b).into_owned()).collect::<Vec<_>>()),
    }
}

/// One tensor's elements as JSON, serialised straight into the output (no `Value`
/// tree): floats as numbers (as their `f64` values, as `data_json` writes them), NaN and
/// the infinities as strings.
pub struct DataJson<'a>(pub &'a IoData);

impl Serialize for DataJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        fn floats<S: Serializer>(s: S, xs: impl ExactSizeIterator<Item = f32>) -> Result<S::Ok, S::Error> {
            let mut seq = s.serialize_seq(Some(xs.len()))?;
            for x in xs {
                if x.is_nan() {
                    seq.serialize_element("NaN")?;
                } else if x.is_infinite() {
                    seq.serialize_element(if x > 0.0 { "Infinity" } else { "-Infinity" })?;
                } else {
                    seq.serialize_element(&f64::from(x))?;
                }
            }
            seq.end()
        }
        match self.0 {
            IoData::F32(v) => floats(s, v.iter().copied()),
            IoData::F16(v) => floats(s, v.iter().map(|&b| f16::from_bits(b).to_f32())),
            IoData::Bf16(v) => floats(s, v.iter().map(|&b| bf16::from_bits(b).to_f32())),
            IoData::I32(v) => s.collect_seq(v),
            IoData::I64(v) => s.collect_seq(v),
            IoData::U8(v) => s.collect_seq(v),
            IoData::Bytes(v) => s.collect_seq(v.iter().map(|b| String::from_utf8_lossy(b))),
        }
    }
}

/// The most bytes [`DataJson`] of `data` can take: every element at its datatype's
/// widest (a BYTES element's every byte escaped as `\u00XX`), with its separator.
pub fn data_json_bound(data: &IoData) -> u64 {
    let n = element_count(data) as u64;
    2 + match data {
        // `-1.1754942106924411e-38,`: an f32 printed as its f64 value.
        IoData::F32(_) | IoData::F16(_) | IoData::Bf16(_) => n * 25,
        IoData::I32(_) => n * 12,
        IoData::I64(_) => n * 21,
        IoData::U8(_) => n * 4,
        IoData::Bytes(v) => v.iter().map(|b| 3 + 6 * b.len() as u64).sum(),
    }
}

/// Bytes of `data`'s binary form ([`binary::encode`]).
fn binary_len(data: &IoData) -> u64 {
    match data {
        IoData::Bytes(v) => v.iter().map(|b| 4 + b.len() as u64).sum(),
        other => {
            (element_count(other)
                * match other {
                    IoData::F32(_) | IoData::I32(_) => 4,
                    IoData::F16(_) | IoData::Bf16(_) => 2,
                    IoData::I64(_) => 8,
                    _ => 1,
                }) as u64
        }
    }
}

#[derive(Serialize)]
struct ResponseJson<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    model_name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    model_version: Option<&'a str>,
    outputs: Vec<OutputJson<'a>>,
}

#[derive(Serialize)]
struct OutputJson<'a> {
    name: &'a str,
    shape: &'a [u64],
    datatype: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<DataJson<'a>>,
}

/// Serialises a response with every output's data in the JSON.
pub fn response_json(response: &InferResponse) -> Value {
    let encoded = encode_http_response(response, &Parameters::new());
    serde_json::from_slice(&encoded.body).expect("the encoder writes JSON")
}

/// A response encoded for HTTP: the JSON object, then the binary data of the outputs
/// returned as binary (an output's `binary_data` parameter, else the request's
/// `binary_data_output`, else JSON).
pub struct EncodedResponse {
    /// The JSON object followed by the binary data.
    pub body: Vec<u8>,
    /// The JSON's length when binary data follows it (`Inference-Header-Content-Length`).
    pub json_len: Option<usize>,
}

/// Whether output `parameters` of a request with `request`'s parameters go as binary data.
fn as_binary(parameters: &Parameters, request: &Parameters) -> bool {
    let all_binary = request.get(BINARY_DATA_OUTPUT).and_then(ParamValue::as_bool).unwrap_or(false);
    parameters.get(BINARY_DATA).and_then(ParamValue::as_bool).unwrap_or(all_binary)
}

/// The most bytes [`encode_http_response`] can take for `response`, known before it
/// encodes anything (the budget of response encoding is charged with it).
pub fn encoded_bytes_bound(response: &InferResponse, request: &Parameters) -> u64 {
    let text = |s: &str| 2 + 6 * s.len() as u64;
    let head = 128
        + text(&response.model_name)
        + response.model_version.as_deref().map_or(0, text)
        + response.id.as_deref().map_or(0, text);
    let outputs: u64 = response
        .outputs
        .iter()
        .map(|(t, parameters)| {
            let data = if as_binary(parameters, request) { 64 + binary_len(&t.data) } else { data_json_bound(&t.data) };
            128 + text(&t.name) + 21 * t.shape.len() as u64 + data
        })
        .sum();
    head + outputs
}

/// Encodes `response` as the request's parameters ask (see [`EncodedResponse`]).
pub fn encode_http_response(response: &InferResponse, request: &Parameters) -> EncodedResponse {
    let mut binary_data = Vec::new();
    let outputs = response
        .outputs
        .iter()
        .map(|(t, parameters)| {
            let (parameters, data) = if as_binary(parameters, request) {
                let size = binary::encode(&t.data, &mut binary_data);
                (Some(json!({ BINARY_DATA_SIZE: size })), None)
            } else {
                (None, Some(DataJson(&t.data)))
            };
            OutputJson { name: &t.name, shape: &t.shape, datatype: datatype_name(&t.data), parameters, data }
        })
        .collect();
    let json = ResponseJson {
        id: response.id.as_deref(),
        model_name: &response.model_name,
        model_version: response.model_version.as_deref(),
        outputs,
    };
    let mut body = serde_json::to_vec(&json).expect("a response serialises");
    if binary_data.is_empty() {
        return EncodedResponse { body, json_len: None };
    }
    let json_len = body.len();
    body.extend_from_slice(&binary_data);
    EncodedResponse { body, json_len: Some(json_len) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::IoTensor;

    #[test]
    fn parses_flat_and_nested_data() {
        let body = br#"{"id":"r1","inputs":[
            {"name":"x","shape":[2,2],"datatype":"FP32","data":[[1,2],[3,4.5]]},
            {"name":"t","shape":[1],"datatype":"BYTES","data":["hi"]}]}"#;
        let r = parse_request(body).unwrap();
        assert_eq!(r.id.as_deref(), Some("r1"));
        assert_eq!(r.inputs[0].data, IoData::F32(vec![1.0, 2.0, 3.0, 4.5]));
        assert_eq!(r.inputs[1].data, IoData::Bytes(vec![b"hi".to_vec()]));
        assert!(r.outputs.is_empty() && r.parameters.is_empty());
    }

    #[test]
    fn parses_outputs_and_parameters() {
        let body = br#"{"parameters":{"priority":"batch","timeout":5,"x":true,"y":1.5},
            "inputs":[{"name":"x","shape":[1],"datatype":"INT64","data":[1],"parameters":{"a":"b"}}],
            "outputs":[{"name":"y","parameters":{"binary_data":false}},{"name":"z"}]}"#;
        let r = parse_request(body).unwrap();
        assert_eq!(r.parameters["priority"], ParamValue::String("batch".into()));
        assert_eq!(r.parameters["timeout"], ParamValue::Int(5));
        assert_eq!(r.parameters["x"], ParamValue::Bool(true));
        assert_eq!(r.parameters["y"], ParamValue::Double(1.5));
        assert_eq!(r.outputs.len(), 2);
        assert_eq!(r.outputs[0].parameters["binary_data"], ParamValue::Bool(false));
        assert_eq!(r.outputs[1].name, "z");
        let e = parse_request(br#"{"inputs":[],"outputs":[{"nam":"y"}]}"#).unwrap_err();
        assert!(e.0.contains("outputs[0]"), "{e}");
        let e = parse_request(br#"{"inputs":[],"parameters":{"p":[1]}}"#).unwrap_err();
        assert!(e.0.contains("\"p\""), "{e}");
    }

    #[test]
    fn rejects_malformed_requests_with_a_reason() {
        let cases: &[(&[u8], &str)] = &[
            (b"{", "not valid JSON"),
            (b"[]", "JSON object"),
            (br#"{"inputs":[{"shape":[1],"datatype":"FP32","data":[1]}]}"#, "\"name\""),
            (br#"{"inputs":[{"name":"x","shape":[3],"datatype":"FP32","data":[1]}]}"#, "needs 3 elements"),
            (br#"{"inputs":[{"name":"x","shape":[1],"datatype":"FP64","data":[1]}]}"#, "not supported"),
            (br#"{"inputs":[{"name":"x","shape":[1],"datatype":"INT32","data":[1.5]}]}"#, "not a valid INT32"),
            (br#"{"inputs":[{"name":"x","shape":[1],"datatype":"UINT8","data":[300]}]}"#, "not a valid UINT8"),
        ];
        for (body, needle) in cases {
            let e = parse_request(body).unwrap_err();
            assert!(e.0.contains(needle), "{:?} → {}", String::from_utf8_lossy(body), e.0);
        }
    }

    #[test]
    fn response_round_trips() {
        let out = IoTensor { name: "y".into(), shape: vec![2], data: IoData::I64(vec![7, -1]) };
        let response = InferResponse {
            model_name: "m".into(),
            model_version: Some("3".into()),
            id: None,
            outputs: vec![(out, Parameters::new())],
            timing: Default::default(),
        };
        let v = response_json(&response);
        assert_eq!(v["outputs"][0]["datatype"], "INT64");
        assert_eq!(v["outputs"][0]["data"], json!([7, -1]));
        assert_eq!(v["model_version"], "3");
    }

    #[test]
    fn nan_and_infinities_travel_as_strings_and_out_of_range_numbers_are_refused() {
        let out = IoTensor {
            name: "y".into(),
            shape: vec![4],
            data: IoData::F32(vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1.5]),
        };
        let response = InferResponse {
            model_name: "m".into(),
            model_version: None,
            id: None,
            outputs: vec![(out, Parameters::new())],
            timing: Default::default(),
        };
        let data = response_json(&response)["outputs"][0]["data"].clone();
        assert_eq!(data, json!(["NaN", "Infinity", "-Infinity", 1.5]));
        // What went out comes back in.
        let body = json!({ "inputs": [{ "name": "x", "shape": [4], "datatype": "FP32", "data": data }] });
        let back = parse_request(&serde_json::to_vec(&body).unwrap()).unwrap();
        let IoData::F32(v) = &back.inputs[0].data else { panic!("FP32") };
        assert!(v[0].is_nan() && v[1] == f32::INFINITY && v[2] == f32::NEG_INFINITY && v[3] == 1.5, "{v:?}");
        // 1e39 is no FP32; f32::MAX as printed is; 70000 is no FP16.
        for (datatype, x, ok) in [("FP32", "1e39", false), ("FP32", "3.4028235e38", true), ("FP16", "70000", false)] {
            let body = format!(r#"{{"inputs":[{{"name":"x","shape":[1],"datatype":"{datatype}","data":[{x}]}}]}}"#);
            assert_eq!(parse_request(body.as_bytes()).is_ok(), ok, "{datatype} {x}");
        }
        let body = br#"{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":["nan"]}]}"#;
        assert!(parse_request(body).is_err(), "only the exact spellings");
    }

    #[test]
    fn a_rank_above_the_maximum_is_a_request_error() {
        let shape = vec![1u64; 1000];
        let body = json!({ "inputs": [{ "name": "x", "shape": shape, "datatype": "FP32", "data": [1.0] }] });
        let e = parse_request(&serde_json::to_vec(&body).unwrap()).unwrap_err();
        assert!(e.0.contains("rank 1000"), "{e}");
    }

    fn binary_request(inputs: &str) -> Vec<u8> {
        format!(r#"{{"inputs":[{inputs}],"outputs":[{{"name":"x","parameters":{{"binary_data":true}}}}]}}"#)
            .into_bytes()
    }

    #[test]
    fn reads_binary_inputs_after_the_json() {
        let json = binary_request(
            r#"{"name":"x","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":8}},
               {"name":"j","shape":[1],"datatype":"INT64","data":[5]},
               {"name":"s","shape":[2],"datatype":"BYTES","parameters":{"binary_data_size":9}}"#,
        );
        let mut tail = Vec::new();
        tail.extend_from_slice(&1.5f32.to_le_bytes());
        tail.extend_from_slice(&(-2.0f32).to_le_bytes());
        tail.extend_from_slice(&[0, 0, 0, 0, 1, 0, 0, 0, 0xff]);
        let r = parse_request_parts(&json, Some(&tail)).unwrap();
        assert_eq!(r.inputs[0].data, IoData::F32(vec![1.5, -2.0]));
        assert_eq!(r.inputs[1].data, IoData::I64(vec![5]));
        assert_eq!(r.inputs[2].data, IoData::Bytes(vec![Vec::new(), vec![0xff]]));
        assert_eq!(r.outputs[0].parameters[BINARY_DATA], ParamValue::Bool(true));
    }

    #[test]
    fn refuses_malformed_binary_framing() {
        let x = |size: &str| {
            binary_request(&format!(
                r#"{{"name":"x","shape":[2],"datatype":"FP32","parameters":{{"binary_data_size":{size}}}}}"#
            ))
        };
        type Case<'a> = (Vec<u8>, Option<&'a [u8]>, &'a str);
        let cases: Vec<Case> = vec![
            (x("8"), None, "needs the Inference-Header-Content-Length header"),
            (x("8"), Some(&[0; 4]), "more than the 4 bytes of binary data left"),
            (x("4"), Some(&[0; 4]), "2 FP32 elements take 8 bytes, binary_data_size is 4"),
            (x("8"), Some(&[0; 9]), "1 bytes of binary data follow"),
            (x("-1"), Some(&[0; 8]), "non-negative integer"),
            (x("\"8\""), Some(&[0; 8]), "non-negative integer"),
            (
                binary_request(
                    r#"{"name":"x","shape":[1],"datatype":"FP32","data":[1],"parameters":{"binary_data_size":4}}"#,
                ),
                Some(&[0; 4]),
                "both",
            ),
            (
                binary_request(r#"{"name":"x","shape":[1],"datatype":"FP32","data":[1]}"#),
                Some(&[1]),
                "1 bytes of binary data follow",
            ),
        ];
        for (json, tail, needle) in cases {
            let e = parse_request_parts(&json, tail).unwrap_err();
            assert!(e.0.contains(needle), "{needle:?} not in {e}");
        }
        let mut body =
            binary_request(r#"{"name":"x","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":4}}"#);
        body.extend_from_slice(&[0; 4]);
        let e = parse_request(&body).unwrap_err();
        assert!(e.0.contains("trailing characters") && e.0.contains("Inference-Header-Content-Length"), "{e}");
    }

    #[test]
    fn writes_binary_outputs_after_the_json() {
        let t = |name: &str, data| IoTensor { name: name.into(), shape: vec![2], data };
        let binary = |b: bool| Parameters::from([(BINARY_DATA.to_owned(), ParamValue::Bool(b))]);
        let response = InferResponse {
            model_name: "m".into(),
            model_version: Some("1".into()),
            id: Some("r".into()),
            outputs: vec![
                (t("a", IoData::I32(vec![1, -1])), binary(true)),
                (t("b", IoData::U8(vec![7, 8])), Parameters::new()),
                (t("c", IoData::Bytes(vec![b"x".to_vec(), Vec::new()])), binary(false)),
            ],
            timing: Default::default(),
        };
        let all = Parameters::from([(BINARY_DATA_OUTPUT.to_owned(), ParamValue::Bool(true))]);
        let encoded = encode_http_response(&response, &all);
        let n = encoded.json_len.expect("binary data follows");
        let v: Value = serde_json::from_slice(&encoded.body[..n]).unwrap();
        assert_eq!(v["outputs"][0]["parameters"][BINARY_DATA_SIZE], 8);
        assert!(v["outputs"][0].get("data").is_none());
        assert_eq!(v["outputs"][1]["parameters"][BINARY_DATA_SIZE], 2, "binary_data_output applies");
        assert_eq!(v["outputs"][2]["data"], json!(["x", ""]), "binary_data: false overrides it");
        assert_eq!(&encoded.body[n..], [1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 7, 8]);
        assert_eq!(v["id"], "r");
        let json_only = encode_http_response(&response, &Parameters::new());
        let v: Value = serde_json::from_slice(&json_only.body[..json_only.json_len.unwrap()]).unwrap();
        assert_eq!(v["outputs"][1]["data"], json!([7, 8]), "JSON unless asked");
    }
}
