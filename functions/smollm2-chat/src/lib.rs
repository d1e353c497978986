//! `smollm2-chat`: SmolLM2-135M-Instruct, a llama in a GGUF file, as a sluice function.
//!
//! One artifact, `model`: the GGUF file (`cargo xtask fetch-llm`). Everything the
//! function needs besides the weights comes from its metadata: hyper-parameters, the
//! byte-level BPE tokenizer (`tokenizer.rs`), the ChatML template with its default
//! system prompt (`template.rs`), the end-of-sequence token.
//!
//! Inputs (one of the first two):
//! - `messages`: BYTES `[1]`, a JSON array of `{role, content}`, rendered by the chat
//!   template with the generation prompt;
//! - `text_input`: BYTES `[1]`, a raw prompt (no template);
//! - `max_tokens`: INT32 `[1]`, most tokens to generate (default 128; clamped to what
//!   the context leaves after the prompt);
//! - `temperature`: FP32 `[1]`, 0 (the default) is greedy; `top_p`: FP32 `[1]` in
//!   `(0, 1]` (default 1); `seed`: INT64 `[1]` (default 0): with a temperature the
//!   device's `sample` op draws each token, step i with the seed `seed + i`;
//! - `stop`: BYTES `[n]`, strings that end the generation (the text ends before one);
//! - `return_logits`: INT32 `[1]`, 1 to return the logits of every step.
//!
//! Outputs: `text_output` BYTES `[1]` (the generated text, without the end-of-sequence
//! token or a stop string), `finish_reason` BYTES `[1]` (`stop`: the end-of-sequence
//! token or a stop string; `length`: `max_tokens` reached), `prompt_tokens` and
//! `completion_tokens` INT32 `[1]`, `token_ids` INT32 `[n]` (every token generated, an
//! end-of-sequence token included; `completion_tokens` is n), and with
//! `return_logits`, `logits` FP32 `[n, vocab]` (row i the logits token i was chosen
//! from) and `prompt_ids` INT32 `[p]` (the prompt's tokens), for tests.
//!
//! Generation: the prompt in one step (prefill), then one step per token over the
//! per-layer KV caches (`model.rs`). Each new piece of text is emitted as a chunk
//! ([`on_text`]): a streaming caller gets the tokens as they are made.
//! What the metadata gives (tokenizer, template, hyper-parameters) is built once per
//! instance ([`setup`]); warm instances keep it, never tensor handles.

mod model;
mod template;
mod tokenizer;

use std::sync::OnceLock;

use serde_json::Value;
use sluice_guest::{Error, Function, Inputs, IoTensor, Result, artifacts, streaming};
use tokenizers::Tokenizer;

use model::{ARTIFACT, Config, Model};

/// Tokens generated when the request does not say.
const DEFAULT_MAX_TOKENS: i32 = 128;

/// Sends the text a generated token added (when it is sendable: not an incomplete
/// character, not the possible start of a stop string) to a streaming caller as a
/// `text_output` chunk (a one-shot caller's chunks are dropped). Fails with `cancelled` once the caller has
/// gone, which ends the generation at this step.
fn on_text(piece: &str) -> Result<()> {
    if piece.is_empty() {
        return Ok(());
    }
    streaming::emit(&[IoTensor::text("text_output", &[piece])])
}

/// What a request asks for.
struct Request {
    prompt: String,
    max_tokens: i32,
    temperature: f32,
    top_p: f32,
    seed: u64,
    stop: Vec<String>,
    return_logits: bool,
}

fn one<'a, T>(inputs: &'a Inputs, name: &str, get: impl Fn(&'a IoTensor) -> Result<&'a [T]>) -> Result<Option<&'a T>> {
    let Some(t) = inputs.find(name) else { return Ok(None) };
    match get(t)? {
        [v] => Ok(Some(v)),
        other => Err(Error::invalid_input(format!("`{name}` must hold one element, not {}", other.len()))),
    }
}

