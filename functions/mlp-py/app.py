"""`mlp-py`: the `mlp` test function (`functions/mlp`) in Python, op for op, with the
same generated weights, so its outputs must equal the Rust one's exactly.

- Input `input`: FP32, shape `[n, 16]` with `n ≥ 1`; anything else is `invalid-input`.
- Output `probabilities`: FP32 `[n, 10]`: softmax(gelu(relu(x·W1+b1)·W2+b2)·W3+b3).

Weights: one splitmix64 generator with state 42 draws every element of W1 (row-major),
b1, W2, b2, W3, b3; each weight of a layer with fan-in f is `(2u - 1) / sqrt(f)`
rounded to f32, with `u = (next() >> 11) * 2^-53` (see `functions/mlp/src/lib.rs`).
"""

import math

from sluice_guest import Inputs, InvalidInput, IoTensor, Tensor, export

INPUT, HIDDEN, CLASSES, SEED = 16, 64, 10, 42
MASK = (1 << 64) - 1


class SplitMix64:
    def __init__(self, state: int):
        self.state = state

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def uniform(self, count: int, fan_in: int):
        bound = 1.0 / math.sqrt(fan_in)
        # f64 values; the upload rounds them to f32 as the Rust function does.
        return [(2.0 * ((self.next() >> 11) * (1.0 / (1 << 53))) - 1.0) * bound for _ in range(count)]


def dense(rng: SplitMix64, fan_in: int, fan_out: int):
    w = Tensor.from_list(rng.uniform(fan_in * fan_out, fan_in), [fan_in, fan_out])
    b = Tensor.from_list(rng.uniform(fan_out, fan_in), [fan_out])
    return lambda x: (x @ w) + b


def run(inputs: Inputs):
    x = inputs["input"].expect("FP32")
    if len(x.shape) != 2 or x.shape[1] != INPUT:
        raise InvalidInput(f"tensor `input`: expected shape [n, {INPUT}], got {x.shape}")
    if x.shape[0] == 0:
        raise InvalidInput("tensor `input`: needs at least one row")
    rng = SplitMix64(SEED)
    l1, l2, l3 = dense(rng, INPUT, HIDDEN), dense(rng, HIDDEN, HIDDEN), dense(rng, HIDDEN, CLASSES)
    h1 = l1(x.to_tensor()).relu()
    h2 = l2(h1).gelu()
    return [IoTensor.from_tensor("probabilities", l3(h2).softmax())]


WitWorld = export(run)
