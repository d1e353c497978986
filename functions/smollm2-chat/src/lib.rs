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
//! sequence's per-layer KV caches (`model.rs`). Each new piece of text is emitted as a
//! chunk: a streaming caller gets the tokens as they are made.
//!
//! Continuous batching: the function is a serving function ([`sluice_guest::serving`]).
//! Its serving invocation takes requests from the host's queue between steps, prefills
//! each new one alone, and runs one decode step for every active sequence at once
//! ([`Model::step_many`]: one pass over the weights, and one `kv-attention` launch per
//! block for every sequence's RoPE, KV writes and attention), up to [`MAX_SEQUENCES`]; a
//! sequence leaves when it ends or its caller goes. The greedy sequences' next tokens
//! come from one `argmax` over the step's logits and one read. A plain invocation (the
//! function run outside a serving invocation, e.g. by `sluice run`) generates its one request.
//! What the metadata gives (tokenizer, template, hyper-parameters) is built once per
//! instance ([`setup`]); warm instances keep it, never tensor handles.

mod model;
mod template;
mod tokenizer;

use std::sync::OnceLock;

use serde_json::Value;
use std::time::Duration;

use sluice_guest::serving;
use sluice_guest::{Error, Function, Inputs, IoTensor, Result, Tensor, artifacts, streaming};
use tokenizers::Tokenizer;

use model::{ARTIFACT, Cache, Config, Model};

/// Tokens generated when the request does not say.
const DEFAULT_MAX_TOKENS: i32 = 128;

/// Sequences one serving invocation decodes together at most.
pub const MAX_SEQUENCES: u32 = 8;

/// How long an idle serving invocation waits for a request before it returns.
const IDLE_WAIT: Duration = Duration::from_millis(200);

/// Where a sequence's chunks and answer go.
enum Caller {
    /// The invocation's own caller (a plain invocation): chunks by `streaming::emit`,
    /// the answer is `run`'s result.
    Invocation,
    /// A request of a serving invocation.
    Served(serving::Request),
}

impl Caller {
    /// Sends the text a generated token added (when it is sendable: not an incomplete
    /// character, not the possible start of a stop string) as a `text_output` chunk (a
    /// one-shot caller's chunks are dropped). Fails with `cancelled` once the caller
    /// has gone, which ends the generation at this step.
    fn on_text(&self, piece: &str) -> Result<()> {
        if piece.is_empty() {
            return Ok(());
        }
        let chunk = [IoTensor::text("text_output", &[piece])];
        match self {
            Caller::Invocation => streaming::emit(&chunk),
            Caller::Served(r) => r.emit(&chunk),
        }
    }
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

impl Request {
    /// Greedy, without its logits returned: its token can be read with a whole step's.
    fn greedy_token_only(&self) -> bool {
        self.temperature == 0.0 && !self.return_logits
    }
}

/// What a sequence's next token is chosen from.
enum Next {
    /// Its logits `[1, vocab]`, queued on the device.
    Logits(Tensor),
    /// Its greedy token, read with those of the other greedy sequences of its step (one
    /// `argmax` over the step's logits and one read, not one of each per sequence).
    Token(u32),
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

/// One sequence being generated: its request, caches and text so far, and what its
/// next token is chosen from.
struct Sequence {
    caller: Caller,
    request: Request,
    prompt: Vec<u32>,
    max_tokens: u32,
    cache: Cache,
    g: Generated,
    text_ids: Vec<u32>,
    /// Bytes of `g.text` already sent to the caller.
    emitted: usize,
    next: Next,
}

impl Sequence {
    /// Parses and tokenizes a request and prefills its prompt; on an error the caller
    /// comes back with it, to be answered.
    fn start(
        model: &Model,
        setup: &Setup,
        inputs: &Inputs,
        caller: Caller,
    ) -> std::result::Result<Sequence, (Caller, Error)> {
        match Self::prefill(model, setup, inputs) {
            Ok((request, prompt, max_tokens, cache, logits)) => {
                let g = Generated { ids: Vec::new(), logits: Vec::new(), text: String::new(), finish: "length" };
                let text_ids = Vec::new();
                let next = Next::Logits(logits);
                Ok(Sequence { caller, request, prompt, max_tokens, cache, g, text_ids, emitted: 0, next })
            }
            Err(e) => Err((caller, e)),
        }
    }