fn text(inputs: &Inputs, name: &str) -> Result<Option<String>> {
    let Some(t) = inputs.find(name) else { return Ok(None) };
    match t.as_strings()?.as_slice() {
        [s] => Ok(Some((*s).to_owned())),
        other => Err(Error::invalid_input(format!("`{name}` must be BYTES [1], not {} elements", other.len()))),
    }
}

/// What the function takes from the GGUF metadata.
struct Setup {
    config: Config,
    tokenizer: Tokenizer,
    template: Option<template::ChatTemplate>,
    eos: Option<u32>,
    /// The token put before every prompt, if the file asks for one.
    bos: Option<u32>,
}

/// The setup of this instance, built on its first invocation.
fn setup() -> Result<&'static Setup> {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    if let Some(s) = SETUP.get() {
        return Ok(s);
    }
    let meta: Value = serde_json::from_str(&artifacts::metadata(ARTIFACT)?)
        .map_err(|e| Error::failed(format!("the GGUF metadata is not JSON: {e}")))?;
    let id = |k: &str| meta[k].as_u64().map(|v| v as u32);
    let setup = Setup {
        config: Config::from_metadata(&meta)?,
        tokenizer: tokenizer::from_metadata(&meta)?,
        template: meta["tokenizer.chat_template"].as_str().map(template::ChatTemplate::parse).transpose()?,
        eos: id("tokenizer.ggml.eos_token_id"),
        bos: id("tokenizer.ggml.bos_token_id").filter(|_| meta["tokenizer.ggml.add_bos_token"].as_bool() == Some(true)),
    };
    Ok(SETUP.get_or_init(|| setup))
}

impl Request {
    fn parse(inputs: &Inputs, setup: &Setup) -> Result<Request> {
        let prompt = match (text(inputs, "messages")?, text(inputs, "text_input")?) {
            (Some(json), None) => {
                let template =
                    setup.template.as_ref().ok_or_else(|| Error::failed("the GGUF file has no chat template"))?;
                template.render(&template::messages(&json)?)
            }
            (None, Some(raw)) => raw,
            _ => return Err(Error::invalid_input("give exactly one of `messages` and `text_input`")),
        };
        let max_tokens = one(inputs, "max_tokens", IoTensor::as_i32)?.copied().unwrap_or(DEFAULT_MAX_TOKENS);
        let temperature = one(inputs, "temperature", IoTensor::as_f32)?.copied().unwrap_or(0.0);
        let top_p = one(inputs, "top_p", IoTensor::as_f32)?.copied().unwrap_or(1.0);
        let seed = one(inputs, "seed", IoTensor::as_i64)?.copied().unwrap_or(0);
        if max_tokens < 1 {
            return Err(Error::invalid_input(format!("`max_tokens` must be at least 1, got {max_tokens}")));
        }
        if !(temperature.is_finite() && temperature >= 0.0) {
            return Err(Error::invalid_input(format!("`temperature` must be finite and >= 0, got {temperature}")));
        }
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(Error::invalid_input(format!("`top_p` must be in (0, 1], got {top_p}")));
        }
        let stop = match inputs.find("stop") {
            Some(t) => t.as_strings()?.into_iter().filter(|s| !s.is_empty()).map(str::to_owned).collect(),
            None => Vec::new(),
        };
        let return_logits = one(inputs, "return_logits", IoTensor::as_i32)?.is_some_and(|&v| v == 1);
        Ok(Request { prompt, max_tokens, temperature, top_p, seed: seed as u64, stop, return_logits })
    }
}

/// The generation so far.
struct Generated {
    ids: Vec<u32>,
    logits: Vec<f32>,
    text: String,
    finish: &'static str,
}

struct Chat;

