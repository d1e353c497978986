//! `text-stream`: a generation function without a model, for tests of streaming. It
//! follows the generation contract (`docs/generation.md`) and "generates" its prompt's
//! words, one word per chunk.
//!
//! Inputs: `text_input` BYTES `[1]` (the prompt) or `messages` BYTES `[1]` (a JSON array of
//! `{role, content}`; the prompt is the last message's content), and optionally
//! `max_tokens` INT32 `[1]`, `stop` BYTES `[n]`, and `repeat` INT32 `[1]`: the words are
//! generated `repeat` times over (default 1), and for `repeat` 0 without end, until
//! `max_tokens` or until the caller goes (the test of cancellation). `temperature`,
//! `top_p` and `seed` are accepted and ignored (the output is deterministic).
//!
//! Every step is a small op on the device, read back (so the scheduler sees each
//! step like a decode step), and emits `text_output` BYTES `[1]`: the word, preceded by a
//! space after the first. It stops before the first word that contains a `stop` string
//! (`finish_reason` `stop`), after `max_tokens` words (`length`), or when the words run
//! out (`stop`). It returns `text_output` (the whole text), `finish_reason`,
//! `prompt_tokens` (the prompt's words) and `completion_tokens` (the words generated).
//! A device tensor is held for the whole generation, so a running invocation holds
//! device memory until it ends. It declares its signature, so the generate extension
//! types `repeat` as INT32.

use sluice_guest::{Error, Function, Inputs, IoTensor, Result, Tensor, streaming};

/// The exported function.
struct TextStream;

/// What one request asks for.
struct Request {
    prompt: String,
    max_tokens: Option<u32>,
    stop: Vec<String>,
    /// Passes over the prompt's words; `None`: without end.
    passes: Option<u32>,
}

impl Request {
    fn parse(inputs: &Inputs) -> Result<Request> {
        let prompt = match (inputs.find("text_input"), inputs.find("messages")) {
            (Some(text), _) => one_string(text)?,
            (None, Some(messages)) => last_content(&one_string(messages)?)?,
            (None, None) => return Err(Error::invalid_input("give `text_input` or `messages`")),
        };
        let max_tokens = match inputs.find("max_tokens") {
            None => None,
            Some(t) => Some(u32::try_from(one_i32(t)?).map_err(|_| Error::invalid_input("`max_tokens` is negative"))?),
        };
        let stop = match inputs.find("stop") {
            None => Vec::new(),
            Some(t) => t.as_strings().map_err(invalid)?.into_iter().map(str::to_owned).collect(),
        };
        let passes = match inputs.find("repeat") {
            None => Some(1),
            Some(t) => match one_i32(t)? {
                0 => None,
                n => Some(u32::try_from(n).map_err(|_| Error::invalid_input("`repeat` is negative"))?),
            },
        };
        Ok(Request { prompt, max_tokens, stop, passes })
    }
}

fn invalid(e: Error) -> Error {
    Error::invalid_input(e.message().to_owned())
}

fn one_string(t: &IoTensor) -> Result<String> {
    match t.as_strings().map_err(invalid)?.as_slice() {
        [s] => Ok((*s).to_owned()),
        other => Err(Error::invalid_input(format!("`{}` must hold one string, not {}", t.name, other.len()))),
    }
}

fn one_i32(t: &IoTensor) -> Result<i32> {
    match t.as_i32().map_err(invalid)? {
        [v] => Ok(*v),
        other => Err(Error::invalid_input(format!("`{}` must hold one INT32, not {}", t.name, other.len()))),
    }
}

/// The content of the last message of a JSON array of `{role, content}`.
fn last_content(messages: &str) -> Result<String> {
    let parsed: serde_json::Value =
        serde_json::from_str(messages).map_err(|e| Error::invalid_input(format!("`messages` is not JSON: {e}")))?;
    let last = parsed.as_array().and_then(|m| m.last());
    match last.and_then(|m| m.get("content")).and_then(|c| c.as_str()) {
        Some(content) => Ok(content.to_owned()),
        None => Err(Error::invalid_input("`messages` must be a non-empty array of {role, content}")),
    }
}

impl Function for TextStream {
    fn run(inputs: Inputs) -> Result<Vec<IoTensor>> {
        let request = Request::parse(&inputs)?;
        let words: Vec<&str> = request.prompt.split_whitespace().collect();
        let total = request.passes.map(|p| words.len() as u64 * u64::from(p));
        let (mut text, mut generated, mut finish) = (String::new(), 0u32, "stop");
        let one = Tensor::from_i32(&[1], &[1])?;
        let mut step = Tensor::from_i32(&[1], &[0])?;
        while !words.is_empty() && total.is_none_or(|t| u64::from(generated) < t) {
            if request.max_tokens.is_some_and(|max| generated >= max) {
                finish = "length";
                break;
            }
            let word = words[generated as usize % words.len()];
            if request.stop.iter().any(|s| !s.is_empty() && word.contains(s.as_str())) {
                break;
            }
            // One decode-like step on the device: the step counter, read back.
            step = step.add(&one)?;
            let counted = step.to_vec_i32()?;
            debug_assert_eq!(counted, [generated as i32 + 1]);
            let piece = if generated == 0 { word.to_owned() } else { format!(" {word}") };
            streaming::emit(&[IoTensor::text("text_output", &[piece.as_str()])])?;
            text.push_str(&piece);
            generated += 1;
        }
        Ok(vec![
            IoTensor::text("text_output", &[text]),
            IoTensor::text("finish_reason", &[finish]),
            IoTensor::i32("prompt_tokens", &[1], vec![words.len() as i32]),
            IoTensor::i32("completion_tokens", &[1], vec![generated as i32]),
        ])
    }
}

sluice_guest::export!(TextStream);

sluice_guest::signature! {
    inputs: [
        "text_input": BYTES[1] optional,
        "messages": BYTES[1] optional,
        "max_tokens": INT32[1] optional,
        "temperature": FP32[1] optional,
        "top_p": FP32[1] optional,
        "seed": INT64[1] optional,
        "stop": BYTES[-1] optional,
        "repeat": INT32[1] optional,
    ],
    outputs: [
        "text_output": BYTES[1],
        "finish_reason": BYTES[1],
        "prompt_tokens": INT32[1],
        "completion_tokens": INT32[1],
    ],
}
