/**
 * `launch-bench-js`: `launch-bench` in JavaScript, the guest half of the op-launch
 * benchmark (`runtime/benches/guest_languages.rs`).
 *
 * Input `n` (INT64 `[1]`): launches `n` tiny ops (`affine` on a one-element f32 tensor),
 * dropping each output at once, and reads only the last back. Outputs `launched` (INT64
 * `[1]`) and `last` (FP32 `[1]`).
 */

import { IoTensor, Tensor, defineFunction } from 'sluice-guest';

export const run = defineFunction((inputs) => {
  const requested = inputs.get('n').expect('INT64').data[0];
  const n = requested > 0n ? Number(requested) : 0;
  const x = Tensor.fromArray([1], [1]);
  let last = x.affine(1, 1);
  for (let i = 1; i < n; i++) {
    last.drop();
    last = x.affine(1, 1);
  }
  return [IoTensor.i64('launched', [1], [n]), IoTensor.f32('last', [1], last.toArray())];
});
