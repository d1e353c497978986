//! The Open Inference Protocol's JSON tensor format.
//!
//! Requests carry `{"id"?, "parameters"?, "inputs": [{"name", "shape", "datatype",
//! "parameters"?, "data"}], "outputs"?: [{"name", "parameters"?}]}`; data may be flat
//! (row-major) or nested, numbers for numeric types and strings for `BYTES`. Responses
//! carry `{"model_name", "model_version", "id"?, "outputs": [...]}`.

use half::{bf16, f16};
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::{InferRequest, InferResponse, OipError, ParamValue, Parameters, RequestedOutput, datatype_name, err};
use crate::engine::{IoData, IoTensor};

/// Parses a JSON request body.
pub fn parse_request(body: &[u8]) -> Result<InferRequest, OipError> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| OipError(format!("request body is not valid JSON: {e}")))?;
    let Some(obj) = v.as_object() else { return err("request body must be a JSON object") };
    let id = match obj.get("id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return err("\"id\" must be a string"),
    };
    let Some(inputs) = obj.get("inputs").and_then(Value::as_array) else {
        return err("request must have an \"inputs\" array");
    };
    let inputs = inputs.iter().enumerate().map(|(i, t)| parse_tensor(i, t)).collect::<Result<_, _>>()?;
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

fn parse_tensor(index: usize, v: &Value) -> Result<IoTensor, OipError> {
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
    let mut flat = Vec::new();
    flatten(obj.get("data").ok_or_else(|| at("needs \"data\""))?, &mut flat);
    let expected = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).ok_or_else(|| at("shape is too large"))?;
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
    data: Value,
}

/// Serialises a response with every output's data in the JSON.
pub fn response_json(response: &InferResponse) -> Value {
    let outputs: Vec<_> = response
        .outputs
        .iter()
        .map(|(t, _)| OutputJson {
            name: &t.name,
            shape: &t.shape,
            datatype: datatype_name(&t.data),
            data: data_json(&t.data),
        })
        .collect();
    let mut v = json!({ "model_name": response.model_name, "outputs": outputs });
    if let Some(version) = &response.model_version {
        v["model_version"] = json!(version);
    }
    if let Some(id) = &response.id {
        v["id"] = json!(id);
    }
    v
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
}
