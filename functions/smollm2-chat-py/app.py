"""`smollm2-chat-py`: SmolLM2-135M-Instruct, a llama in a GGUF file, as a Python sluice
function: `smollm2-chat` (Rust, `functions/smollm2-chat`) ported op for op, so its greedy
tokens are the Rust function's, token for token.

One artifact, `model`: the GGUF file (`cargo xtask fetch-llm`). Everything besides the
weights comes from its metadata (`artifacts.metadata`): hyper-parameters (`model.py`),
the byte-level BPE tokenizer (`bpe.py`, pure Python), the ChatML template with its
default system prompt (`template.py`), the end-of-sequence token.

Inputs, outputs and their errors are `smollm2-chat`'s (one of `messages` / `text_input`;
`max_tokens` (default 128, clamped to the context), `temperature` (0: greedy), `top_p`,
`seed` (step i samples with `seed + i`), `stop`, `return_logits`; outputs `text_output`,
`finish_reason` (`stop` or `length`), `prompt_tokens`, `completion_tokens`, `token_ids`,
and with `return_logits` `logits` and `prompt_ids`). Each new piece of text is emitted as
a chunk as it is made (held back while it ends inside a character or may start a stop
string).

A serving function (the `serving` file beside this one), like the Rust one: its serving
invocation takes requests from the host's queue between steps, prefills each new one
alone and runs one decode step for all active sequences at once (`Model.step_many`), up
to `MAX_SEQUENCES`. A plain invocation generates its one request. What the metadata
gives is built once per instance (`setup`); warm instances keep it, never tensor handles.
"""

import json

from sluice_guest import Failed, Inputs, InvalidInput, IoTensor, artifacts, export, serving, streaming

import template
from bpe import Tokenizer
from model import ARTIFACT, Config, Model

#: Tokens generated when the request does not say.
DEFAULT_MAX_TOKENS = 128
#: Sequences one serving invocation decodes together at most.
MAX_SEQUENCES = 8
#: How long an idle serving invocation waits for a request before it returns (seconds).
IDLE_WAIT = 0.2

_U64 = (1 << 64) - 1


class Setup:
    """What the function takes from the GGUF metadata."""

    def __init__(self, meta: dict):
        def token(k):
            v = meta.get(k)
            return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None

        self.config = Config(meta)
        try:
            self.tokenizer = Tokenizer.from_metadata(meta)
        except (ValueError, KeyError) as e:
            raise Failed(f"building the tokenizer: {e}") from None
        chat = meta.get("tokenizer.chat_template")
        self.template = template.ChatTemplate(chat) if isinstance(chat, str) else None
        self.eos = token("tokenizer.ggml.eos_token_id")
        add_bos = meta.get("tokenizer.ggml.add_bos_token") is True
        self.bos = token("tokenizer.ggml.bos_token_id") if add_bos else None


_setup = None


def setup() -> Setup:
    """The setup of this instance, built on its first invocation."""
    global _setup
    if _setup is None:
        try:
            meta = json.loads(artifacts.metadata(ARTIFACT))
        except ValueError as e:
            raise Failed(f"the GGUF metadata is not JSON: {e}") from None
        _setup = Setup(meta)
    return _setup


class Caller:
    """Where a sequence's chunks and answer go: the invocation's own caller
    (`request` None: chunks by `streaming.emit`, the answer is `run`'s result) or a
    request of a serving invocation."""

    def __init__(self, request=None):
        self.request = request

    def on_text(self, piece: str) -> None:
        """Sends the text a token added as a `text_output` chunk (a one-shot caller's
        are dropped); raises `HostError` (`cancelled`) once the caller has gone."""
        if not piece:
            return
        chunk = [IoTensor.text("text_output", [piece])]
        if self.request is None:
            streaming.emit(chunk)
        else:
            self.request.emit(chunk)

    def answer(self, outputs=None, error=None) -> None:
        """Answers a served sequence (a plain invocation's answer is `run`'s result)."""
        if self.request is not None:
            self.request.finish(outputs, error)


