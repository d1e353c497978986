//! JSON inference requests decoded straight into typed tensors, without a
//! `serde_json::Value` tree (which takes ~20× the body's size for a tensor of small
//! numbers: 32 bytes a node for a 2-byte `0,`).
//!
//! Decoding takes two passes over the text. [`scan`] reads everything but the tensors'
//! elements, which it only counts (and the bytes of their strings), so it knows what
//! decoding will allocate ([`ScannedRequest::decoded_bytes`]) before anything is
//! allocated: the caller charges that to the tenant's host-memory budget
//! (`platform::host_memory`) and only then calls [`ScannedRequest::decode`], which
//! reads the elements into buffers of their datatype, sized from the shape. The scan's
//! own allocations are the request's names, shapes and parameters, bounded by
//! [`MAX_TENSORS`] tensors and [`MAX_PARAMETERS`] parameters an object. The errors and
//! their messages are those of the protocol's JSON format ([`super::json`]).

mod data;
mod fields;

use fields::{Field, InputFields, read};

use super::BINARY_DATA_SIZE;
use super::{InferRequest, OipError, Parameters, RequestedOutput, binary, err};
use crate::engine::IoTensor;

/// Inputs, and requested outputs, a request may name.
pub const MAX_TENSORS: usize = 4096;
/// Parameters a request, input or output may carry.
pub const MAX_PARAMETERS: usize = 64;

/// Bytes an element of `IoData::Bytes` takes besides its contents (its `Vec`).
const BYTES_ELEMENT_OVERHEAD: u64 = 24;

/// Bytes a node of a `serde_json::Value` tree can take, with its share of its array's
/// or object's growth.
const VALUE_NODE_BYTES: u64 = 96;

/// An upper estimate of what parsing `json` into a `serde_json::Value` takes, from one
/// pass over its bytes without allocating: its strings' bytes plus a node per value (the
/// separators outside strings count them). For the bodies that are parsed that way (the
/// generate extension's, the OpenAI endpoints'), charged before they are parsed.
pub fn value_tree_bound(json: &[u8]) -> u64 {
    let (mut values, mut in_string, mut escaped) = (1u64, false, false);
    for &b in json {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b',' | b'[' | b'{' | b':' => values += 1,
            _ => {}
        }
    }
    json.len() as u64 + values * VALUE_NODE_BYTES
}

/// A request read up to its tensors' elements.
pub struct ScannedRequest<'a> {
    json: &'a [u8],
    binary: Option<&'a [u8]>,
    id: Option<String>,
    inputs: Vec<Planned>,
    outputs: Vec<RequestedOutput>,
    parameters: Parameters,
    decoded_bytes: u64,
}

/// One input as the scan checked it.
struct Planned {
    name: String,
    shape: Vec<u64>,
    datatype: String,
    expected: u64,
    /// Where its elements are: in the JSON, or this range of the binary data.
    source: Source,
}

enum Source {
    Json,
    Binary(std::ops::Range<usize>),
}

/// Reads `json` (and the framing of `binary`, the binary tensor data after it) up to
/// the tensors' elements, checking everything but the elements' values.
pub fn scan<'a>(json: &'a [u8], binary: Option<&'a [u8]>) -> Result<ScannedRequest<'a>, OipError> {
    let fields = read(json, None, binary.is_none())?;
    let id = match fields.id {
        Field::Missing | Field::Null => None,
        Field::Ok(s) => Some(s),
        Field::Other => return err("\"id\" must be a string"),
    };
    let Field::Ok(inputs) = fields.inputs else { return err("request must have an \"inputs\" array") };
    let mut offset = 0usize;
    let mut planned = Vec::with_capacity(inputs.len());
    let mut decoded_bytes = 0u64;
    for (index, input) in inputs.into_iter().enumerate() {
        let (p, bytes) = plan(index, input, binary, &mut offset)?;
        decoded_bytes = decoded_bytes.saturating_add(bytes);
        planned.push(p);
    }
    if let Some(rest) = binary.map(|b| &b[offset..]).filter(|rest| !rest.is_empty()) {
        return err(format!("{} bytes of binary data follow the inputs' binary_data_size bytes", rest.len()));
    }
    let parameters = fields.parameters.unwrap_or_else(|| Ok(Parameters::new()))?;
    let outputs = match fields.outputs {
        Field::Missing | Field::Null => Vec::new(),
        Field::Ok(outputs) => outputs.into_iter().collect::<Result<_, _>>()?,
        Field::Other => return err("\"outputs\" must be an array"),
    };
    Ok(ScannedRequest { json, binary, id, inputs: planned, outputs, parameters, decoded_bytes })
}

