"""`compat-py-0-1-0`: a Python component built against the frozen host API 0.1.0
(`host-api/wit-released/0.1.0`, chosen by the `host-api-version` file beside this one),
with that version's raw bindings only: what a tenant deployed before the host API was
versioned. It computes what the Rust fixtures (`functions/compat/guest.rs`) do, so the
same test checks it:

`run` takes `x` (f32 `[2, 3]`) and returns `buf` (f32 `[4, 2]`: zeros with rows 1..3
written from `2 * (x @ w)`, `w = [[1, 2], [3, 4], [5, 6]]`) and `sum` (f32 `[4]`, the row
sums of `buf`).
"""

import struct

from componentize_py_types import Err
from wit_world.imports import io, ops, tensors, types


def compute(x):
    t = tensors.Tensor
    xs = t.from_f32([2, 3], x)
    w = t.from_f32([3, 2], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    y = ops.launch(ops.Op_Matmul(ops.MatmulArgs(False, False)), [xs, w])
    y2 = ops.launch(ops.Op_Binary(ops.BinaryOp.ADD), [y, y])
    buf = t.zeros(types.Dtype.F32, [4, 2])
    buf.write_rows(1, y2)
    total = ops.launch(ops.Op_Reduce(ops.ReduceArgs(ops.ReduceOp.SUM, 1, False)), [buf])
    return [f32_output("buf", buf), f32_output("sum", total)]


def f32_output(name, tensor):
    raw = tensor.read()
    values = list(struct.unpack(f"<{len(raw) // 4}f", raw))
    return io.IoTensor(name, list(tensor.shape()), io.IoData_F32(values))


class WitWorld:
    def run(self, inputs):
        x = next((i for i in inputs if i.name == "x"), None)
        if x is None or list(x.shape) != [2, 3] or not isinstance(x.data, io.IoData_F32):
            raise Err(io.RunError_InvalidInput("expected `x`: FP32 [2, 3]"))
        try:
            return compute(x.data.value)
        except Err as e:
            if isinstance(e.value, types.Error):
                raise Err(io.RunError_Failed(e.value.message)) from None
            raise
