"""`gguf-probe-py`: `gguf-probe` in Python, plus what else the Python SDK added for parity
with the Rust SDK, for the tests (`tests/tests/smollm2_py.rs`).

The function has one artifact, `model`, a GGUF file. Inputs `tensor` (BYTES `[1]`, the
name of a 2-D weight `[n, k]`) and `x` (FP32 `[m, k]`, k ≥ 192). The outputs of
`gguf-probe`, computed the same way (so equal to its outputs): `y` = `x · Wᵀ` with the
weight kept quantized, `dtype` (as the host loaded it, `q4_1`, …), `metadata` (the
host's JSON, `artifacts.metadata`), `cache` (a `[6, 3, 64]` KV cache made by
`Tensor.zeros` after `write_rows` of x's rows at 2 and of x's first row at 5), and
`refusals` (the error codes, as Rust's `Debug` of `Option<ErrorCode>`, of a write into
the weight and into a reshape of the cache, and of a `kv_attention` writing into the
weight and one given the cache as both its k and v cache). And:

- `names`: BYTES `[n]`, `artifacts.names()`;
- `sampled`: INT32 `[m]`, `y.sample(0.8, 40, 0.9, seed)` per row, `sampled_again` the
  same draw again, `greedy` INT32 `[m]`, `y.argmax()` (a `sample` with top_k 1);
- `top1`: INT32 `[m]`, `y.sample(1.0, 1, 1.0, seed)`;
- `weight_rows`: FP32 `[2, k]`, the first two rows of the weight cast to f32 on the
  device; `q_zeros`: FP32 `[1]`, the sum of `Tensor.zeros(Q41, [2, 64])` read back as
  floats (`to_vec_f32` of a quantized tensor dequantizes it on the device: 0);
- `checks`: BYTES `[n]`, one `name=value` line per other SDK call checked in the guest
  (`transpose` out of range, `to_vec_i64` of floats, `expect_dtype`, `scalar_f32`,
  `full_f32`, `from_i64`, `from_f16_bits`/`from_bf16_bits` read back, `matmul_t`,
  `max_pool2d`, `add_rms_norm`, `Tensor.concat`, `Inputs.take`).

Input `seed`: INT64 `[1]`, optional (default 7). The signature is declared in
`signature.json` (the build puts it in the component's `sluice:signature` section).
"""

from sluice_guest import Dtype, HostError, Inputs, IoTensor, Tensor, artifacts, export
from sluice_guest.tensor import DTYPE_NAMES


def refusal(write) -> bytes:
    """What a refused write's code looks like in the Rust probe: `Some(InvalidArgument)`."""
    try:
        write()
    except HostError as e:
        return f"Some({''.join(p.capitalize() for p in e.code.name.split('_'))})".encode()
    return b"None"


def code_of(call) -> str:
    try:
        call()
    except HostError as e:
        return e.code.name
    return "ok"


def run(inputs: Inputs):
    name = inputs["tensor"].as_strings()
    x_io = inputs.take("x")
    seed = inputs.find("seed")
    seed = seed.as_i64()[0] if seed is not None else 7
    x = x_io.expect("FP32").to_tensor()
    w = artifacts.load_tensor("model", name[0])
    y = x.linear(w, None, None, transpose_w=True)
    metadata = artifacts.metadata("model")
    cache = Tensor.zeros(Dtype.F32, [6, 3, 64])
    m = x.shape[0]
    rows = x.slice(1, 0, 192).reshape([m, 3, 64])
    cache.write_rows(2, rows)
    cache.write_rows(5, rows.slice(0, 0, 1))
    view = cache.reshape([6, 192])
    refusals = [
        refusal(lambda: w.write_rows(0, w)),
        refusal(lambda: view.write_rows(0, view)),
        refusal(lambda: rows.kv_attention(rows, rows, [(w, cache)], [(m, 0)], 10000.0, 0.125)),
        refusal(lambda: rows.kv_attention(rows, rows, [(cache, cache)], [(m, 0)], 10000.0, 0.125)),
    ]

    k = w.shape[1]
    checks = {
        "transpose_out_of_range": code_of(lambda: x.transpose(0, 2)),
        "to_vec_i64_of_f32": code_of(lambda: x.to_vec_i64()),
        "expect_dtype": code_of(lambda: x.expect_dtype(Dtype.I32)),
        "scalar_f32": Tensor.scalar_f32(2.5).to_scalar_f32(),
        "full_f32": Tensor.full_f32([2, 2], 0.5).to_vec_f32(),
        "from_i64": Tensor.from_i64([2], [-(2**40), 3]).to_vec_i64(),
        "from_f16_bits": Tensor.from_f16_bits([2], [0x3C00, 0xC000]).to_vec_f32(),
        "from_bf16_bits": Tensor.from_bf16_bits([1], [0x3F80]).to_vec_u16_bits(),
        "bf16_to_f32": Tensor.from_bf16_bits([1], [0xC040]).to_vec_f32(),
        "matmul_t": x.matmul_t(x, False, True).shape,
        "max_pool2d": Tensor.from_f32([1, 1, 2, 2], [1, 4, 3, 2]).max_pool2d((2, 2)).to_vec_f32(),
        "add_rms_norm": Tensor.from_f32([1, 2], [1, 1])
        .add_rms_norm(Tensor.from_f32([1, 2], [2, 2]), Tensor.from_f32([2], [1, 2]), 0.0)
        .to_vec_f32(),
        "concat": Tensor.concat([Tensor.scalar_f32(1).reshape([1]), Tensor.scalar_f32(2).reshape([1])], 0).to_vec_f32(),
        "take": "x" not in inputs and inputs.names() == [t.name for t in inputs],
        "rank_numel": [w.rank, w.numel == w.shape[0] * k],
        "u8": Tensor.from_u8([3], b"\x00\x80\xff").to_vec_u8().hex(),
    }
    sampled = y.sample(0.8, 40, 0.9, seed)
    return [
        y.to_io("y"),
        IoTensor.text("dtype", [DTYPE_NAMES[w.dtype]]),
        IoTensor.bytes("metadata", [1], [metadata.encode()]),
        cache.to_io("cache"),
        IoTensor.bytes("refusals", [4], refusals),
        IoTensor.text("names", artifacts.names()),
        IoTensor.i32("sampled", [m], sampled.to_vec_i32()),
        IoTensor.i32("sampled_again", [m], y.sample(0.8, 40, 0.9, seed).to_vec_i32()),
        IoTensor.i32("greedy", [m], y.argmax().to_vec_i32()),
        IoTensor.i32("top1", [m], y.sample(1.0, 1, 1.0, seed).to_vec_i32()),
        IoTensor.f32("weight_rows", [2, k], w.cast(Dtype.F32).slice(0, 0, 2).to_vec_f32()),
        IoTensor.f32("q_zeros", [1], [sum(Tensor.zeros(Dtype.Q41, [2, 64]).to_vec_f32())]),
        IoTensor.text("checks", [f"{key}={value}" for key, value in checks.items()]),
    ]


WitWorld = export(run)
