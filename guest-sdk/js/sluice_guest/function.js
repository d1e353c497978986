/**
 * Declaring a function: `defineFunction(run)` makes the world's export from a plain
 * function.
 *
 *     import { defineFunction, IoTensor } from 'sluice-guest';
 *
 *     export const run = defineFunction((inputs) => {
 *       ...
 *       return [IoTensor.f32('output', [n], values)];
 *     });
 *
 * componentize-js calls the app module's export `run`; `defineFunction` builds it.
 * Thrown `InvalidInput` and `Failed` become the protocol's `invalid-input` and `failed`;
 * any other exception (an uncaught `HostError` included) becomes `failed` with its name
 * and message. `run` is synchronous. Every tensor it left live is dropped when it
 * returns (see `tensor.js`).
 *
 * @module sluice-guest/function
 */

import { Failed, InvalidInput } from './errors.js';
import { Inputs, IoTensor } from './io.js';
import { dropAll } from './tensor.js';

/** The export componentize-js calls, running `run(Inputs)` per invocation. */
export function defineFunction(run) {
  return function exported(witInputs) {
    try {
      const outputs = run(new Inputs(witInputs.map((t) => IoTensor.fromWit(t))));
      if (outputs === null || typeof outputs !== 'object' || typeof outputs.then === 'function') {
        throw new Failed('run must return an array of IoTensor (and not a promise)');
      }
      return { tag: 'ok', val: Array.from(outputs, (o) => o.toWit()) };
    } catch (e) {
      if (e instanceof InvalidInput) {
        return { tag: 'err', val: { tag: 'invalid-input', val: e.message } };
      }
      if (e instanceof Failed) {
        return { tag: 'err', val: { tag: 'failed', val: e.message } };
      }
      const what = e instanceof Error ? `${e.name}: ${e.message}` : `thrown: ${String(e)}`;
      return { tag: 'err', val: { tag: 'failed', val: what } };
    } finally {
      dropAll();
    }
  };
}
