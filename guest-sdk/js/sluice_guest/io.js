/**
 * Tensors crossing the function boundary, as the Open Inference Protocol has them.
 *
 * `IoTensor` is one named input or output: a datatype (`"FP32"`, `"FP16"`, `"BF16"`,
 * `"INT32"`, `"INT64"`, `"UINT8"`, `"BYTES"`), a shape (numbers) and its elements as a
 * typed array: `Float32Array`, `Uint16Array` (FP16/BF16 as raw 16-bit patterns),
 * `Int32Array`, `BigInt64Array` (INT64 exactly, as bigints), `Uint8Array`; BYTES as an
 * array of `Uint8Array`. `Inputs` holds a request's inputs by name; a missing or
 * mistyped input is the caller's fault (`InvalidInput`).
 *
 * @module sluice-guest/io
 */

import { InvalidInput } from './errors.js';
import { Dtype, Tensor, bytesOf } from './tensor.js';

/** datatype → [WIT `io-data` case, device dtype, typed array] */
const KINDS = {
  FP32: ['f32', Dtype.F32, Float32Array],
  FP16: ['f16', Dtype.F16, Uint16Array],
  BF16: ['bf16', Dtype.BF16, Uint16Array],
  INT32: ['i32', Dtype.I32, Int32Array],
  INT64: ['i64', Dtype.I64, BigInt64Array],
  UINT8: ['u8', Dtype.U8, Uint8Array],
  BYTES: ['bytes', undefined, undefined],
};
const BY_CASE = Object.fromEntries(Object.entries(KINDS).map(([name, kind]) => [kind[0], name]));
const BY_DTYPE = Object.fromEntries(
  Object.entries(KINDS)
    .filter(([, kind]) => kind[1] !== undefined)
    .map(([name, kind]) => [kind[1], name]),
);

const utf8 = new TextDecoder('utf-8', { fatal: true });
const encoder = new TextEncoder();

function count(shape) {
  return shape.reduce((n, d) => n * d, 1);
}

/** A named tensor of a request or a response. */
export class IoTensor {
  constructor(name, datatype, shape, data) {
    if (!(datatype in KINDS)) {
      throw new TypeError(`unknown datatype ${JSON.stringify(datatype)}; one of ${Object.keys(KINDS)}`);
    }
    this.name = name;
    this.datatype = datatype;
    this.shape = Array.from(shape, Number);
    this.data = data;
  }

  static f32(name, shape, values) {
    return new IoTensor(name, 'FP32', shape, values instanceof Float32Array ? values : Float32Array.from(values));
  }

  static i32(name, shape, values) {
    return new IoTensor(name, 'INT32', shape, values instanceof Int32Array ? values : Int32Array.from(values));
  }

  /** INT64 elements from numbers or bigints. */
  static i64(name, shape, values) {
    const data = values instanceof BigInt64Array ? values : BigInt64Array.from(values, BigInt);
    return new IoTensor(name, 'INT64', shape, data);
  }

  static u8(name, shape, values) {
    return new IoTensor(name, 'UINT8', shape, values instanceof Uint8Array ? values : Uint8Array.from(values));
  }

  /** A 1-D BYTES tensor of UTF-8 strings. */
  static text(name, values) {
    return new IoTensor(name, 'BYTES', [values.length], values.map((v) => encoder.encode(v)));
  }

  /** Throws `InvalidInput` unless the element count matches the shape; returns this. */
  check() {
    if (this.data.length !== count(this.shape)) {
      throw new InvalidInput(
        `tensor \`${this.name}\`: shape [${this.shape.join(', ')}] holds ${count(this.shape)} elements, got ${this.data.length}`,
      );
    }
    return this;
  }

  /** Throws `InvalidInput` unless this tensor has `datatype` (and a consistent shape). */
  expect(datatype) {
    if (this.datatype !== datatype) {
      throw new InvalidInput(`tensor \`${this.name}\`: expected ${datatype}, got ${this.datatype}`);
    }
    return this.check();
  }

  /** A BYTES tensor's elements as UTF-8 text. */
  asStrings() {
    this.expect('BYTES');
    return this.data.map((b) => {
      try {
        return utf8.decode(b);
      } catch (e) {
        throw new InvalidInput(`tensor \`${this.name}\`: an element is not UTF-8 (${e.message})`);
      }
    });
  }

  /** A numeric tensor's elements as little-endian bytes (a view, not a copy). */
  toBytes() {
    if (this.datatype === 'BYTES') {
      throw new InvalidInput(`tensor \`${this.name}\`: BYTES has no device form`);
    }
    return bytesOf(this.data);
  }

  /** Uploads a numeric tensor to the device. */
  toTensor() {
    this.check();
    return Tensor.fromBytes(KINDS[this.datatype][1], this.shape, this.toBytes());
  }

  /** Reads `tensor` back (waiting for the device) as an output named `name`. */
  static fromTensor(name, tensor) {
    const datatype = BY_DTYPE[tensor.dtype];
    if (datatype === undefined) {
      throw new InvalidInput(`tensor \`${name}\`: ${tensor.dtype} has no protocol datatype`);
    }
    const raw = tensor.read().slice();
    const Array_ = KINDS[datatype][2];
    const data = new Array_(raw.buffer, 0, raw.byteLength / Array_.BYTES_PER_ELEMENT);
    return new IoTensor(name, datatype, tensor.shape, data);
  }

  toString() {
    return `IoTensor(${JSON.stringify(this.name)}, ${this.datatype}, [${this.shape}])`;
  }

  // --- the WIT form -------------------------------------------------------------------

  /** @internal An `io-tensor` of the bindings as an `IoTensor`. */
  static fromWit(t) {
    return new IoTensor(t.name, BY_CASE[t.data.tag], t.shape, t.data.val);
  }

  /** @internal This tensor as an `io-tensor` of the bindings. */
  toWit() {
    this.check();
    const [tag, , Array_] = KINDS[this.datatype];
    let val = this.data;
    if (Array_ !== undefined && !(val instanceof Array_)) {
      val = this.datatype === 'INT64' ? BigInt64Array.from(val, BigInt) : Array_.from(val);
    }
    return { name: this.name, shape: BigUint64Array.from(this.shape, BigInt), data: { tag, val } };
  }
}

/** A request's inputs, by name and in order (iterable). */
export class Inputs {
  constructor(tensors) {
    this.list = tensors;
    this.byName = new Map(tensors.map((t) => [t.name, t]));
  }

  /** The input named `name`; `InvalidInput` if there is none. */
  get(name) {
    const t = this.byName.get(name);
    if (t === undefined) {
      const names = this.list.map((t) => t.name);
      throw new InvalidInput(`missing input \`${name}\` (got ${JSON.stringify(names)})`);
    }
    return t;
  }

  /** Whether an input named `name` was sent. */
  has(name) {
    return this.byName.has(name);
  }

  get length() {
    return this.list.length;
  }

  [Symbol.iterator]() {
    return this.list[Symbol.iterator]();
  }
}
