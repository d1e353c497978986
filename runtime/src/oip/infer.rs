//! The one entry point of both transports into the platform: [`infer`] and [`model`].
//!
//! [`infer`] resolves the version, reads the request parameters sluice honours, checks
//! the inputs against the function's signature before any guest code runs, invokes, and
//! selects the outputs. Parameters it honours (request level):
//!
//! - `priority`: `"batch"` or `"latency"`, or Triton's integer levels (`0`: the
//!   function's own; `1`: the highest, i.e. the function's own; `2` and above: batch).
//!   A request may only lower its class, never raise it above the function's.
//! - `timeout`: Triton's request timeout, in microseconds (`0`: none). It shortens the
//!   function's own time limit, never extends it; past it the invocation is stopped and
//!   fails with `timeout` (504).
//!
//! Every other parameter (`sequence_id`, the HTTP transport's `binary_data_output`, …)
//! is ignored here without error.

use std::sync::Arc;
use std::time::Duration;

use sluice_registry::{FunctionVersion, PriorityClass};

use super::signature::check_request;
use super::{InferRequest, InferResponse, InferTiming, ParamValue, Parameters, select_outputs};
use crate::engine::{ChunkSink, IoTensor, Signature, read_signature};
use crate::platform::{Invocation, InvokeOptions, LoadedFunction, Platform, PlatformError};

/// Runs `request` on version `version` (the serving one if `None`) of `tenant/name`.
pub async fn infer(
    platform: &Arc<Platform>,
    tenant: &str,
    name: &str,
    version: Option<u32>,
    request: InferRequest,
) -> Result<InferResponse, PlatformError> {
    infer_streaming(platform, tenant, name, version, request, None).await
}

/// [`infer`], with the chunks the function emits sent to `stream` (the generate
/// extension's streaming endpoints).
pub async fn infer_streaming(
    platform: &Arc<Platform>,
    tenant: &str,
    name: &str,
    version: Option<u32>,
    request: InferRequest,
    stream: Option<&ChunkSink>,
) -> Result<InferResponse, PlatformError> {
    let InferRequest { id, inputs, outputs: requested, parameters } = request;
    // Each codec checks ranks as it parses; this holds for every transport.
    if let Some(t) = inputs.iter().find(|t| t.shape.len() > sluice_host_api::MAX_RANK) {
        let (rank, max) = (t.shape.len(), sluice_host_api::MAX_RANK);
        return Err(PlatformError::InvalidRequest(format!(
            "input {:?}: rank {rank} is above the maximum of {max}",
            t.name
        )));
    }
    let priority = requested_priority(&parameters)?;
    let timeout = requested_timeout(&parameters)?;
    let check = |f: &LoadedFunction, inputs: &[IoTensor]| match &f.signature {
        Some(signature) => check_request(signature, inputs, &requested).map_err(|e| PlatformError::InvalidRequest(e.0)),
        None => Ok(()),
    };
    let options = InvokeOptions { version, priority, check: Some(&check), timeout, stream };
    let Invocation { function, output, queue, batch } = platform.invoke_with(tenant, name, inputs, options).await?;
    let outputs = select_outputs(output.outputs, &requested).map_err(|e| PlatformError::InvalidRequest(e.0))?;
    Ok(InferResponse {
        model_name: name.to_owned(),
        model_version: Some(function.version.version.to_string()),
        id,
        outputs,
        timing: InferTiming {
            queue,
            instantiate: output.instantiate,
            warm: output.warm,
            execute: output.execute,
            batch,
        },
    })
}

/// The class the request asks for, if any.
fn requested_priority(parameters: &Parameters) -> Result<Option<PriorityClass>, PlatformError> {
    let bad = |v: &ParamValue| {
        PlatformError::InvalidRequest(format!(
            "parameter \"priority\" must be \"latency\", \"batch\" or a non-negative integer, not {v:?}"
        ))
    };
    Ok(match parameters.get("priority") {
        None => None,
        Some(ParamValue::String(s)) if s == "latency" => Some(PriorityClass::Latency),
        Some(ParamValue::String(s)) if s == "batch" => Some(PriorityClass::Batch),
        Some(v) => match v.as_u64().ok_or_else(|| bad(v))? {
            0 => None,
            1 => Some(PriorityClass::Latency),
            _ => Some(PriorityClass::Batch),
        },
    })
}

/// The time limit the request asks for, if any (Triton's `timeout`, in microseconds).
fn requested_timeout(parameters: &Parameters) -> Result<Option<Duration>, PlatformError> {
    match parameters.get("timeout") {
        None => Ok(None),
        Some(v) => match v.as_u64() {
            Some(0) => Ok(None),
            Some(us) => Ok(Some(Duration::from_micros(us))),
            None => Err(PlatformError::InvalidRequest(format!(
                "parameter \"timeout\" must be a non-negative integer (microseconds), not {v:?}"
            ))),
        },
    }
}

/// A model (function) as the protocol's metadata, readiness and config endpoints see it.
#[derive(Debug)]
pub struct ModelInfo {
    /// Every published version, ascending (staged drafts show only under their own
    /// version; every version while none is published).
    pub versions: Vec<u32>,
    /// The version asked about (the serving one when none was named: a staged draft
    /// never stands for the model).
    pub version: FunctionVersion,
    /// Whether that version can serve now: it is published (the serving one, loaded or
    /// loadable, or an older one), and the server is ready. A staged draft is not.
    pub ready: bool,
    /// Its declared signature, if any.
    pub signature: Option<Signature>,
}

/// `tenant/name` at `version` (the serving one if `None`); a version that does not exist is a 404.
pub async fn model(
    platform: &Arc<Platform>,
    tenant: &str,
    name: &str,
    version: Option<u32>,
) -> Result<ModelInfo, PlatformError> {
    let (platform, tenant, name) = (platform.clone(), tenant.to_owned(), name.to_owned());
    tokio::task::spawn_blocking(move || {
        let info = platform.function_info(&tenant, &name)?;
        let record = &info.record;
        let version = match version {
            None => record.serving().unwrap_or_else(|| record.latest()).clone(),
            Some(v) => platform.registry().get_version(&tenant, &name, v)?,
        };
        // The serving version's signature is in memory; another's is read from its component.
        let signature = match platform.cached(&tenant, &name).filter(|f| f.version.version == version.version) {
            Some(loaded) => loaded.signature.as_deref().cloned(),
            None => read_signature(&platform.registry().read_blob(&version.component.digest)?)?,
        };
        let published: Vec<u32> = record.versions.iter().filter(|v| !v.staged).map(|v| v.version).collect();
        let versions = match published.is_empty() {
            true => record.versions.iter().map(|v| v.version).collect(),
            false => published,
        };
        Ok(ModelInfo { versions, ready: platform.is_ready() && !version.staged, version, signature })
    })
    .await
    .map_err(|e| PlatformError::internal("reading a model", e))?
}
