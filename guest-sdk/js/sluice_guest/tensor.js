/**
 * `Tensor`: a handle to a tensor on the host's device, with the op catalog as methods.
 *
 * Every method launches one op on the host and returns the output's handle at once;
 * only `read`/`toArray` wait for the device. Shapes and dtypes are checked by the host
 * before anything is queued: a bad call throws `HostError` (`shape-mismatch`, …).
 *
 * A tensor lives until `drop()` or the end of the invocation, whichever comes first:
 * JavaScript's garbage collector runs when it likes, so the SDK keeps every handle the
 * invocation made and drops those still live when `run` returns (`defineFunction`).
 * A host keeps an instance warm only when its invocation left no handle behind, and a
 * tensor never outlives its invocation (do not keep one in a module-level variable).
 *
 * @module sluice-guest/tensor
 */

import { Tensor as WitTensor } from 'sluice:gpu/tensors@1.2.0';
import { kvAttention as kvAttentionOp, launch as launchOp } from 'sluice:gpu/ops@1.2.0';
import { launch as launchFused } from 'sluice:gpu/fused@1.2.0';
import * as artifacts from 'sluice:gpu/artifacts@1.2.0';

import { ErrorCode, HostError, hostCall } from './errors.js';

/** Element types of device tensors (the WIT `dtype`). */
export const Dtype = Object.freeze({
  F32: 'f32',
  F16: 'f16',
  BF16: 'bf16',
  I32: 'i32',
  I64: 'i64',
  U8: 'u8',
  Q41: 'q41',
  Q80: 'q80',
});

/** Elementwise unary ops (the WIT `unary-op`). */
export const UnaryOp = Object.freeze({
  RELU: 'relu',
  GELU: 'gelu',
  GELU_TANH: 'gelu-tanh',
  TANH: 'tanh',
  SIGMOID: 'sigmoid',
  EXP: 'exp',
  LOG: 'log',
  SQRT: 'sqrt',
  RSQRT: 'rsqrt',
  NEG: 'neg',
  ABS: 'abs',
  SILU: 'silu',
});

/** Reductions over one axis (the WIT `reduce-op`). */
export const ReduceOp = Object.freeze({ SUM: 'sum', MEAN: 'mean', MAX: 'max', MIN: 'min' });

/** Kinds of 2-D pooling (the WIT `pool-kind`). */
export const PoolKind = Object.freeze({ MAX: 'max', AVG: 'avg' });

/** The typed array holding each numeric dtype's elements (f16 as `Float16Array`). */
const ARRAYS = {
  f32: Float32Array,
  f16: typeof Float16Array === 'function' ? Float16Array : undefined,
  i32: Int32Array,
  i64: BigInt64Array,
  u8: Uint8Array,
};

const dispose = Symbol.dispose || Symbol.for('dispose');

/** Handles made in this invocation and not yet dropped (see the module's doc). */
const live = new Set();

/** Drops every tensor of the invocation still live; `defineFunction` calls it after `run`. */
export function dropAll() {
  for (const tensor of live) {
    tensor.drop();
  }
}

/** A typed array of `dtype` holding `values` (an array or typed array). */
function typed(dtype, values) {
  const Array_ = ARRAYS[dtype];
  if (Array_ === undefined) {
    throw new HostError(ErrorCode.DTYPE_MISMATCH, `no JavaScript element type for ${dtype}`);
  }
  if (values instanceof Array_) {
    return values;
  }
  return dtype === 'i64' ? BigInt64Array.from(values, BigInt) : Array_.from(values);
}

/** The bytes of a typed array, without copying. */
export function bytesOf(array) {
  return new Uint8Array(array.buffer, array.byteOffset, array.byteLength);
}

/** Little-endian element bytes as a typed array of `dtype` (copied, so aligned). */
export function elementsOf(dtype, bytes) {
  const Array_ = ARRAYS[dtype];
  if (Array_ === undefined) {
    throw new HostError(ErrorCode.DTYPE_MISMATCH, `no JavaScript element type for ${dtype}`);
  }
  const copy = bytes.slice();
  return new Array_(copy.buffer, 0, copy.byteLength / Array_.BYTES_PER_ELEMENT);
}