impl ScannedRequest<'_> {
    /// Host memory the decoded inputs take: their elements in their datatypes' buffers.
    pub fn decoded_bytes(&self) -> u64 {
        self.decoded_bytes
    }

    /// Reads the inputs' elements into their buffers.
    pub fn decode(self) -> Result<InferRequest, OipError> {
        let plans: Vec<(&str, u64)> = self.inputs.iter().map(|p| (p.datatype.as_str(), p.expected)).collect();
        let mut decoded = read(self.json, Some(&plans), false)?.data.into_iter();
        let mut inputs = Vec::with_capacity(self.inputs.len());
        for p in self.inputs {
            let at = |msg: &str| OipError(format!("input {:?}: {msg}", p.name));
            let from_json = decoded.next().flatten();
            let data = match p.source {
                Source::Binary(range) => {
                    let bytes = &self.binary.expect("planned from the binary data")[range];
                    binary::decode(&p.datatype, p.expected, bytes).map_err(|e| at(&e.0))?
                }
                Source::Json => {
                    from_json.ok_or_else(|| at("its data changed between two reads"))?.map_err(|m| at(&m))?
                }
            };
            inputs.push(IoTensor { name: p.name, shape: p.shape, data });
        }
        Ok(InferRequest { id: self.id, inputs, outputs: self.outputs, parameters: self.parameters })
    }
}

/// Checks one scanned input as the protocol requires; returns its plan and the bytes its
/// decoded elements take.
fn plan(
    index: usize,
    input: InputFields,
    binary: Option<&[u8]>,
    offset: &mut usize,
) -> Result<(Planned, u64), OipError> {
    let InputFields::Object { name, shape, datatype, parameters, data } = input else {
        return err(format!("inputs[{index}] must be an object"));
    };
    let Field::Ok(name) = name else { return err(format!("inputs[{index}] needs a string \"name\"")) };
    let at = |msg: &str| OipError(format!("input {name:?}: {msg}"));
    let Field::Ok(shape) = shape else { return Err(at("needs a \"shape\" array")) };
    if !shape.valid {
        return Err(at("shape entries must be non-negative integers"));
    }
    if shape.rank > sluice_host_api::MAX_RANK {
        return Err(at(&format!("rank {} is above the maximum of {}", shape.rank, sluice_host_api::MAX_RANK)));
    }
    let shape = shape.dims;
    let Field::Ok(datatype) = datatype else { return Err(at("needs a string \"datatype\"")) };
    let expected = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).ok_or_else(|| at("shape is too large"))?;
    let parameters = parameters.unwrap_or_else(|| Ok(Parameters::new()))?;
    let element = element_bytes(&datatype).map_err(|m| at(&m))?;
    if let Some(size) = parameters.get(BINARY_DATA_SIZE) {
        let size = size.as_u64().ok_or_else(|| at("binary_data_size must be a non-negative integer"))?;
        if data.is_some() {
            return Err(at("has both \"data\" and binary_data_size"));
        }
        let Some(all) = binary else {
            return Err(at("binary_data_size needs the Inference-Header-Content-Length header"));
        };
        let left = all.len() - *offset;
        if size > left as u64 {
            return Err(at(&format!("binary_data_size {size} is more than the {left} bytes of binary data left")));
        }
        let range = *offset..*offset + size as usize;
        *offset = range.end;
        let bytes = match element {
            Some(width) => expected.saturating_mul(width),
            None => expected.saturating_mul(BYTES_ELEMENT_OVERHEAD).saturating_add(size),
        };
        return Ok((Planned { name, shape, datatype, expected, source: Source::Binary(range) }, bytes));
    }
    // A scalar `data` is one element, as a one-element array would be.
    let leaves = data.ok_or_else(|| at("needs \"data\" or a binary_data_size parameter"))?;
    if leaves.count != expected {
        return Err(at(&format!("shape {shape:?} needs {expected} elements, data has {}", leaves.count)));
    }
    let bytes = match element {
        Some(width) => expected.saturating_mul(width),
        None => expected.saturating_mul(BYTES_ELEMENT_OVERHEAD).saturating_add(leaves.string_bytes),
    };
    Ok((Planned { name, shape, datatype, expected, source: Source::Json }, bytes))
}