    /// The request, its prompt's tokens, its token budget, and its caches and logits
    /// after the prompt.
    fn prefill(model: &Model, setup: &Setup, inputs: &Inputs) -> Result<(Request, Vec<u32>, u32, Cache, Tensor)> {
        let request = Request::parse(inputs, setup)?;
        let context = setup.config.context;
        let mut prompt = tokenizer::encode(&setup.tokenizer, &request.prompt)?;
        if let Some(bos) = setup.bos {
            prompt.insert(0, bos);
        }
        if prompt.is_empty() || prompt.len() >= context as usize {
            return Err(Error::invalid_input(format!(
                "the prompt is {} tokens; it must hold 1 to {} (the context)",
                prompt.len(),
                context - 1
            )));
        }
        let max_tokens = (request.max_tokens as u32).min(context - prompt.len() as u32);
        let mut cache = model.cache(prompt.len() as u32 + max_tokens)?;
        let logits = model.step(&mut cache, &prompt)?;
        Ok((request, prompt, max_tokens, cache, logits))
    }

    /// Chooses the next token (from the logits, unless a step's argmax already did) and
    /// sends its text: `Some(token)` when the sequence goes on (the token is to be run),
    /// `None` when it has ended (the end-of-sequence token, a stop string, `max_tokens`,
    /// or its caller has gone).
    fn choose(&mut self, setup: &Setup) -> Result<Option<u32>> {
        let request = &self.request;
        let (next, row) = match &self.next {
            Next::Token(token) => (*token, Vec::new()),
            Next::Logits(logits) => {
                let row = if request.return_logits { logits.to_vec_f32()? } else { Vec::new() };
                let chosen = if request.temperature > 0.0 {
                    let seed = request.seed.wrapping_add(self.g.ids.len() as u64);
                    logits.sample(request.temperature, 0, request.top_p, seed)?
                } else {
                    logits.argmax()?
                };
                (chosen.to_vec_i64()?[0] as u32, row)
            }
        };
        self.g.ids.push(next);
        if request.return_logits {
            self.g.logits.extend_from_slice(&row);
        }
        if Some(next) == setup.eos {
            self.g.finish = "stop";
            return Ok(None);
        }
        self.text_ids.push(next);
        let text = tokenizer::decode(&setup.tokenizer, &self.text_ids)?;
        if let Some(cut) = request.stop.iter().filter_map(|s| text.find(s.as_str())).min() {
            self.g.text = text[..cut].to_owned();
            self.g.finish = "stop";
            return Ok(None);
        }
        // A character still incomplete (a byte-level token ends inside it) waits, and so
        // does text that may be the start of a stop string.
        if !text.ends_with('\u{fffd}') {
            let sendable = text.len() - stop_prefix_len(&text, &request.stop);
            if sendable > self.emitted {
                self.caller.on_text(&text[self.emitted..sendable])?;
                self.emitted = sendable;
            }
            self.g.text = text;
        }
        Ok((self.g.ids.len() < self.max_tokens as usize).then_some(next))
    }

