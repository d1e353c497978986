//! The generation contract (`docs/generation.md`): the tensors a text-generation
//! function takes and returns, shared by the generate extension's endpoints and the
//! OpenAI-compatible ones, and the generate extension's JSON form of tensors.
//!
//! A generation function takes `text_input` (BYTES `[1]`, the prompt) or `messages`
//! (BYTES `[1]`, a JSON array of `{role, content}`), and optionally `max_tokens` INT32
//! `[1]`, `temperature` FP32 `[1]`, `top_p` FP32 `[1]`, `seed` INT64 `[1]` and `stop`
//! BYTES `[n]`. It emits chunks holding `text_output` BYTES `[1]` (the new piece of
//! text) and returns `text_output` (the whole text), `finish_reason` BYTES `[1]` (`stop`
//! or `length`), `prompt_tokens` INT32 `[1]` and `completion_tokens` INT32 `[1]`.

use serde_json::{Map, Value};

use super::{OipError, err};
use crate::engine::{IoData, IoTensor};

/// The prompt (BYTES `[1]`).
pub const TEXT_INPUT: &str = "text_input";
/// A chat's messages (BYTES `[1]`: the JSON array of `{role, content}`).
pub const MESSAGES: &str = "messages";
/// Most tokens to generate (INT32 `[1]`).
pub const MAX_TOKENS: &str = "max_tokens";
/// Sampling temperature (FP32 `[1]`; 0: greedy).
pub const TEMPERATURE: &str = "temperature";
/// Nucleus sampling's probability mass (FP32 `[1]`).
pub const TOP_P: &str = "top_p";
/// Sampling seed (INT64 `[1]`).
pub const SEED: &str = "seed";
/// Strings that end the generation (BYTES `[n]`).
pub const STOP: &str = "stop";
/// A chunk's new text, or the whole text at the end (BYTES `[1]`).
pub const TEXT_OUTPUT: &str = "text_output";
/// Why the generation ended: `stop` or `length` (BYTES `[1]`).
pub const FINISH_REASON: &str = "finish_reason";
/// Tokens of the prompt (INT32 `[1]`).
pub const PROMPT_TOKENS: &str = "prompt_tokens";
/// Tokens generated (INT32 `[1]`).
pub const COMPLETION_TOKENS: &str = "completion_tokens";

/// The optional inputs of the contract, with their datatypes.
pub const OPTIONS: [(&str, &str); 5] =
    [(MAX_TOKENS, "INT32"), (TEMPERATURE, "FP32"), (TOP_P, "FP32"), (SEED, "INT64"), (STOP, "BYTES")];

/// The datatype the contract gives the input `name`, if it names one.
pub fn contract_datatype(name: &str) -> Option<&'static str> {
    match name {
        TEXT_INPUT | MESSAGES => Some("BYTES"),
        _ => OPTIONS.iter().find(|(n, _)| *n == name).map(|(_, d)| *d),
    }
}

/// An input of the generate extension from its JSON value: a string or a number is a
/// tensor of shape `[1]`, an array of them a tensor of shape `[n]`. Its datatype is
/// `declared` (the function's signature), else the contract's, else BYTES for strings,
/// INT64 for integers and FP32 for other numbers.
pub fn json_input(name: &str, value: &Value, declared: Option<&str>) -> Result<IoTensor, OipError> {
    let (elements, shape) = match value {
        Value::Array(items) => (items.as_slice(), vec![items.len() as u64]),
        scalar => (std::slice::from_ref(scalar), vec![1]),
    };
    let datatype = match declared.or_else(|| contract_datatype(name)) {
        Some(d) => d,
        None if elements.iter().all(Value::is_string) => "BYTES",
        None if elements.iter().all(|v| v.is_i64()) => "INT64",
        None => "FP32",
    };
    let bad = |what: &str| OipError(format!("input {name:?}: {what}"));
    let data = match datatype {
        "BYTES" => IoData::Bytes(
            elements
                .iter()
                .map(|v| v.as_str().map(|s| s.as_bytes().to_vec()).ok_or_else(|| bad("must be a string or strings")))
                .collect::<Result<_, _>>()?,
        ),
        "FP32" => IoData::F32(
            elements
                .iter()
                .map(|v| v.as_f64().map(|x| x as f32).ok_or_else(|| bad("must be a number or numbers")))
                .collect::<Result<_, _>>()?,
        ),
        "INT32" => IoData::I32(
            elements
                .iter()
                .map(|v| v.as_i64().and_then(|x| i32::try_from(x).ok()).ok_or_else(|| bad("must be INT32 integers")))
                .collect::<Result<_, _>>()?,
        ),
        "INT64" => IoData::I64(
            elements.iter().map(|v| v.as_i64().ok_or_else(|| bad("must be integers"))).collect::<Result<_, _>>()?,
        ),
        "UINT8" => IoData::U8(
            elements
                .iter()
                .map(|v| v.as_u64().and_then(|x| u8::try_from(x).ok()).ok_or_else(|| bad("must be UINT8 integers")))
                .collect::<Result<_, _>>()?,
        ),
        other => return err(format!("input {name:?}: datatype {other} cannot be given to the generate extension")),
    };
    Ok(IoTensor { name: name.to_owned(), shape, data })
}

/// An output as the generate extension's JSON: one element as a scalar, more as an
/// array; BYTES as (lossy UTF-8) strings.
pub fn output_json(t: &IoTensor) -> Value {
    let all = super::json::data_json(&t.data);
    match all {
        Value::Array(mut items) if items.len() == 1 => items.remove(0),
        other => other,
    }
}