impl Function for Chat {
    fn run(inputs: Inputs) -> Result<Vec<IoTensor>> {
        let setup = setup()?;
        let request = Request::parse(&inputs, setup)?;
        let (config, tokenizer, eos) = (setup.config.clone(), &setup.tokenizer, setup.eos);
        let mut prompt = tokenizer::encode(tokenizer, &request.prompt)?;
        if let Some(bos) = setup.bos {
            prompt.insert(0, bos);
        }
        if prompt.is_empty() || prompt.len() >= config.context as usize {
            return Err(Error::invalid_input(format!(
                "the prompt is {} tokens; it must hold 1 to {} (the context)",
                prompt.len(),
                config.context - 1
            )));
        }
        let max_tokens = (request.max_tokens as u32).min(config.context - prompt.len() as u32);
        let mut model = Model::load(config, prompt.len() as u32 + max_tokens)?;
        let generated = generate(&mut model, tokenizer, &prompt, max_tokens, eos, &request)?;
        let n = generated.ids.len();
        let mut out = vec![
            IoTensor::text("text_output", &[&generated.text]),
            IoTensor::text("finish_reason", &[generated.finish]),
            IoTensor::i32("prompt_tokens", &[1], vec![prompt.len() as i32]),
            IoTensor::i32("completion_tokens", &[1], vec![n as i32]),
            IoTensor::i32("token_ids", &[n as u64], generated.ids.iter().map(|&t| t as i32).collect()),
        ];
        if request.return_logits {
            let vocab = generated.logits.len().checked_div(n).unwrap_or(0);
            out.push(IoTensor::f32("logits", &[n as u64, vocab as u64], generated.logits));
            out.push(IoTensor::i32("prompt_ids", &[prompt.len() as u64], prompt.iter().map(|&t| t as i32).collect()));
        }
        Ok(out)
    }
}

/// Prefill, then decode steps until the end-of-sequence token, a stop string,
/// `max_tokens`, or the caller has gone ([`on_text`] fails).
fn generate(
    model: &mut Model,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    max_tokens: u32,
    eos: Option<u32>,
    request: &Request,
) -> Result<Generated> {
    let mut g = Generated { ids: Vec::new(), logits: Vec::new(), text: String::new(), finish: "length" };
    let mut text_ids: Vec<u32> = Vec::new();
    // Bytes of `g.text` already sent to the caller.
    let mut emitted = 0;
    let mut logits = model.step(prompt)?;
    while g.ids.len() < max_tokens as usize {
        let row = if request.return_logits { logits.to_vec_f32()? } else { Vec::new() };
        let chosen = if request.temperature > 0.0 {
            let seed = request.seed.wrapping_add(g.ids.len() as u64);
            logits.sample(request.temperature, 0, request.top_p, seed)?
        } else {
            logits.argmax()?
        };
        let next = chosen.to_vec_i64()?[0] as u32;
        g.ids.push(next);
        if request.return_logits {
            g.logits.extend_from_slice(&row);
        }
        if Some(next) == eos {
            g.finish = "stop";
            break;
        }
        text_ids.push(next);
        let text = tokenizer::decode(tokenizer, &text_ids)?;
        if let Some(cut) = request.stop.iter().filter_map(|s| text.find(s.as_str())).min() {
            g.text = text[..cut].to_owned();
            g.finish = "stop";
            break;
        }
        // A character still incomplete (a byte-level token ends inside it) waits, and so
        // does text that may be the start of a stop string.
        if !text.ends_with('\u{fffd}') {
            let sendable = text.len() - stop_prefix_len(&text, &request.stop);
            if sendable > emitted {
                on_text(&text[emitted..sendable])?;
                emitted = sendable;
            }
            g.text = text;
        }
        if g.ids.len() == max_tokens as usize {
            break;
        }
        logits = model.step(&[next])?;
    }
    on_text(g.text.get(emitted..).unwrap_or(""))?;
    Ok(g)
}

/// The length of the longest end of `text` that is the start of a stop string (and so
/// must not be sent before the next token shows whether the stop string completes).
fn stop_prefix_len(text: &str, stop: &[String]) -> usize {
    stop.iter()
        .filter_map(|s| (1..s.len()).rev().find(|&k| s.is_char_boundary(k) && text.ends_with(&s[..k])))
        .max()
        .unwrap_or(0)
}

sluice_guest::export!(Chat);