def _one(inputs: Inputs, name: str, get):
    t = inputs.find(name)
    if t is None:
        return None
    values = get(t)
    if len(values) != 1:
        raise InvalidInput(f"`{name}` must hold one element, not {len(values)}")
    return values[0]


def _text(inputs: Inputs, name: str):
    t = inputs.find(name)
    if t is None:
        return None
    strings = t.as_strings()
    if len(strings) != 1:
        raise InvalidInput(f"`{name}` must be BYTES [1], not {len(strings)} elements")
    return strings[0]


class Request:
    """What a request asks for."""

    def __init__(self, inputs: Inputs, s: Setup):
        messages, raw = _text(inputs, "messages"), _text(inputs, "text_input")
        if messages is not None and raw is None:
            if s.template is None:
                raise Failed("the GGUF file has no chat template")
            self.prompt = s.template.render(template.messages(messages))
        elif messages is None and raw is not None:
            self.prompt = raw
        else:
            raise InvalidInput("give exactly one of `messages` and `text_input`")
        max_tokens = _one(inputs, "max_tokens", IoTensor.as_i32)
        temperature = _one(inputs, "temperature", IoTensor.as_f32)
        top_p = _one(inputs, "top_p", IoTensor.as_f32)
        seed = _one(inputs, "seed", IoTensor.as_i64)
        self.max_tokens = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
        self.temperature = 0.0 if temperature is None else temperature
        self.top_p = 1.0 if top_p is None else top_p
        self.seed = (0 if seed is None else seed) & _U64
        if self.max_tokens < 1:
            raise InvalidInput(f"`max_tokens` must be at least 1, got {self.max_tokens}")
        t = self.temperature
        if not (t == t and t not in (float("inf"), float("-inf")) and t >= 0.0):
            raise InvalidInput(f"`temperature` must be finite and >= 0, got {_rust_float(t)}")
        if not (0.0 < self.top_p <= 1.0):
            raise InvalidInput(f"`top_p` must be in (0, 1], got {_rust_float(self.top_p)}")
        stop = inputs.find("stop")
        self.stop = [s for s in stop.as_strings() if s] if stop is not None else []
        self.return_logits = _one(inputs, "return_logits", IoTensor.as_i32) == 1


def _rust_float(x: float) -> str:
    """`x` as Rust's `Display` writes an f32 (`1`, `0.5`, `inf`, `NaN`)."""
    if x != x:
        return "NaN"
    if x in (float("inf"), float("-inf")):
        return "inf" if x > 0 else "-inf"
    return str(int(x)) if x == int(x) else repr(x)


def stop_prefix_len(text: str, stop) -> int:
    """The length of the longest end of `text` that is the start of a stop string (and
    so must not be sent before the next token shows whether the stop string completes)."""
    best = 0
    for s in stop:
        for k in range(len(s) - 1, 0, -1):
            if text.endswith(s[:k]):
                best = max(best, k)
                break
    return best


