"""Unit tests of the Python guest SDK's pure logic, run natively (no host):

    python3 -m unittest discover -s guest-sdk/python/tests

The SDK imports the bindings componentize-py generates (`wit_world`); the tests make
them once into a temporary directory with the `componentize-py` beside this Python
(its venv: `~/.cache/sluice/venv-componentize-py-*`) or on the PATH, and skip without
it. What needs the host (every op) is covered by `tests/tests/python_guest.rs`.
"""

import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(SDK))
sys.path.insert(0, SDK)


def _bindings():
    """A directory holding `wit_world` for `host-api/wit`, or None."""
    try:
        import wit_world  # noqa: F401

        return ""
    except ImportError:
        pass
    beside = os.path.join(os.path.dirname(sys.executable), "componentize-py")
    tool = beside if os.path.exists(beside) else shutil.which("componentize-py")
    if tool is None:
        return None
    out = tempfile.mkdtemp(prefix="sluice-py-bindings-")
    wit = os.path.join(ROOT, "host-api", "wit")
    subprocess.run([tool, "-d", wit, "-w", "inference", "bindings", out], check=True, capture_output=True, cwd=out)
    sys.path.insert(0, out)
    return out


BINDINGS = _bindings()


def _convert():
    """`sluice_guest/convert.py` by path: it needs no bindings (the package does)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("sluice_convert", os.path.join(SDK, "sluice_guest", "convert.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Convert(unittest.TestCase):
    """`convert.py`: the Rust SDK's `convert.rs` tests."""

    def test_f16_values(self):
        bf16_bits_to_f32, f16_bits_to_f32 = _convert().bf16_bits_to_f32, _convert().f16_bits_to_f32

        self.assertEqual(f16_bits_to_f32(0x3C00), 1.0)
        self.assertEqual(f16_bits_to_f32(0xC000), -2.0)
        self.assertEqual(f16_bits_to_f32(0x7BFF), 65504.0)
        self.assertEqual(f16_bits_to_f32(0x0001), 2.0**-24)
        self.assertEqual(f16_bits_to_f32(0x7C00), math.inf)
        self.assertTrue(math.isnan(f16_bits_to_f32(0x7E00)))
        self.assertEqual(bf16_bits_to_f32(0x3F80), 1.0)
        self.assertEqual(bf16_bits_to_f32(0xC040), -3.0)

    def test_zero_blocks(self):
        zero_bytes = _convert().zero_bytes

        self.assertEqual(len(zero_bytes("Q41", [2, 64])), 4 * 20)
        self.assertEqual(len(zero_bytes("Q80", [32])), 34)
        self.assertEqual(len(zero_bytes("F32", [3, 2])), 24)
        self.assertEqual(len(zero_bytes("I64", [])), 8)


@unittest.skipIf(BINDINGS is None, "no componentize-py to generate the bindings with")
class Bindings(unittest.TestCase):
    """What maps onto the generated WIT types, and the IO wrappers' checks."""

    def test_dtypes_map_in_wit_order(self):
        from sluice_guest import Dtype
        from sluice_guest.tensor import DTYPE_NAMES, is_quantized

        names = ["f32", "f16", "bf16", "i32", "i64", "u8", "q4_1", "q8_0"]
        self.assertEqual([DTYPE_NAMES[d] for d in Dtype], names)
        self.assertEqual([d.value for d in Dtype], list(range(8)))
        self.assertEqual([is_quantized(d) for d in Dtype], [False] * 6 + [True] * 2)

    def test_every_activation_has_its_method(self):
        from sluice_guest import Tensor, UnaryOp

        for u in UnaryOp:
            self.assertTrue(callable(getattr(Tensor, u.name.lower())), u)

    def test_io_accessors_and_shapes(self):
        from sluice_guest import InvalidInput, IoTensor

        t = IoTensor.f32("x", [2, 3], [0.0] * 6)
        self.assertEqual(t.as_f32(), [0.0] * 6)
        self.assertEqual(t.numel, 6)
        t.expect_shape([None, 3])
        with self.assertRaisesRegex(InvalidInput, r"tensor `x`: expected shape \[\?, 4\], got \[2, 3\]"):
            t.expect_shape([None, 4])
        with self.assertRaisesRegex(InvalidInput, "tensor `x`: expected INT32, got FP32"):
            t.as_i32()
        with self.assertRaisesRegex(InvalidInput, "shape"):
            IoTensor.f32("y", [2], [1.0]).check()
        self.assertEqual(IoTensor.bytes("b", [1], [b"\xff"]).as_bytes(), [b"\xff"])
        self.assertEqual(IoTensor.f16_bits("h", [1], [0x3C00]).datatype, "FP16")
        self.assertEqual(IoTensor.bf16_bits("h", [1], [0x3F80]).data, [0x3F80])
        self.assertIsNone(IoTensor.text("s", ["a"]).dtype)

    def test_inputs_by_name(self):
        from sluice_guest import Inputs, InvalidInput, IoTensor

        inputs = Inputs([IoTensor.i32("a", [1], [1]), IoTensor.text("b", ["x"])])
        self.assertEqual(inputs.names(), ["a", "b"])
        self.assertIsNone(inputs.find("c"))
        self.assertIn("b", inputs)
        self.assertEqual(inputs.take("a").as_i32(), [1])
        self.assertEqual(inputs.names(), ["b"])
        with self.assertRaisesRegex(InvalidInput, "missing input `a`"):
            inputs.take("a")

    def test_serving_wait_saturates(self):
        from sluice_guest.serving import max_wait_us

        self.assertEqual(max_wait_us(0.2), 200_000)
        self.assertEqual(max_wait_us(-1), 0)
        self.assertEqual(max_wait_us(1e9), 0xFFFF_FFFF)

    def test_kv_attention_pairs_become_the_wit_call(self):
        from unittest import mock

        from sluice_guest import Tensor
        from sluice_guest.tensor import ops

        q, k, v, kc0, vc0, kc1, vc1, out = (object() for _ in range(8))
        calls = []

        def kv_attention(*args):
            calls.append(args)
            return out

        with mock.patch.object(ops, "kv_attention", kv_attention):
            caches = [(Tensor(kc0), Tensor(vc0)), (Tensor(kc1), Tensor(vc1))]
            y = Tensor(q).kv_attention(Tensor(k), Tensor(v), caches, [(2, 0), (1, 5)], 10000, 0.5)
            z = Tensor.kv_attention(Tensor(q), Tensor(k), Tensor(v), caches[:1], [(3, 0)], 1e4, 0.5)
        self.assertIs(y.raw, out)
        self.assertIs(z.raw, out)
        spans = [ops.KvSpan(2, 0), ops.KvSpan(1, 5)]
        self.assertEqual(calls[0], (q, k, v, [kc0, kc1], [vc0, vc1], ops.KvAttentionArgs(10000.0, 0.5, spans)))
        self.assertEqual(calls[1][3:], ([kc0], [vc0], ops.KvAttentionArgs(1e4, 0.5, [ops.KvSpan(3, 0)])))

    def test_run_errors(self):
        from sluice_guest import Failed, HostError, InvalidInput
        from sluice_guest.function import run_error
        from wit_world.imports import io, types

        self.assertEqual(run_error(InvalidInput("bad")), io.RunError_InvalidInput("bad"))
        self.assertEqual(run_error(Failed("no")), io.RunError_Failed("no"))
        e = HostError(types.ErrorCode.SHAPE_MISMATCH, "x")
        self.assertEqual(run_error(e), io.RunError_Failed("HostError: shape-mismatch: x"))


if __name__ == "__main__":
    unittest.main()