/** A device tensor owned by this invocation. */
export class Tensor {
  /** Wraps a handle of the bindings; authors make tensors with the static methods. */
  constructor(handle) {
    this.handle = handle;
    live.add(this);
  }

  // --- making and reading -----------------------------------------------------------

  /** Uploads little-endian element bytes (`product(shape) * size(dtype)` of them). */
  static fromBytes(dtype, shape, data) {
    return new Tensor(hostCall(WitTensor.fromBytes, dtype, Uint32Array.from(shape), data));
  }

  /** Uploads numbers (an array or typed array) as a tensor of `dtype` (f32 by default). */
  static fromArray(values, shape, dtype = Dtype.F32) {
    if (dtype === Dtype.F32) {
      return new Tensor(hostCall(WitTensor.fromF32, Uint32Array.from(shape), typed(dtype, values)));
    }
    if (dtype === Dtype.I32) {
      return new Tensor(hostCall(WitTensor.fromI32, Uint32Array.from(shape), typed(dtype, values)));
    }
    return Tensor.fromBytes(dtype, shape, bytesOf(typed(dtype, values)));
  }

  /** A tensor of zeros (not a block format): the one kind `writeRows` may change. */
  static zeros(dtype, shape) {
    return new Tensor(hostCall(WitTensor.zeros, dtype, Uint32Array.from(shape)));
  }

  /** The element type (one of `Dtype`'s values). */
  get dtype() {
    return this.handle.dtype();
  }

  /** The dimensions, outermost first. */
  get shape() {
    return Array.from(this.handle.shape());
  }

  /** Waits for the ops producing this tensor and returns its little-endian bytes. */
  read() {
    return hostCall(() => this.handle.read());
  }

  /** The elements as a typed array, row-major (f16 as `Float16Array`; not bf16: read the bytes). */
  toArray() {
    return elementsOf(this.dtype, this.read());
  }

  /** Writes `src` into rows `offset ..` of this tensor's first axis (a `zeros` tensor). */
  writeRows(offset, src) {
    hostCall(() => this.handle.writeRows(offset, src.handle));
  }

  /** Frees the tensor now (the host frees it once no pending op uses it). */
  drop() {
    if (live.delete(this)) {
      this.handle[dispose]();
    }
  }

  toString() {
    return `Tensor(${this.dtype}, [${this.shape}])`;
  }

  // --- the op catalog -----------------------------------------------------------------

  op(op, ...others) {
    return new Tensor(hostCall(launchOp, op, [this.handle, ...others.map((t) => t.handle)]));
  }

  fused(op, ...others) {
    return new Tensor(hostCall(launchFused, op, [this.handle, ...others.map((t) => t.handle)]));
  }

  /** Matrix product of the last two axes, batched over the leading ones. */
  matmul(other, { transposeA = false, transposeB = false } = {}) {
    return this.op({ tag: 'matmul', val: { transposeA, transposeB } }, other);
  }

  binary(kind, other) {
    if (!(other instanceof Tensor)) {
      throw new TypeError(`expected a Tensor, got ${typeof other}`);
    }
    return this.op({ tag: 'binary', val: kind }, other);
  }

  /** `this + other`; a number adds a scalar (`affine`). */
  add(other) {
    return typeof other === 'number' ? this.affine(1, other) : this.binary('add', other);
  }

  /** `this - other`; a number subtracts a scalar (`affine`). */
  sub(other) {
    return typeof other === 'number' ? this.affine(1, -other) : this.binary('sub', other);
  }

  /** `this * other`; a number scales (`affine`). */
  mul(other) {
    return typeof other === 'number' ? this.affine(other, 0) : this.binary('mul', other);
  }

  /** `this / other`; a number divides by a scalar (`affine`). */
  div(other) {
    return typeof other === 'number' ? this.affine(1 / other, 0) : this.binary('div', other);
  }