class Sequence:
    """One sequence being generated: its request, caches and text so far, and the
    logits its next token is chosen from."""

    def __init__(self, model: Model, s: Setup, inputs: Inputs, caller: Caller):
        self.caller = caller
        self.request = request = Request(inputs, s)
        context = s.config.context
        prompt = s.tokenizer.encode(request.prompt)
        if s.bos is not None:
            prompt.insert(0, s.bos)
        if not prompt or len(prompt) >= context:
            raise InvalidInput(f"the prompt is {len(prompt)} tokens; it must hold 1 to {context - 1} (the context)")
        self.prompt = prompt
        self.max_tokens = min(request.max_tokens, context - len(prompt))
        self.cache = model.cache(len(prompt) + self.max_tokens)
        self.logits = model.step(self.cache, prompt)
        self.ids, self.logit_rows, self.text, self.finish = [], [], "", "length"
        self.text_ids = []
        self.emitted = 0  # characters of `text` already sent

    def choose(self, s: Setup):
        """Chooses the next token and sends its text: the token when the sequence goes
        on, None when it has ended (end-of-sequence, a stop string, `max_tokens`)."""
        request = self.request
        row = self.logits.to_vec_f32() if request.return_logits else None
        if request.temperature > 0.0:
            seed = (request.seed + len(self.ids)) & _U64
            chosen = self.logits.sample(request.temperature, 0, request.top_p, seed)
        else:
            chosen = self.logits.argmax()
        token = chosen.to_vec_i64()[0]
        self.ids.append(token)
        if row is not None:
            self.logit_rows.extend(row)
        if token == s.eos:
            self.finish = "stop"
            return None
        self.text_ids.append(token)
        text = s.tokenizer.decode(self.text_ids)
        cuts = [i for i in (text.find(x) for x in request.stop) if i >= 0]
        if cuts:
            self.text = text[: min(cuts)]
            self.finish = "stop"
            return None
        # A character still incomplete (a byte-level token ends inside it) waits, and so
        # does text that may be the start of a stop string.
        if not text.endswith("\ufffd"):
            sendable = len(text) - stop_prefix_len(text, request.stop)
            if sendable > self.emitted:
                self.caller.on_text(text[self.emitted : sendable])
                self.emitted = sendable
            self.text = text
        return token if len(self.ids) < self.max_tokens else None

    def outputs(self):
        """Sends what text is left and returns the outputs."""
        self.caller.on_text(self.text[self.emitted :])
        n = len(self.ids)
        out = [
            IoTensor.text("text_output", [self.text]),
            IoTensor.text("finish_reason", [self.finish]),
            IoTensor.i32("prompt_tokens", [1], [len(self.prompt)]),
            IoTensor.i32("completion_tokens", [1], [n]),
            IoTensor.i32("token_ids", [n], self.ids),
        ]
        if self.request.return_logits:
            vocab = len(self.logit_rows) // n if n else 0
            out.append(IoTensor.f32("logits", [n, vocab], self.logit_rows))
            out.append(IoTensor.i32("prompt_ids", [len(self.prompt)], self.prompt))
        return out


def run(inputs: Inputs):
    s = setup()
    model = Model(s.config)
    if serving.serving():
        serve(model, s)
        return []
    # A plain invocation: prefill, then decode steps until the sequence ends.
    seq = Sequence(model, s, inputs, Caller())
    token = seq.choose(s)
    while token is not None:
        seq.logits = model.step(seq.cache, [token])
        token = seq.choose(s)
    return seq.outputs()


def serve(model: Model, s: Setup) -> None:
    """The serving loop: take requests between steps, prefill each, then one decode
    step for every active sequence; answer each as it ends; return once idle."""
    active = []
    while True:
        # Wait for work only when nothing runs: a step is never held for new requests.
        arrived = serving.next(MAX_SEQUENCES - len(active), 0.0 if active else IDLE_WAIT)
        if not arrived and not active:
            return
        for request in arrived:
            caller = Caller(request)
            try:
                active.append(Sequence(model, s, request.inputs(), caller))
            except Exception as e:  # noqa: BLE001 — answered with its error, as `run` would be
                caller.answer(error=e)
        # Each sequence's next token; those that end leave.
        going, tokens = [], []
        for seq in active:
            if seq.caller.request.gone():
                continue  # its caller has gone: dropped unanswered
            try:
                token = seq.choose(s)
                if token is not None:
                    tokens.append(token)
                    going.append(seq)
                else:
                    seq.caller.answer(seq.outputs())
            except Exception as e:  # noqa: BLE001
                seq.caller.answer(error=e)
        active = going
        if not going:
            continue
        # One step for all of them: one pass over the weights.
        logits = model.step_many([seq.cache for seq in going], tokens)
        if len(going) == 1:
            going[0].logits = logits
        else:
            for i, seq in enumerate(going):
                seq.logits = logits.slice(0, i, i + 1)


WitWorld = export(run)