/// Bytes one element of `datatype` takes decoded (`None` for BYTES: its contents), or
/// why the datatype is not supported.
fn element_bytes(datatype: &str) -> Result<Option<u64>, String> {
    Ok(Some(match datatype {
        "FP32" | "INT32" => 4,
        "FP16" | "BF16" => 2,
        "INT64" => 8,
        "UINT8" => 1,
        "BYTES" => return Ok(None),
        other => {
            return Err(format!(
                "datatype {other:?} is not supported (use FP32, FP16, BF16, INT32, INT64, UINT8 or BYTES)"
            ));
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::IoData;

    #[test]
    fn the_scan_knows_the_decoded_size_before_decoding() {
        let body = br#"{"inputs":[
            {"data":[[1,2],[3,4]],"name":"x","shape":[2,2],"datatype":"FP32"},
            {"name":"s","shape":[2],"datatype":"BYTES","data":["abc","de"]},
            {"name":"i","shape":[3],"datatype":"INT64","data":[1,-2,3]}]}"#;
        let scanned = scan(body, None).unwrap();
        assert_eq!(scanned.decoded_bytes(), 4 * 4 + (2 * 24 + 5) + 3 * 8);
        let r = scanned.decode().unwrap();
        assert_eq!(r.inputs[0].data, IoData::F32(vec![1.0, 2.0, 3.0, 4.0]), "data before datatype");
        assert_eq!(r.inputs[1].data, IoData::Bytes(vec![b"abc".to_vec(), b"de".to_vec()]));
        assert_eq!(r.inputs[2].data, IoData::I64(vec![1, -2, 3]));
    }

    #[test]
    fn a_small_body_can_declare_a_large_tensor_and_the_scan_says_so() {
        // 200,001 elements in ~400 KB of JSON: 800 KB as FP32, ~6 MB as a Value tree.
        let mut body = String::from(r#"{"inputs":[{"name":"x","shape":[200001],"datatype":"FP32","data":[0"#);
        body.push_str(&",0".repeat(200_000));
        body.push_str("]}]}");
        let scanned = scan(body.as_bytes(), None).unwrap();
        assert_eq!(scanned.decoded_bytes(), 800_004);
    }

    #[test]
    fn the_value_tree_bound_counts_values_outside_strings() {
        assert_eq!(value_tree_bound(br#"{"a":[1,2,3]}"#), 13 + 6 * VALUE_NODE_BYTES);
        assert_eq!(value_tree_bound(br#"{"a":"x,[{:\"y"}"#), 16 + 3 * VALUE_NODE_BYTES, "not inside strings");
        let bytes = serde_json::to_vec(&vec![0u8; 1000]).unwrap();
        assert!(value_tree_bound(&bytes) >= 1000 * 32, "at least a Value a number");
    }

    #[test]
    fn too_many_parameters_or_inputs_are_refused() {
        let params: Vec<String> = (0..=MAX_PARAMETERS).map(|i| format!("\"p{i}\":1")).collect();
        let body = format!(r#"{{"inputs":[],"parameters":{{{}}}}}"#, params.join(","));
        let e = scan(body.as_bytes(), None).err().unwrap();
        assert!(e.0.contains("more than 64 parameters"), "{e}");
        let inputs = vec![r#"{"name":"x","shape":[1],"datatype":"UINT8","data":[1]}"#; MAX_TENSORS + 1];
        let body = format!(r#"{{"inputs":[{}]}}"#, inputs.join(","));
        let e = scan(body.as_bytes(), None).err().unwrap();
        assert!(e.0.contains("at most 4096 inputs"), "{e}");
    }
}