  maximum(other) {
    return this.binary('maximum', other);
  }

  minimum(other) {
    return this.binary('minimum', other);
  }

  neg() {
    return this.unary(UnaryOp.NEG);
  }

  /** An elementwise activation or function (`UnaryOp.RELU`, `UnaryOp.GELU`, …). */
  unary(kind) {
    return this.op({ tag: 'unary', val: kind });
  }

  relu() {
    return this.unary(UnaryOp.RELU);
  }

  gelu() {
    return this.unary(UnaryOp.GELU);
  }

  geluTanh() {
    return this.unary(UnaryOp.GELU_TANH);
  }

  tanh() {
    return this.unary(UnaryOp.TANH);
  }

  sigmoid() {
    return this.unary(UnaryOp.SIGMOID);
  }

  exp() {
    return this.unary(UnaryOp.EXP);
  }

  log() {
    return this.unary(UnaryOp.LOG);
  }

  sqrt() {
    return this.unary(UnaryOp.SQRT);
  }

  rsqrt() {
    return this.unary(UnaryOp.RSQRT);
  }

  abs() {
    return this.unary(UnaryOp.ABS);
  }

  /** `x * sigmoid(x)` (SwiGLU is `gate.linear(w, { activation: UnaryOp.SILU }).mul(up)`). */
  silu() {
    return this.unary(UnaryOp.SILU);
  }

  /** Rotary position embedding (llama.cpp's adjacent-pair layout), positions from `offset`. */
  rope(base, offset = 0) {
    return this.op({ tag: 'rope', val: { base, offset } });
  }

  /** The i32 index of each row's largest element (last axis): greedy decoding. */
  argmax() {
    return this.op({ tag: 'argmax' });
  }

  /** One token drawn per row of f32 logits (`seed` a number or bigint). */
  sample({ temperature, topK = 0, topP = 1, seed = 0n }) {
    return this.op({ tag: 'sample', val: { temperature, topK, topP, seed: BigInt(seed) } });
  }

  /** `x * scale + bias`, elementwise. */
  affine(scale, bias = 0) {
    return this.op({ tag: 'affine', val: { scale, bias } });
  }

  /** Softmax over the last axis of `x * scale + mask`. */
  softmax(scale = 1, mask = undefined) {
    const op = { tag: 'softmax', val: { scale } };
    return mask === undefined ? this.op(op) : this.op(op, mask);
  }

  /** Layer normalisation over the last axis. */
  layerNorm(gamma, beta, eps = 1e-5) {
    return this.op({ tag: 'layer-norm', val: { eps } }, gamma, beta);
  }

  /** Rows of this table `[vocab, d]` gathered by `ids` (i32 or i64). */
  embedding(ids) {
    return this.op({ tag: 'embedding' }, ids);
  }

  reduce(kind, axis, keepDim = false) {
    return this.op({ tag: 'reduce', val: { op: kind, axis, keepDim } });
  }

  sum(axis, keepDim = false) {
    return this.reduce(ReduceOp.SUM, axis, keepDim);
  }

  mean(axis, keepDim = false) {
    return this.reduce(ReduceOp.MEAN, axis, keepDim);
  }

  max(axis, keepDim = false) {
    return this.reduce(ReduceOp.MAX, axis, keepDim);
  }

  min(axis, keepDim = false) {
    return this.reduce(ReduceOp.MIN, axis, keepDim);
  }

  reshape(shape) {
    return this.op({ tag: 'reshape', val: Uint32Array.from(shape) });
  }

  permute(axes) {
    return this.op({ tag: 'permute', val: Uint32Array.from(axes) });
  }

  /** Elements `start..end` of `axis`. */
  slice(axis, start, end) {
    return this.op({ tag: 'slice', val: { axis, start, end } });
  }

  /** This tensor and `others`, joined along `axis`. */
  concat(others, axis) {
    return this.op({ tag: 'concat', val: axis }, ...others);
  }

  cast(dtype) {
    return this.op({ tag: 'cast', val: dtype });
  }

