"""sluice's guest SDK for Python: write an inference function in plain Python, built
into a WebAssembly component with componentize-py (`cargo xtask build-functions`).

Every tensor op is a call into the host's device API, exactly as from the Rust SDK
(`guest-sdk/`): the host schedules each kernel, the guest holds only handles. No NumPy
inside the guest: inputs and outputs are plain Python lists, the compute runs on the
host.

    from sluice_guest import export, Inputs, IoTensor, Tensor

    def run(inputs: Inputs):
        x = inputs["input"].expect("FP32").to_tensor()
        return [IoTensor.from_tensor("output", x.relu())]

    WitWorld = export(run)

A function may stream chunks of output while it runs (`streaming.emit`, e.g. a
generation's tokens) and learn that its caller has gone (`streaming.caller_gone`), read
its artifacts (`artifacts.read`, `load_tensor`, `metadata` of a GGUF file, `names`),
keep a KV cache on the device (`Tensor.zeros`, `write_rows`), and serve many requests at
once from a host queue (`serving`). The API is the Rust SDK's (`guest-sdk/src`) under
the same names where Python allows.
"""

from wit_world.imports.ops import PoolKind, ReduceOp, UnaryOp
from wit_world.imports.types import Dtype, ErrorCode

from .errors import Failed, HostError, InvalidInput
from .function import export
from . import artifacts, serving, streaming
from .convert import bf16_bits_to_f32, f16_bits_to_f32
from .io import Inputs, IoTensor
from .tensor import Tensor, is_quantized, launch, launch_fused, load_tensor, read_artifact

__all__ = [
    "Dtype",
    "ErrorCode",
    "Failed",
    "HostError",
    "Inputs",
    "InvalidInput",
    "IoTensor",
    "PoolKind",
    "ReduceOp",
    "Tensor",
    "UnaryOp",
    "artifacts",
    "bf16_bits_to_f32",
    "export",
    "f16_bits_to_f32",
    "is_quantized",
    "launch",
    "launch_fused",
    "load_tensor",
    "read_artifact",
    "serving",
    "streaming",
]
