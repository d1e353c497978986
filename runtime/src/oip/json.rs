//! The Open Inference Protocol's JSON tensor format.
//!
//! Requests carry `{"id"?, "parameters"?, "inputs": [{"name", "shape", "datatype",
//! "parameters"?, "data"}], "outputs"?: [{"name", "parameters"?}]}`; data may be flat
//! (row-major) or nested, numbers for numeric types and strings for `BYTES`. Responses
//! carry `{"model_name", "model_version", "id"?, "outputs": [...]}`.

use half::{bf16, f16};
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::{
    InferRequest, InferResponse, OipError, ParamValue, Parameters, RequestedOutput, binary, datatype_name, err,
};

/// A tensor's parameter: the byte count of its binary data.
pub const BINARY_DATA_SIZE: &str = "binary_data_size";
/// A requested output's parameter: return it as binary data.
pub const BINARY_DATA: &str = "binary_data";
/// A request parameter: return every output as binary data unless it says otherwise.
pub const BINARY_DATA_OUTPUT: &str = "binary_data_output";
use crate::engine::{IoData, IoTensor};

/// Parses a JSON request body (no binary tensor data).
pub fn parse_request(body: &[u8]) -> Result<InferRequest, OipError> {
    parse_request_parts(body, None)
}

/// Parses a request whose JSON is followed by `binary`, the binary data of the inputs
/// that carry a `binary_data_size` parameter, in order (`None`: the body is all JSON).
/// Every byte of `binary` must belong to an input.
pub fn parse_request_parts(json: &[u8], binary: Option<&[u8]>) -> Result<InferRequest, OipError> {
    let v: Value = serde_json::from_slice(json).map_err(|e| {
        let hint = if binary.is_none() && e.is_syntax() && e.to_string().contains("trailing characters") {
            " (binary tensor data needs the Inference-Header-Content-Length header)"
        } else {
            ""
        };
        OipError(format!("request body is not valid JSON: {e}{hint}"))
    })?;
    let Some(obj) = v.as_object() else { return err("request body must be a JSON object") };
    let id = match obj.get("id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return err("\"id\" must be a string"),
    };
    let Some(inputs) = obj.get("inputs").and_then(Value::as_array) else {
        return err("request must have an \"inputs\" array");
    };
    let mut tail = binary;
    let inputs = inputs.iter().enumerate().map(|(i, t)| parse_tensor(i, t, &mut tail)).collect::<Result<_, _>>()?;
    if let Some(rest) = tail.filter(|rest| !rest.is_empty()) {
        return err(format!("{} bytes of binary data follow the inputs' binary_data_size bytes", rest.len()));
    }
    let parameters = parse_parameters(obj.get("parameters"), "request")?;
    let outputs = match obj.get("outputs") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(outputs)) => {
            outputs.iter().enumerate().map(|(i, o)| parse_output(i, o)).collect::<Result<_, _>>()?
        }
        Some(_) => return err("\"outputs\" must be an array"),
    };
    Ok(InferRequest { id, inputs, outputs, parameters })
}

fn parse_output(index: usize, v: &Value) -> Result<RequestedOutput, OipError> {
    let Some(obj) = v.as_object() else { return err(format!("outputs[{index}] must be an object")) };
    let Some(name) = obj.get("name").and_then(Value::as_str) else {
        return err(format!("outputs[{index}] needs a string \"name\""));
    };
    let parameters = parse_parameters(obj.get("parameters"), &format!("output {name:?}"))?;
    Ok(RequestedOutput { name: name.to_owned(), parameters })
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

fn parse_tensor(index: usize, v: &Value, binary: &mut Option<&[u8]>) -> Result<IoTensor, OipError> {
    let Some(obj) = v.as_object() else { return err(format!("inputs[{index}] must be an object")) };
    let name = match obj.get("name").and_then(Value::as_str) {
        Some(n) => n.to_owned(),
        None => return err(format!("inputs[{index}] needs a string \"name\"")),
    };
    let at = |msg: &str| OipError(format!("input {name:?}: {msg}"));
    let shape: Vec<u64> = obj
        .get("shape")
        .and_then(Value::as_array)
        .ok_or_else(|| at("needs a \"shape\" array"))?
        .iter()
        .map(|d| d.as_u64().ok_or_else(|| at("shape entries must be non-negative integers")))
        .collect::<Result<_, _>>()?;
    let datatype = obj.get("datatype").and_then(Value::as_str).ok_or_else(|| at("needs a string \"datatype\""))?;
    let expected = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).ok_or_else(|| at("shape is too large"))?;
    let parameters = parse_parameters(obj.get("parameters"), &format!("input {name:?}"))?;
    if let Some(size) = parameters.get(BINARY_DATA_SIZE) {
        let size = size.as_u64().ok_or_else(|| at("binary_data_size must be a non-negative integer"))?;
        if obj.contains_key("data") {
            return Err(at("has both \"data\" and binary_data_size"));
        }
        let Some(rest) = binary.as_mut() else {
            return Err(at("binary_data_size needs the Inference-Header-Content-Length header"));
        };
        if size > rest.len() as u64 {
            return Err(at(&format!(
                "binary_data_size {size} is more than the {} bytes of binary data left",
                rest.len()
            )));
        }
        let (bytes, remaining) = rest.split_at(size as usize);
        *rest = remaining;
        let data = binary::decode(datatype, expected, bytes).map_err(|e| at(&e.0))?;
        return Ok(IoTensor { name, shape, data });
    }
    let mut flat = Vec::new();
    flatten(obj.get("data").ok_or_else(|| at("needs \"data\" or a binary_data_size parameter"))?, &mut flat);
    if flat.len() as u64 != expected {
        return Err(at(&format!("shape {shape:?} needs {expected} elements, data has {}", flat.len())));
    }
    let data = parse_data(datatype, &flat).map_err(|m| at(&m))?;
    Ok(IoTensor { name, shape, data })
}

