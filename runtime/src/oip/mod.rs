//! The Open Inference Protocol (KServe v2), independent of its transport.
//!
//! Both transports (HTTP/JSON with the binary tensor extension, and gRPC) decode a
//! request into the protocol-neutral [`InferRequest`], call [`infer()`] (the one entry
//! point into the platform) and encode the [`InferResponse`] it returns:
//!
//! - [`json`]: the JSON tensor format (requests, responses, parameters), with the
//!   binary tensor data extension's framing; [`json_request`], its requests read into
//!   typed buffers in two passes (the first says what the second will allocate);
//! - [`binary`]: the extension's binary form of a tensor's elements;
//! - [`mod@infer`]: version resolution, request parameters (priority), the function's
//!   signature check and output selection, around [`crate::platform::Platform::invoke_with`];
//!   and [`model`], what the metadata, readiness and config endpoints report;
//! - [`signature`]: a request checked against the function's declared signature;
//! - [`generate`]: the generation contract of text-generation functions, shared by the
//!   generate extension and the OpenAI-compatible endpoints.
//!
//! Every malformed request becomes an [`OipError`] (a 400) that says what is wrong and where.

pub mod binary;
pub mod generate;
pub mod infer;
pub mod json;
pub mod json_request;
pub mod signature;

use std::collections::BTreeMap;
use std::time::Duration;

pub use infer::{ModelInfo, infer, infer_streaming, model};

pub use crate::engine::DATATYPES;

/// A tensor's parameter: the byte count of its binary data.
pub const BINARY_DATA_SIZE: &str = "binary_data_size";
use crate::engine::{IoData, IoTensor};

/// A request that does not follow the protocol; the message names the culprit.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct OipError(pub String);

pub(crate) fn err<T>(msg: impl Into<String>) -> Result<T, OipError> {
    Err(OipError(msg.into()))
}

/// One request or tensor parameter's value (the protocol's `InferParameter`).
#[derive(Clone, Debug, PartialEq)]
pub enum ParamValue {
    Bool(bool),
    Int(i64),
    Uint(u64),
    Double(f64),
    String(String),
}

impl ParamValue {
    /// The value as a bool, if it is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            ParamValue::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The value as a non-negative integer, if it is one.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            ParamValue::Int(i) => u64::try_from(*i).ok(),
            ParamValue::Uint(u) => Some(*u),
            _ => None,
        }
    }
}

/// Named parameters of a request or a tensor. Names sluice does not know are kept and ignored.
pub type Parameters = BTreeMap<String, ParamValue>;

/// An output the client asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestedOutput {
    pub name: String,
    /// The output's own parameters (`binary_data` over HTTP).
    pub parameters: Parameters,
}

/// A decoded inference request.
#[derive(Debug, Default)]
pub struct InferRequest {
    /// Echoed in the response.
    pub id: Option<String>,
    pub inputs: Vec<IoTensor>,
    /// The outputs to return, in this order; empty means every output, in the function's order.
    pub outputs: Vec<RequestedOutput>,
    /// Request-level parameters (`priority`, `binary_data_output`, …).
    pub parameters: Parameters,
}

/// An inference's result, with the outputs the request selected.
#[derive(Debug)]
pub struct InferResponse {
    pub model_name: String,
    /// The version that ran (`None` outside a server: `sluice run`).
    pub model_version: Option<String>,
    pub id: Option<String>,
    /// The selected outputs, each with the parameters of its request entry (if any).
    pub outputs: Vec<(IoTensor, Parameters)>,
    /// Where the time went.
    pub timing: InferTiming,
}

/// Where an inference's time went.
#[derive(Clone, Copy, Debug, Default)]
pub struct InferTiming {
    /// From admission to the start of instantiation.
    pub queue: Duration,
    /// Creating the instance (near zero for a warm one).
    pub instantiate: Duration,
    /// Whether a warm instance ran it.
    pub warm: bool,
    /// Time in the guest.
    pub execute: Duration,
    /// Requests that shared the invocation (dynamic batching; 1 or 0 when it ran alone).
    pub batch: u32,
}

/// Picks the requested outputs from `produced`, in the request's order; every output
/// when none is requested. An unknown or repeated name is an error.
pub fn select_outputs(
    produced: Vec<IoTensor>,
    requested: &[RequestedOutput],
) -> Result<Vec<(IoTensor, Parameters)>, OipError> {
    if requested.is_empty() {
        return Ok(produced.into_iter().map(|t| (t, Parameters::new())).collect());
    }
    let mut produced: Vec<Option<IoTensor>> = produced.into_iter().map(Some).collect();
    let mut selected = Vec::with_capacity(requested.len());
    for want in requested {
        let slot = produced.iter_mut().find(|t| t.as_ref().is_some_and(|t| t.name == want.name));
        match slot.and_then(Option::take) {
            Some(t) => selected.push((t, want.parameters.clone())),
            None if selected.iter().any(|(t, _): &(IoTensor, _)| t.name == want.name) => {
                return err(format!("output {:?} is requested twice", want.name));
            }
            None => return err(format!("the function has no output named {:?}", want.name)),
        }
    }
    Ok(selected)
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

/// Triton's model-configuration name of a protocol datatype (`FP32` → `TYPE_FP32`,
/// `BYTES` → `TYPE_STRING`), for the model-config endpoints of both transports.
pub fn triton_data_type(datatype: &str) -> String {
    match datatype {
        "BYTES" => "TYPE_STRING".to_owned(),
        other => format!("TYPE_{other}"),
    }
}

/// Triton's `max_batch_size` of a version: its dynamic batching's size, 0 when it does
/// not batch across requests (a function may still batch inside its own tensors).
pub fn triton_max_batch_size(version: &sluice_registry::FunctionVersion) -> u32 {
    version.options.batching.map_or(0, |b| b.max_batch_size)
}

/// Triton's `dims` of a declared tensor shape: without the batch axis when the model
/// batches (`max_batch_size` > 0), as Triton's clients expect.
pub fn triton_dims(shape: &[i64], max_batch_size: u32) -> Vec<i64> {
    match shape.split_first() {
        Some((_, rest)) if max_batch_size > 0 => rest.to_vec(),
        _ => shape.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batching_model_reports_dims_without_the_batch_axis() {
        assert_eq!(triton_dims(&[-1, 384], 16), [384]);
        assert_eq!(triton_dims(&[-1, 384], 0), [-1, 384]);
        assert_eq!(triton_dims(&[], 16), Vec::<i64>::new());
    }

    fn t(name: &str) -> IoTensor {
        IoTensor { name: name.into(), shape: vec![1], data: IoData::I32(vec![1]) }
    }

    fn want(name: &str) -> RequestedOutput {
        RequestedOutput { name: name.into(), parameters: Parameters::new() }
    }

    #[test]
    fn selects_outputs_in_the_requested_order() {
        let all = || vec![t("a"), t("b"), t("c")];
        let names = |s: Vec<(IoTensor, Parameters)>| s.into_iter().map(|(t, _)| t.name).collect::<Vec<_>>();
        assert_eq!(names(select_outputs(all(), &[]).unwrap()), ["a", "b", "c"]);
        assert_eq!(names(select_outputs(all(), &[want("c"), want("a")]).unwrap()), ["c", "a"]);
        let e = select_outputs(all(), &[want("a"), want("zz")]).unwrap_err();
        assert!(e.0.contains("no output named \"zz\""), "{e}");
        let e = select_outputs(all(), &[want("b"), want("b")]).unwrap_err();
        assert!(e.0.contains("twice"), "{e}");
    }
}
