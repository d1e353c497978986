/**
 * `minilm-embed-js`: `minilm-embed` (sentence-transformers all-MiniLM-L6-v2) in
 * JavaScript, with a plain-JavaScript WordPiece tokenizer; every step of the model is
 * one host op, as in the Rust function (`functions/minilm-embed`) and the Python one
 * (`functions/minilm-embed-py`).
 *
 * - input `text`: BYTES `[n]` (UTF-8); optional `precision`: BYTES `[1]`, `"f32"`
 *   (default), `"f16"` or `"bf16"`; optional `return_tokens` (any value): also return
 *   `input_ids` and `attention_mask` (INT64 `[n, s]`).
 * - output `embedding`: FP32 `[n, 384]`, mean-pooled and L2-normalised.
 * - artifacts: `model` (model.safetensors), `vocab` (vocab.txt), `config` (config.json).
 */

import {
  Dtype,
  InvalidInput,
  IoTensor,
  Tensor,
  UnaryOp,
  defineFunction,
  loadTensor,
  readArtifact,
} from 'sluice-guest';

import { WordPiece } from './wordpiece.js';

/** sentence-transformers truncates all-MiniLM-L6-v2's inputs at 256 tokens. */
const MAX_SEQ_LEN = 256;
/** Added to attention scores of padding (exp underflows to 0; finite in f16 and bf16). */
const MASKED = -10000.0;
const PRECISIONS = { f32: Dtype.F32, f16: Dtype.F16, bf16: Dtype.BF16 };

let prepared;

/** The config and the tokenizer, built once per instance (warm instances keep them). */
function prepare() {
  if (prepared === undefined) {
    const config = JSON.parse(new TextDecoder().decode(readArtifact('config')));
    prepared = { config, tokenizer: new WordPiece(readArtifact('vocab')) };
  }
  return prepared;
}

class Bert {
  constructor(config, dtype) {
    this.cfg = config;
    this.dtype = dtype;
    let prefix = '';
    try {
      loadTensor('model', 'embeddings.word_embeddings.weight', dtype).drop();
    } catch {
      prefix = 'bert.';
    }
    this.get = (name) => loadTensor('model', prefix + name, dtype);
    this.eps = config.layer_norm_eps ?? 1e-12;
    this.word = this.get('embeddings.word_embeddings.weight');
    this.position = this.get('embeddings.position_embeddings.weight');
    this.tokenType = this.get('embeddings.token_type_embeddings.weight');
    this.embNorm = this.pair('embeddings.LayerNorm');
    this.layers = [];
    for (let i = 0; i < config.num_hidden_layers; i++) {
      this.layers.push(this.layer(`encoder.layer.${i}`));
    }
  }

  /** A linear's or a layer norm's `[weight, bias]`. */
  pair(name) {
    return [this.get(`${name}.weight`), this.get(`${name}.bias`)];
  }

  layer(p) {
    return {
      q: this.pair(`${p}.attention.self.query`),
      k: this.pair(`${p}.attention.self.key`),
      v: this.pair(`${p}.attention.self.value`),
      o: this.pair(`${p}.attention.output.dense`),
      attnNorm: this.pair(`${p}.attention.output.LayerNorm`),
      ffnIn: this.pair(`${p}.intermediate.dense`),
      ffnOut: this.pair(`${p}.output.dense`),
      ffnNorm: this.pair(`${p}.output.LayerNorm`),
    };
  }

  embed(ids, mask, lengths, n, s) {
    const heads = this.cfg.num_attention_heads;
    const d = this.cfg.hidden_size / heads;
    const lin = (x, [w, b], gelu = false) =>
      x.linear(w, { bias: b, activation: gelu ? UnaryOp.GELU : undefined, transposeW: true });

    const idsT = Tensor.fromArray(ids, [n, s], Dtype.I32);
    let x = this.word.embedding(idsT).add(this.position.slice(0, 0, s)).add(this.tokenType.slice(0, 0, 1));
    x = x.layerNorm(...this.embNorm, this.eps);
    let additive = Tensor.fromArray(
      mask.map((m) => (m ? 0 : MASKED)),
      [n, 1, 1, s],
    );
    if (this.dtype !== Dtype.F32) additive = additive.cast(this.dtype);
    for (const l of this.layers) {
      const [q, k, v] = [lin(x, l.q), lin(x, l.k), lin(x, l.v)];
      const ctx = q.attention(k, v, heads, 1 / Math.sqrt(d), additive);
      x = lin(ctx, l.o).addLayerNorm(x, ...l.attnNorm, this.eps);
      const ffn = lin(lin(x, l.ffnIn, true), l.ffnOut);
      x = ffn.addLayerNorm(x, ...l.ffnNorm, this.eps);
    }
    if (this.dtype !== Dtype.F32) x = x.cast(Dtype.F32);
    const keep = Tensor.fromArray(
      mask.map((m) => m),
      [n, s, 1],
    );
    const counts = Tensor.fromArray(
      lengths.map((c) => Math.max(c, 1e-9)),
      [n, 1],
    );
    const pooled = x.mul(keep).sum(1).div(counts);
    const norm = pooled.mul(pooled).sum(1, true).sqrt().maximum(Tensor.fromArray([1e-12], [1]));
    return pooled.div(norm).toArray();
  }
}

export const run = defineFunction((inputs) => {
  const text = inputs.get('text');
  if (text.shape.length !== 1) {
    throw new InvalidInput(`tensor \`text\`: expected shape [n], got [${text.shape.join(', ')}]`);
  }
  const texts = text.asStrings();
  let dtype = Dtype.F32;
  if (inputs.has('precision')) {
    const values = inputs.get('precision').asStrings();
    if (values.length !== 1 || !Object.hasOwn(PRECISIONS, values[0])) {
      throw new InvalidInput(`tensor \`precision\`: one of "f32", "f16", "bf16", got ${JSON.stringify(values)}`);
    }
    dtype = PRECISIONS[values[0]];
  }
  const { config, tokenizer } = prepare();
  const hidden = config.hidden_size;
  if (texts.length === 0) {
    return [IoTensor.f32('embedding', [0, hidden], [])];
  }
  const maxLen = Math.min(MAX_SEQ_LEN, config.max_position_embeddings);
  const encodings = texts.map((t) => tokenizer.encode(t, maxLen));
  const [n, s] = [encodings.length, Math.max(...encodings.map((e) => e.length))];
  const ids = [];
  const mask = [];
  for (const e of encodings) {
    ids.push(...e, ...new Array(s - e.length).fill(tokenizer.pad));
    mask.push(...new Array(e.length).fill(1), ...new Array(s - e.length).fill(0));
  }
  const embedding = new Bert(config, dtype).embed(
    ids,
    mask,
    encodings.map((e) => e.length),
    n,
    s,
  );
  const outputs = [IoTensor.f32('embedding', [n, hidden], embedding)];
  if (inputs.has('return_tokens')) {
    outputs.push(IoTensor.i64('input_ids', [n, s], ids), IoTensor.i64('attention_mask', [n, s], mask));
  }
  return outputs;
});
