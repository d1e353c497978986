/**
 * sluice's guest SDK for JavaScript: write an inference function as an ES module, built
 * into a WebAssembly component with componentize-js (`cargo xtask build-functions`).
 *
 * Every tensor op is a call into the host's device API, exactly as from the Rust SDK
 * (`guest-sdk/src`) and the Python one (`guest-sdk/python`): the host schedules each
 * kernel, the guest holds only handles. Inputs and outputs are typed arrays; the
 * compute runs on the host.
 *
 *     import { defineFunction, IoTensor } from 'sluice-guest';
 *
 *     export const run = defineFunction((inputs) => {
 *       const x = inputs.get('input').expect('FP32').toTensor();
 *       return [IoTensor.fromTensor('output', x.relu())];
 *     });
 *
 * A function may stream chunks of output while it runs (`streaming.emit`, e.g. a
 * generation's tokens) and learn that its caller has gone (`streaming.callerGone`).
 *
 * @module sluice-guest
 */

export { ErrorCode, Failed, HostError, InvalidInput } from './errors.js';
export { defineFunction } from './function.js';
export { Inputs, IoTensor } from './io.js';
export * as streaming from './streaming.js';
export {
  Dtype,
  PoolKind,
  ReduceOp,
  Tensor,
  UnaryOp,
  artifactMetadata,
  artifactNames,
  loadTensor,
  readArtifact,
} from './tensor.js';
