//! The Open Inference Protocol (KServe v2) JSON tensor format.
//!
//! Requests carry `{"id"?, "inputs": [{"name", "shape", "datatype", "data"}]}`; data
//! may be flat (row-major) or nested, numbers for numeric types and strings for
//! `BYTES`. Responses carry `{"model_name", "model_version", "id"?, "outputs": [...]}`.
//! Every malformed request becomes an [`OipError`] that says what is wrong and where.
//!
//! JSON has no NaN or infinities, so floating outputs carry them as the strings `"NaN"`,
//! `"Infinity"` and `"-Infinity"` (protobuf's JSON mapping, which the KServe v2 gRPC
//! clients' JSON transcoding also uses), and inputs accept the same strings. A number
//! outside the datatype's finite range (FP32 `1e39`) is refused, not rounded to
//! infinity. Shapes have at most [`sluice_host_api::MAX_RANK`] dimensions.

use half::{bf16, f16};
use serde::Serialize;
use serde_json::{Value, json};

use crate::engine::{IoData, IoTensor};

/// A request that does not follow the protocol; the message names the culprit.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct OipError(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, OipError> {
    Err(OipError(msg.into()))
}

/// A parsed inference request.
#[derive(Debug)]
pub struct InferRequest {
    pub id: Option<String>,
    pub inputs: Vec<IoTensor>,
}

/// Parses a request body.
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
    Ok(InferRequest { id, inputs })
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
    if shape.len() > sluice_host_api::MAX_RANK {
        return Err(at(&format!("rank {} is above the maximum of {}", shape.len(), sluice_host_api::MAX_RANK)));
    }
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
    Ok(match datatype {
        // A finite number that rounds to infinity is out of the datatype's range.
        "FP32" => IoData::F32(nums(flat, "FP32", |v| {
            let x = float(v)?;
            let y = x as f32;
            (y.is_finite() || !x.is_finite()).then_some(y)
        })?),
        "FP16" => IoData::F16(nums(flat, "FP16", |v| {
            let x = float(v)?;
            let y = f16::from_f64(x);
            (y.is_finite() || !x.is_finite()).then_some(y.to_bits())
        })?),
        "BF16" => IoData::Bf16(nums(flat, "BF16", |v| {
            let x = float(v)?;
            let y = bf16::from_f64(x);
            (y.is_finite() || !x.is_finite()).then_some(y.to_bits())
        })?),
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

/// A floating element: a number, or one of the strings `"NaN"`, `"Infinity"`, `"-Infinity"`.
fn float(v: &Value) -> Option<f64> {
    match v {
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => v.as_f64(),
    }
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

/// The protocol's name of an [`IoData`]'s datatype.
pub fn datatype_name(data: &IoData) -> &'static str {
    match data {
        IoData::F32(_) => "FP32",
        IoData::F16(_) => "FP16",
        IoData::Bf16(_) => "BF16",
        IoData::I32(_) => "INT32",
        IoData::I64(_) => "INT64",
        IoData::U8(_) => "UINT8",
        IoData::Bytes(_) => "BYTES",
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

#[derive(Serialize)]
struct OutputJson<'a> {
    name: &'a str,
    shape: &'a [u64],
    datatype: &'static str,
    data: Value,
}

/// Serialises a response.
pub fn response_json(model_name: &str, model_version: Option<&str>, id: Option<&str>, outputs: &[IoTensor]) -> Value {
    let outputs: Vec<_> = outputs
        .iter()
        .map(|t| OutputJson {
            name: &t.name,
            shape: &t.shape,
            datatype: datatype_name(&t.data),
            data: data_json(&t.data),
        })
        .collect();
    let mut v = json!({ "model_name": model_name, "outputs": outputs });
    if let Some(ver) = model_version {
        v["model_version"] = json!(ver);
    }
    if let Some(id) = id {
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
        let out = vec![IoTensor { name: "y".into(), shape: vec![2], data: IoData::I64(vec![7, -1]) }];
        let v = response_json("m", Some("3"), None, &out);
        assert_eq!(v["outputs"][0]["datatype"], "INT64");
        assert_eq!(v["outputs"][0]["data"], json!([7, -1]));
        assert_eq!(v["model_version"], "3");
    }

    #[test]
    fn nan_and_infinities_travel_as_strings_and_out_of_range_numbers_are_refused() {
        let out = vec![IoTensor {
            name: "y".into(),
            shape: vec![4],
            data: IoData::F32(vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1.5]),
        }];
        let data = response_json("m", None, None, &out)["outputs"][0]["data"].clone();
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
}