fn flatten<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
    match v {
        Value::Array(items) => items.iter().for_each(|i| flatten(i, out)),
        other => out.push(other),
    }
}

fn parse_data(datatype: &str, flat: &[&Value]) -> Result<IoData, String> {
    fn nums<T>(flat: &[&Value], kind: &str, f: impl Fn(&Value) -> Option<T>) -> Result<Vec<T>, String> {
        flat.iter()
            .enumerate()
            .map(|(i, v)| f(v).ok_or_else(|| format!("element {i} ({v}) is not a valid {kind}")))
            .collect()
    }
    let float = |v: &Value| v.as_f64();
    Ok(match datatype {
        "FP32" => IoData::F32(nums(flat, "FP32", |v| float(v).map(|x| x as f32))?),
        "FP16" => IoData::F16(nums(flat, "FP16", |v| float(v).map(|x| f16::from_f64(x).to_bits()))?),
        "BF16" => IoData::Bf16(nums(flat, "BF16", |v| float(v).map(|x| bf16::from_f64(x).to_bits()))?),
        "INT32" => IoData::I32(nums(flat, "INT32", |v| v.as_i64().and_then(|x| i32::try_from(x).ok()))?),
        "INT64" => IoData::I64(nums(flat, "INT64", Value::as_i64)?),
        "UINT8" => IoData::U8(nums(flat, "UINT8", |v| v.as_u64().and_then(|x| u8::try_from(x).ok()))?),
        "BYTES" => IoData::Bytes(nums(flat, "BYTES string", |v| v.as_str().map(|s| s.as_bytes().to_vec()))?),
        other => {
            return Err(format!(
                "datatype {other:?} is not supported (use FP32, FP16, BF16, INT32, INT64, UINT8 or BYTES)"
            ));
        }
    })
}

/// JSON of one tensor's elements.
pub fn data_json(data: &IoData) -> Value {
    match data {
        IoData::F32(v) => json!(v),
        IoData::F16(v) => json!(v.iter().map(|&b| f16::from_bits(b).to_f32()).collect::<Vec<_>>()),
        IoData::Bf16(v) => json!(v.iter().map(|&b| bf16::from_bits(b).to_f32()).collect::<Vec<_>>()),
        IoData::I32(v) => json!(v),
        IoData::I64(v) => json!(v),
        IoData::U8(v) => json!(v),
        IoData::Bytes(v) => json!(v.iter().map(|b| String::from_utf8_lossy(b).into_owned()).collect::<Vec<_>>()),
    }
}

#[derive(Serialize)]
struct OutputJson<'a> {
    name: &'a str,
    shape: &'a [u64],
    datatype: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<Value>,
}

/// Serialises a response with every output's data in the JSON.
pub fn response_json(response: &InferResponse) -> Value {
    encode_response(response, &Parameters::new()).0
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

/// Encodes `response` as the request's parameters ask (see [`EncodedResponse`]).
pub fn encode_http_response(response: &InferResponse, request: &Parameters) -> EncodedResponse {
    let (json, binary) = encode_response(response, request);
    let mut body = serde_json::to_vec(&json).expect("a JSON value serialises");
    if binary.is_empty() {
        return EncodedResponse { body, json_len: None };
    }
    let json_len = body.len();
    body.extend_from_slice(&binary);
    EncodedResponse { body, json_len: Some(json_len) }
}

fn encode_response(response: &InferResponse, request: &Parameters) -> (Value, Vec<u8>) {
    let all_binary = request.get(BINARY_DATA_OUTPUT).and_then(ParamValue::as_bool).unwrap_or(false);
    let mut binary_data = Vec::new();
    let outputs: Vec<_> = response
        .outputs
        .iter()
        .map(|(t, parameters)| {
            let as_binary = parameters.get(BINARY_DATA).and_then(ParamValue::as_bool).unwrap_or(all_binary);
            let (parameters, data) = if as_binary {
                let size = binary::encode(&t.data, &mut binary_data);
                (Some(json!({ BINARY_DATA_SIZE: size })), None)
            } else {
                (None, Some(data_json(&t.data)))
            };
            OutputJson { name: &t.name, shape: &t.shape, datatype: datatype_name(&t.data), parameters, data }
        })
        .collect();
    let mut v = json!({ "model_name": response.model_name, "outputs": outputs });
    if let Some(version) = &response.model_version {
        v["model_version"] = json!(version);
    }
    if let Some(id) = &response.id {
        v["id"] = json!(id);
    }
    (v, binary_data)
}

#[cfg(test)]
mod tests {
    use super::*;

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
