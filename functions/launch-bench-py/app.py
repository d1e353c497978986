"""`launch-bench-py`: `launch-bench` in Python, the guest half of the op-launch
benchmark (`runtime/benches/python_guest.rs`).

Input `n` (INT64 `[1]`): launches `n` tiny ops (`affine` on a one-element f32 tensor),
dropping each output at once, and reads only the last back. Outputs `launched` (INT64
`[1]`) and `last` (FP32 `[1]`).
"""

from sluice_guest import Inputs, IoTensor, Tensor, export


def run(inputs: Inputs):
    n = max(inputs["n"].expect("INT64").data[0], 0)
    x = Tensor.from_list([1.0], [1])
    last = x.affine(1.0, 1.0)
    for _ in range(1, n):
        last = x.affine(1.0, 1.0)
    return [IoTensor.i64("launched", [1], [n]), IoTensor.f32("last", [1], last.to_list())]


WitWorld = export(run)