  /** 2-D convolution, NCHW. */
  conv2d(weight, { bias, stride = [1, 1], padding = [0, 0], dilation = [1, 1], groups = 1 } = {}) {
    const op = { tag: 'conv2d', val: { stride, padding, dilation, groups } };
    return bias === undefined ? this.op(op, weight) : this.op(op, weight, bias);
  }

  /** 2-D max or average pooling, NCHW (stride defaults to the kernel). */
  pool2d(kind, kernel, { stride = kernel, padding = [0, 0] } = {}) {
    return this.op({ tag: 'pool2d', val: { kind, kernel, stride, padding } });
  }

  // --- fused ops ----------------------------------------------------------------------

  /** `activation(x · w + b)` in one launch. */
  linear(weight, { bias, activation, transposeW = false } = {}) {
    const op = { tag: 'linear', val: { transposeW, activation } };
    return bias === undefined ? this.fused(op, weight) : this.fused(op, weight, bias);
  }

  /** `layerNorm(x + residual)` in one launch. */
  addLayerNorm(residual, gamma, beta, eps = 1e-5) {
    return this.fused({ tag: 'add-layer-norm', val: { eps } }, residual, gamma, beta);
  }

  /** RMS normalisation over the last axis, of `x + residual` when one is given. */
  rmsNorm(weight, { residual, eps = 1e-5 } = {}) {
    const op = { tag: 'rms-norm', val: { eps } };
    return residual === undefined ? this.fused(op, weight) : this.fused(op, residual, weight);
  }

  /** Causal grouped-query attention of these queries over the first `kvLen` positions
   * of a `[ctx, kvHeads, d]` KV cache. */
  gqaAttention(kCache, vCache, kvLen, scale) {
    return this.fused({ tag: 'gqa-attention', val: { kvLen, scale } }, kCache, vCache);
  }

  /** A llama's attention of new positions for one or more sequences in one launch
   * (host API 1.2.0, the WIT `ops.kv-attention`), with these queries `[n, heads, d]` and
   * the new keys and values `k`, `v` `[n, kvHeads, d]`. `spans` splits the n rows, in
   * order, into sequences as `[rows, position]` pairs, and `caches` gives each its
   * `[kCache, vCache]` `[ctx, kvHeads, d]` (made by `zeros`, each given once). Per span,
   * exactly `rope(ropeBase, position)` of its rows of q and k, `writeRows(position, …)`
   * of the turned k and of v into its caches, then `gqaAttention` over
   * `position + rows` positions with `scale`; the output is `[n, heads, d]`. */
  kvAttention(k, v, caches, spans, ropeBase, scale) {
    const args = { ropeBase, scale, spans: spans.map(([rows, position]) => ({ rows, position })) };
    const kCaches = caches.map(([kCache]) => kCache.handle);
    const vCaches = caches.map(([, vCache]) => vCache.handle);
    return new Tensor(hostCall(kvAttentionOp, this.handle, k.handle, v.handle, kCaches, vCaches, args));
  }

  /** Multi-head attention with this tensor as the queries (heads interleaved). */
  attention(k, v, heads, scale, mask = undefined) {
    const op = { tag: 'attention', val: { heads, scale } };
    return mask === undefined ? this.fused(op, k, v) : this.fused(op, k, v, mask);
  }
}

/** One tensor of a safetensors or GGUF artifact uploaded with the function (loaded once
 * per function version and device, shared read-only); `asDtype` converts it. */
export function loadTensor(artifact, name, asDtype = undefined) {
  return new Tensor(hostCall(artifacts.loadTensor, artifact, name, asDtype));
}

/** The raw bytes of an artifact (a vocabulary, a config) as a `Uint8Array`. */
export function readArtifact(artifact) {
  return hostCall(artifacts.read, artifact);
}

/** The metadata of a GGUF artifact, parsed. */
export function artifactMetadata(artifact) {
  return JSON.parse(hostCall(artifacts.metadata, artifact));
}

/** The names of the artifacts this function version sees, in byte order. */
export function artifactNames() {
  return artifacts.names();
}