/// Outputs as a JSON object by name, with `model_name` and `model_version` first.
pub fn outputs_object<'a>(
    model_name: &str,
    model_version: Option<&str>,
    outputs: impl IntoIterator<Item = &'a IoTensor>,
) -> Value {
    let mut object = Map::new();
    object.insert("model_name".into(), Value::from(model_name));
    if let Some(v) = model_version {
        object.insert("model_version".into(), Value::from(v));
    }
    for t in outputs {
        object.insert(t.name.clone(), output_json(t));
    }
    Value::Object(object)
}

/// The one string of a BYTES `[1]` tensor (lossy UTF-8).
fn one_string(t: &IoTensor) -> Option<String> {
    match &t.data {
        IoData::Bytes(v) if v.len() == 1 => Some(String::from_utf8_lossy(&v[0]).into_owned()),
        _ => None,
    }
}

/// The one count of an INT32 or INT64 `[1]` tensor.
fn one_count(t: &IoTensor) -> Option<u64> {
    match &t.data {
        IoData::I32(v) if v.len() == 1 => u64::try_from(v[0]).ok(),
        IoData::I64(v) if v.len() == 1 => u64::try_from(v[0]).ok(),
        _ => None,
    }
}

/// The new text of a chunk, if it holds a `text_output`.
pub fn chunk_text(chunk: &[IoTensor]) -> Option<String> {
    chunk.iter().find(|t| t.name == TEXT_OUTPUT).and_then(one_string)
}

/// A finished generation, read from a function's final outputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generation {
    /// The whole text.
    pub text: String,
    /// `stop` or `length` (`stop` when the function does not say).
    pub finish_reason: String,
    /// Tokens of the prompt (0 when the function does not say).
    pub prompt_tokens: u64,
    /// Tokens generated (0 when the function does not say).
    pub completion_tokens: u64,
}

impl Generation {
    /// Reads the contract's outputs; a function without a BYTES `[1]` `text_output` does
    /// not follow the contract.
    pub fn from_outputs(function: &str, outputs: &[IoTensor]) -> Result<Generation, OipError> {
        let find = |name: &str| outputs.iter().find(|t| t.name == name);
        let Some(text) = find(TEXT_OUTPUT).and_then(one_string) else {
            return err(format!(
                "function {function:?} does not follow the generation contract: it returned no BYTES [1] output \
                 \"{TEXT_OUTPUT}\" (see docs/generation.md)"
            ));
        };
        Ok(Generation {
            text,
            finish_reason: find(FINISH_REASON).and_then(one_string).unwrap_or_else(|| "stop".to_owned()),
            prompt_tokens: find(PROMPT_TOKENS).and_then(one_count).unwrap_or(0),
            completion_tokens: find(COMPLETION_TOKENS).and_then(one_count).unwrap_or(0),
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn inputs_take_the_declared_then_the_contract_then_the_value_type() {
        let t = json_input("text_input", &json!("hi there"), None).unwrap();
        assert_eq!((t.shape, t.data), (vec![1], IoData::Bytes(vec![b"hi there".to_vec()])));
        let t = json_input("max_tokens", &json!(7), None).unwrap();
        assert_eq!(t.data, IoData::I32(vec![7]));
        let t = json_input("seed", &json!(7), None).unwrap();
        assert_eq!(t.data, IoData::I64(vec![7]));
        let t = json_input("stop", &json!(["a", "b"]), None).unwrap();
        assert_eq!((t.shape, t.data), (vec![2], IoData::Bytes(vec![b"a".to_vec(), b"b".to_vec()])));
        assert_eq!(json_input("x", &json!([1, 2]), None).unwrap().data, IoData::I64(vec![1, 2]));
        assert_eq!(json_input("x", &json!(0.5), None).unwrap().data, IoData::F32(vec![0.5]));
        assert_eq!(json_input("x", &json!(3), Some("INT32")).unwrap().data, IoData::I32(vec![3]));
        let e = json_input("max_tokens", &json!("ten"), None).unwrap_err();
        assert!(e.0.contains("max_tokens"), "{e}");
        assert!(json_input("x", &json!([[1]]), None).is_err(), "nested arrays are refused");
        assert!(json_input("x", &json!(1), Some("FP16")).is_err());
    }

    #[test]
    fn a_generation_needs_its_text() {
        let outputs = vec![
            IoTensor { name: TEXT_OUTPUT.into(), shape: vec![1], data: IoData::Bytes(vec![b"a b".to_vec()]) },
            IoTensor { name: FINISH_REASON.into(), shape: vec![1], data: IoData::Bytes(vec![b"length".to_vec()]) },
            IoTensor { name: COMPLETION_TOKENS.into(), shape: vec![1], data: IoData::I32(vec![2]) },
        ];
        let g = Generation::from_outputs("f", &outputs).unwrap();
        assert_eq!(
            (g.text.as_str(), g.finish_reason.as_str(), g.prompt_tokens, g.completion_tokens),
            ("a b", "length", 0, 2)
        );
        assert_eq!(chunk_text(&outputs), Some("a b".to_owned()));
        let e = Generation::from_outputs("echo", &outputs[1..]).unwrap_err();
        assert!(e.0.contains("generation contract"), "{e}");
        let v = outputs_object("f", Some("1"), &outputs);
        assert_eq!(
            v,
            json!({"model_name": "f", "model_version": "1", "text_output": "a b", "finish_reason": "length", "completion_tokens": 2})
        );
    }
}
