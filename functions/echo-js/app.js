/**
 * `echo-js`: `echo` in JavaScript. Returns its inputs unchanged, in order, with the same
 * names, datatypes and shapes; every numeric input is uploaded as a device tensor and
 * read back (BYTES pass straight through). An input whose element count does not match
 * its shape is an `invalid-input` error.
 */

import { IoTensor, defineFunction } from 'sluice-guest';

export const run = defineFunction((inputs) => {
  const outputs = [];
  for (const t of inputs) {
    if (t.datatype === 'BYTES') {
      outputs.push(t.check());
    } else {
      outputs.push(IoTensor.fromTensor(t.name, t.toTensor()));
    }
  }
  return outputs;
});