    /// Sends what text is left and returns the outputs.
    fn outputs(self) -> (Caller, Result<Vec<IoTensor>>) {
        let Sequence { caller, request, prompt, g, emitted, .. } = self;
        if let Err(e) = caller.on_text(g.text.get(emitted..).unwrap_or("")) {
            return (caller, Err(e));
        }
        let n = g.ids.len();
        let mut out = vec![
            IoTensor::text("text_output", &[&g.text]),
            IoTensor::text("finish_reason", &[g.finish]),
            IoTensor::i32("prompt_tokens", &[1], vec![prompt.len() as i32]),
            IoTensor::i32("completion_tokens", &[1], vec![n as i32]),
            IoTensor::i32("token_ids", &[n as u64], g.ids.iter().map(|&t| t as i32).collect()),
        ];
        if request.return_logits {
            let vocab = g.logits.len().checked_div(n).unwrap_or(0);
            out.push(IoTensor::f32("logits", &[n as u64, vocab as u64], g.logits));
            out.push(IoTensor::i32("prompt_ids", &[prompt.len() as u64], prompt.iter().map(|&t| t as i32).collect()));
        }
        (caller, Ok(out))
    }
}

/// Answers a served sequence (a plain invocation's answer is `run`'s result).
fn answer(caller: Caller, result: Result<Vec<IoTensor>>) {
    if let Caller::Served(request) = caller {
        request.finish(result);
    }
}

struct Chat;

impl Function for Chat {
    fn run(inputs: Inputs) -> Result<Vec<IoTensor>> {
        let setup = setup()?;
        let model = Model::load(setup.config.clone())?;
        if serving::serving() {
            serve(&model, setup)?;
            return Ok(Vec::new());
        }
        // A plain invocation: prefill, then decode steps until the sequence ends.
        let mut seq = Sequence::start(&model, setup, &inputs, Caller::Invocation).map_err(|(_, e)| e)?;
        while let Some(next) = seq.choose(setup)? {
            seq.next = Next::Logits(model.step(&mut seq.cache, &[next])?);
        }
        seq.outputs().1
    }
}

/// The serving loop: take requests between steps, prefill each, then one decode step
/// for every active sequence; answer each as it ends; return once idle.
fn serve(model: &Model, setup: &Setup) -> Result<()> {
    let mut active: Vec<Sequence> = Vec::new();
    loop {
        // Wait for work only when nothing runs: a step is never held for new requests.
        let wait = if active.is_empty() { IDLE_WAIT } else { Duration::ZERO };
        let arrived = serving::next(MAX_SEQUENCES - active.len() as u32, wait);
        if arrived.is_empty() && active.is_empty() {
            return Ok(());
        }
        for request in arrived {
            let inputs = request.inputs();
            let caller = Caller::Served(request);
            match Sequence::start(model, setup, &inputs, caller) {
                Ok(seq) => active.push(seq),
                Err((caller, e)) => answer(caller, Err(e)),
            }
        }
        // Each sequence's next token; those that end leave.
        let mut going = Vec::with_capacity(active.len());
        let mut tokens = Vec::with_capacity(active.len());
        for mut seq in active.drain(..) {
            let gone = matches!(&seq.caller, Caller::Served(r) if r.gone());
            match if gone { Ok(None) } else { seq.choose(setup) } {
                Ok(Some(next)) => {
                    tokens.push(next);
                    going.push(seq);
                }
                Ok(None) if gone => {} // its caller has gone: dropped unanswered
                Ok(None) => {
                    let (caller, result) = seq.outputs();
                    answer(caller, result);
                }
                Err(e) => answer(seq.caller, Err(e)),
            }
        }
        if going.is_empty() {
            continue;
        }
        // One step for all of them: one pass over the weights.
        let logits = {
            let mut caches: Vec<&mut Cache> = going.iter_mut().map(|s| &mut s.cache).collect();
            model.step_many(&mut caches, &tokens)?
        };
        if let [seq] = going.as_mut_slice() {
            seq.next = Next::Logits(logits);
        } else {
            // The greedy sequences' tokens in one argmax and one read; row i is
            // sequence i's, as its own row's argmax would give.
            let greedy = going.iter().filter(|s| s.request.greedy_token_only()).count();
            let tokens = if greedy > 1 { logits.argmax()?.to_vec_i64()? } else { Vec::new() };
            for (i, seq) in (0u32..).zip(going.iter_mut()) {
                seq.next = match tokens.get(i as usize) {
                    Some(&token) if seq.request.greedy_token_only() => Next::Token(token as u32),
                    _ => Next::Logits(logits.slice(0, i, i + 1)?),
                };
            }
        }
        active = going;
    }
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
sluice_guest::serving_function!();
