"""`Tensor`: a handle to a tensor on the host's device, with the op catalog as methods
and operators.

Every method launches one op on the host and returns the output's handle at once;
only the read-backs (`read`, `to_list`, `to_vec_*`, `to_io`) wait for the device.
Shapes and dtypes are checked by the host before anything is queued: a bad call raises
`HostError` (`shape-mismatch`, …). The methods are the Rust SDK's `Tensor` methods
under the same names (plus Python's operators); `launch` and `launch_fused` are the
escape hatches to the raw WIT ops.
"""

import struct
from typing import List, Optional, Sequence, Tuple

from wit_world.imports import artifacts, fused, ops, tensors, types

from . import convert
from .errors import HostError, host_call

Dtype = types.Dtype

#: `struct` format letter and size of each numeric dtype's elements.
_FORMATS = {
    Dtype.F32: ("f", 4),
    Dtype.F16: ("e", 2),
    Dtype.I32: ("i", 4),
    Dtype.I64: ("q", 8),
    Dtype.U8: ("B", 1),
}

UNARY = ops.UnaryOp
REDUCE = ops.ReduceOp
POOL = ops.PoolKind

#: The host API's names of the dtypes (as in its error messages: `f32`, `q4_1`, …).
DTYPE_NAMES = {
    Dtype.F32: "f32",
    Dtype.F16: "f16",
    Dtype.BF16: "bf16",
    Dtype.I32: "i32",
    Dtype.I64: "i64",
    Dtype.U8: "u8",
    Dtype.Q41: "q4_1",
    Dtype.Q80: "q8_0",
}


def is_quantized(dtype: "types.Dtype") -> bool:
    """Whether `dtype` is a block format (`Q41`, `Q80`): 32 elements a block."""
    return convert.is_quantized(dtype.name)


def launch(op: "ops.Op", inputs: Sequence["Tensor"]) -> "Tensor":
    """Launches a raw WIT op (`ops.Op_*`) on `inputs`: the escape hatch under every method."""
    return Tensor(host_call(ops.launch, op, [t._handle for t in inputs]))


def launch_fused(op: "fused.FusedOp", inputs: Sequence["Tensor"]) -> "Tensor":
    """Launches a raw WIT fused op (`fused.FusedOp_*`) on `inputs`."""
    return Tensor(host_call(fused.launch, op, [t._handle for t in inputs]))


class Tensor:
    """A device tensor owned by this invocation; freed when garbage-collected or `drop`ped."""

    __slots__ = ("_handle",)

    def __init__(self, handle: "tensors.Tensor"):
        self._handle = handle

    # --- making and reading -------------------------------------------------------

    @staticmethod
    def from_bytes(dtype: "types.Dtype", shape: Sequence[int], data: bytes) -> "Tensor":
        """Uploads little-endian element bytes (`product(shape) * size(dtype)` of them)."""
        return Tensor(host_call(tensors.Tensor.from_bytes, dtype, list(shape), bytes(data)))

    @staticmethod
    def from_list(values: Sequence, shape: Sequence[int], dtype: "types.Dtype" = Dtype.F32) -> "Tensor":
        """Uploads Python numbers as a tensor of `dtype` (f32 by default)."""
        if dtype == Dtype.F32:
            return Tensor(host_call(tensors.Tensor.from_f32, list(shape), [float(v) for v in values]))
        if dtype == Dtype.I32:
            return Tensor(host_call(tensors.Tensor.from_i32, list(shape), [int(v) for v in values]))
        fmt, _ = _format(dtype)
        return Tensor.from_bytes(dtype, shape, struct.pack(f"<{len(values)}{fmt}", *values))

    @staticmethod
    def from_raw(handle: "tensors.Tensor") -> "Tensor":
        """Wraps a raw generated handle (e.g. from a `wit_world.imports` call)."""
        return Tensor(handle)

    @property
    def raw(self) -> "tensors.Tensor":
        """The raw generated handle, for calls into the bindings."""
        return self._handle

    @staticmethod
    def from_f32(shape: Sequence[int], data: Sequence[float]) -> "Tensor":
        """Uploads an f32 tensor."""
        return Tensor(host_call(tensors.Tensor.from_f32, list(shape), [float(v) for v in data]))

    @staticmethod
    def from_i32(shape: Sequence[int], data: Sequence[int]) -> "Tensor":
        """Uploads an i32 tensor."""
        return Tensor(host_call(tensors.Tensor.from_i32, list(shape), [int(v) for v in data]))

    @staticmethod
    def from_i64(shape: Sequence[int], data: Sequence[int]) -> "Tensor":
        """Uploads an i64 tensor."""
        return Tensor.from_bytes(Dtype.I64, shape, struct.pack(f"<{len(data)}q", *data))

    @staticmethod
    def from_u8(shape: Sequence[int], data: bytes) -> "Tensor":
        """Uploads a u8 tensor."""
        return Tensor.from_bytes(Dtype.U8, shape, bytes(data))

    @staticmethod
    def from_f16_bits(shape: Sequence[int], bits: Sequence[int]) -> "Tensor":
        """Uploads an f16 tensor from raw IEEE 754 binary16 bit patterns."""
        return Tensor.from_bytes(Dtype.F16, shape, convert.u16_le(bits))

    @staticmethod
    def from_bf16_bits(shape: Sequence[int], bits: Sequence[int]) -> "Tensor":
        """Uploads a bf16 tensor from raw bfloat16 bit patterns."""
        return Tensor.from_bytes(Dtype.BF16, shape, convert.u16_le(bits))

    @staticmethod
    def zeros(dtype: "types.Dtype", shape: Sequence[int]) -> "Tensor":
        """A tensor of zeros. One of a plain dtype is made on the device (the host's
        `tensor.zeros`) and is the kind of tensor `write_rows` may change, e.g. a KV
        cache; one of a block format is an upload of zero blocks."""
        if not is_quantized(dtype):
            return Tensor(host_call(tensors.Tensor.zeros, dtype, list(shape)))
        return Tensor.from_bytes(dtype, shape, convert.zero_bytes(dtype.name, shape))

    @staticmethod
    def full_f32(shape: Sequence[int], value: float) -> "Tensor":
        """An f32 tensor with every element equal to `value`."""
        return Tensor.from_f32(shape, [float(value)] * convert.numel(shape))

    @staticmethod
    def scalar_f32(value: float) -> "Tensor":
        """A rank-0 f32 tensor (broadcasts against anything in binary ops)."""
        return Tensor.from_f32([], [float(value)])

    def write_rows(self, offset: int, src: "Tensor") -> None:
        """Writes `src` in place into rows `offset .. offset + src.shape[0]` of this
        tensor's first axis (a tensor made by `zeros`), queued in launch order with the
        other ops: how a KV cache `[ctx, kv_heads, d]` grows by a step's positions. `src`
        has this tensor's dtype and its other axes."""
        host_call(self._handle.write_rows, int(offset), src._handle)

    @property
    def dtype(self) -> "types.Dtype":
        return self._handle.dtype()

    @property
    def shape(self) -> List[int]:
        return list(self._handle.shape())

    @property
    def rank(self) -> int:
        """The number of dimensions."""
        return len(self._handle.shape())

    @property
    def numel(self) -> int:
        """The number of elements."""
        return convert.numel(self._handle.shape())

    def read(self) -> bytes:
        """Waits for the ops producing this tensor and returns its little-endian bytes."""
        return host_call(self._handle.read)

    read_bytes = read

    def to_list(self) -> list:
        """The elements as Python numbers, row-major (not for bf16: read the bytes)."""
        fmt, size = _format(self.dtype)
        return convert.unpack(fmt, size, self.read())

    def to_vec_f32(self) -> List[float]:
        """The elements as floats, converting f16, bf16 and integers (a block-quantized
        tensor is dequantized on the device first)."""
        dtype = self.dtype
        if is_quantized(dtype):
            return self.cast(Dtype.F32).to_vec_f32()
        if dtype == Dtype.BF16:
            return [convert.bf16_bits_to_f32(b) for b in convert.unpack("H", 2, self.read())]
        return [float(v) for v in self.to_list()]

    def to_vec_i64(self) -> List[int]:
        """The elements of an integer tensor (exact); a floating one is `dtype-mismatch`
        (`cast` it first to truncate on the device)."""
        dtype = self.dtype
        if dtype not in (Dtype.I64, Dtype.I32, Dtype.U8):
            raise HostError(types.ErrorCode.DTYPE_MISMATCH, f"expected an integer tensor, got {DTYPE_NAMES[dtype]}")
        return self.to_list() if dtype != Dtype.U8 else list(self.read())

    def to_vec_i32(self) -> List[int]:
        """The elements of an i32 tensor; another dtype is `dtype-mismatch`."""
        self.expect_dtype(Dtype.I32)
        return self.to_list()

    def to_vec_u8(self) -> bytes:
        """The elements of a u8 tensor; another dtype is `dtype-mismatch`."""
        self.expect_dtype(Dtype.U8)
        return self.read()

    def to_vec_u16_bits(self) -> List[int]:
        """The raw bit patterns of an f16 or bf16 tensor."""
        dtype = self.dtype
        if dtype not in (Dtype.F16, Dtype.BF16):
            raise HostError(
                types.ErrorCode.DTYPE_MISMATCH, f"expected an f16 or bf16 tensor, got {DTYPE_NAMES[dtype]}"
            )
        return convert.unpack("H", 2, self.read())

    def to_scalar_f32(self) -> float:
        """A single-element tensor's value as a float."""
        v = self.to_vec_f32()
        if len(v) != 1:
            raise HostError(types.ErrorCode.SHAPE_MISMATCH, f"expected one element, tensor has {len(v)}")
        return v[0]

    def expect_dtype(self, want: "types.Dtype") -> None:
        """Raises `HostError` (`dtype-mismatch`) unless the tensor has dtype `want`."""
        got = self.dtype
        if got != want:
            raise HostError(
                types.ErrorCode.DTYPE_MISMATCH, f"expected a {DTYPE_NAMES[want]} tensor, got {DTYPE_NAMES[got]}"
            )

    def to_io(self, name: str):
        """Reads this tensor back as an output named `name` (`IoTensor.from_tensor`)."""
        from .io import IoTensor  # io imports this module

        return IoTensor.from_tensor(name, self)

    def drop(self) -> None:
        """Frees the tensor now (the host frees it once no pending op uses it)."""
        self._handle.__exit__(None, None, None)

    def __repr__(self) -> str:
        return f"Tensor({DTYPE_NAMES.get(self.dtype, self.dtype.name.lower())}, {self.shape})"

    # --- the op catalog -------------------------------------------------------------

    def _op(self, op, *others: "Tensor") -> "Tensor":
        return Tensor(host_call(ops.launch, op, [self._handle, *[t._handle for t in others]]))

    def _fused(self, op, *others: "Tensor") -> "Tensor":
        return Tensor(host_call(fused.launch, op, [self._handle, *[t._handle for t in others]]))

    def matmul(self, other: "Tensor", transpose_a: bool = False, transpose_b: bool = False) -> "Tensor":
        """Matrix product of the last two axes, batched over the leading ones."""
        return self._op(ops.Op_Matmul(ops.MatmulArgs(transpose_a, transpose_b)), other)

    def matmul_t(self, other: "Tensor", transpose_a: bool, transpose_b: bool) -> "Tensor":
        """Matrix product with transposes of either operand's last two axes
        (`x.matmul_t(w, False, True)` is `x @ wᵀ`)."""
        return self.matmul(other, transpose_a, transpose_b)

    def _binary(self, kind, other) -> "Tensor":
        if not isinstance(other, Tensor):
            raise TypeError(f"expected a Tensor, got {type(other).__name__} (use affine for scalars)")
        return self._op(ops.Op_Binary(kind), other)

    def add(self, other: "Tensor") -> "Tensor":
        return self._binary(ops.BinaryOp.ADD, other)

    def sub(self, other: "Tensor") -> "Tensor":
        return self._binary(ops.BinaryOp.SUB, other)

    def mul(self, other: "Tensor") -> "Tensor":
        return self._binary(ops.BinaryOp.MUL, other)

    def div(self, other: "Tensor") -> "Tensor":
        return self._binary(ops.BinaryOp.DIV, other)

    def maximum(self, other: "Tensor") -> "Tensor":
        return self._binary(ops.BinaryOp.MAXIMUM, other)

    def minimum(self, other: "Tensor") -> "Tensor":
        return self._binary(ops.BinaryOp.MINIMUM, other)

    def __matmul__(self, other: "Tensor") -> "Tensor":
        return self.matmul(other)

    def __add__(self, other):
        return self.affine(1.0, float(other)) if isinstance(other, (int, float)) else self.add(other)

    def __sub__(self, other):
        return self.affine(1.0, -float(other)) if isinstance(other, (int, float)) else self.sub(other)

    def __mul__(self, other):
        return self.affine(float(other), 0.0) if isinstance(other, (int, float)) else self.mul(other)

    def __truediv__(self, other):
        return self.affine(1.0 / float(other), 0.0) if isinstance(other, (int, float)) else self.div(other)

    def __neg__(self) -> "Tensor":
        return self.unary(UNARY.NEG)

    def neg(self) -> "Tensor":
        """`-x` (also on integers)."""
        return self.unary(UNARY.NEG)

    def unary(self, kind: "ops.UnaryOp") -> "Tensor":
        """An elementwise activation or function (`UNARY.RELU`, `UNARY.GELU`, …)."""
        return self._op(ops.Op_Unary(kind))

    def relu(self) -> "Tensor":
        return self.unary(UNARY.RELU)

    def gelu(self) -> "Tensor":
        return self.unary(UNARY.GELU)

    def gelu_tanh(self) -> "Tensor":
        return self.unary(UNARY.GELU_TANH)

    def tanh(self) -> "Tensor":
        return self.unary(UNARY.TANH)

    def sigmoid(self) -> "Tensor":
        return self.unary(UNARY.SIGMOID)

    def exp(self) -> "Tensor":
        return self.unary(UNARY.EXP)

    def log(self) -> "Tensor":
        return self.unary(UNARY.LOG)

    def sqrt(self) -> "Tensor":
        return self.unary(UNARY.SQRT)

    def rsqrt(self) -> "Tensor":
        return self.unary(UNARY.RSQRT)

    def abs(self) -> "Tensor":
        return self.unary(UNARY.ABS)

    def silu(self) -> "Tensor":
        """`x * sigmoid(x)` (SwiGLU is `gate.linear(..., UNARY.SILU) * up`)."""
        return self.unary(UNARY.SILU)

    def rope(self, base: float, offset: int = 0) -> "Tensor":
        """Rotary position embedding (llama.cpp's adjacent-pair layout), positions from `offset`."""
        return self._op(ops.Op_Rope(ops.RopeArgs(float(base), int(offset))))

    def argmax(self) -> "Tensor":
        """The i32 index of each row's largest element (last axis): greedy decoding."""
        return self._op(ops.Op_Argmax())

    def sample(self, temperature: float, top_k: int, top_p: float, seed: int) -> "Tensor":
        """A token drawn from each row of f32 logits `[..., v]` (i32 of shape `[...]`)
        with `temperature` (> 0), `top_k` (0: all) and `top_p` (in `(0, 1]`), from `seed`
        (give each decode step its own): the same tokens on every backend (the WIT
        `sample-args` documents the algorithm)."""
        args = ops.SampleArgs(float(temperature), int(top_k), float(top_p), int(seed) & 0xFFFF_FFFF_FFFF_FFFF)
        return self._op(ops.Op_Sample(args))

    def affine(self, scale: float, bias: float = 0.0) -> "Tensor":
        """`x * scale + bias`, elementwise."""
        return self._op(ops.Op_Affine(ops.AffineArgs(float(scale), float(bias))))

    def scale(self, s: float) -> "Tensor":
        """`x * s`, elementwise."""
        return self.affine(s, 0.0)

    def softmax(self, scale: float = 1.0, mask: Optional["Tensor"] = None) -> "Tensor":
        """Softmax over the last axis of `x * scale + mask`."""
        op = ops.Op_Softmax(ops.SoftmaxArgs(float(scale)))
        return self._op(op, mask) if mask is not None else self._op(op)

    def layer_norm(self, gamma: "Tensor", beta: "Tensor", eps: float = 1e-5) -> "Tensor":
        """Layer normalisation over the last axis."""
        return self._op(ops.Op_LayerNorm(ops.LayerNormArgs(float(eps))), gamma, beta)

    def embedding(self, ids: "Tensor") -> "Tensor":
        """Rows of this table `[vocab, d]` gathered by `ids` (i32 or i64); the output
        has shape `ids.shape + [d]`. `Tensor.embedding(table, ids)` reads as in Rust."""
        return self._op(ops.Op_Embedding(), ids)

    gather = embedding

    def reduce(self, kind: "ops.ReduceOp", axis: int, keep_dim: bool = False) -> "Tensor":
        return self._op(ops.Op_Reduce(ops.ReduceArgs(kind, axis, keep_dim)))

    def sum(self, axis: int, keep_dim: bool = False) -> "Tensor":
        return self.reduce(REDUCE.SUM, axis, keep_dim)

    def mean(self, axis: int, keep_dim: bool = False) -> "Tensor":
        return self.reduce(REDUCE.MEAN, axis, keep_dim)

    def max(self, axis: int, keep_dim: bool = False) -> "Tensor":
        return self.reduce(REDUCE.MAX, axis, keep_dim)

    def min(self, axis: int, keep_dim: bool = False) -> "Tensor":
        return self.reduce(REDUCE.MIN, axis, keep_dim)

    def reshape(self, shape: Sequence[int]) -> "Tensor":
        return self._op(ops.Op_Reshape(list(shape)))

    def permute(self, axes: Sequence[int]) -> "Tensor":
        return self._op(ops.Op_Permute(list(axes)))

    def transpose(self, a: int, b: int) -> "Tensor":
        """Swaps axes `a` and `b` (a `permute`); an axis out of range is `invalid-argument`."""
        rank = self.rank
        if not (0 <= a < rank and 0 <= b < rank):
            raise HostError(types.ErrorCode.INVALID_ARGUMENT, f"transpose({a}, {b}) on a tensor of rank {rank}")
        perm = list(range(rank))
        perm[a], perm[b] = perm[b], perm[a]
        return self.permute(perm)

    def slice(self, axis: int, start: int, end: int) -> "Tensor":
        """Elements `start..end` of `axis`."""
        return self._op(ops.Op_Slice(ops.SliceArgs(axis, start, end)))

    def concat(self, others, axis: Optional[int] = None) -> "Tensor":
        """This tensor and `others`, joined along `axis`; or, called on the class as in
        Rust, `Tensor.concat([a, b, ...], axis)` joins the list."""
        if isinstance(self, (list, tuple)):
            return launch(ops.Op_Concat(int(others if axis is None else axis)), list(self))
        if axis is None:
            raise TypeError("concat(others, axis): no axis given")
        return self._op(ops.Op_Concat(int(axis)), *others)

    def cast(self, dtype: "types.Dtype") -> "Tensor":
        return self._op(ops.Op_Cast(dtype))

    def conv2d(
        self,
        weight: "Tensor",
        bias: Optional["Tensor"] = None,
        stride=(1, 1),
        padding=(0, 0),
        dilation=(1, 1),
        groups: int = 1,
    ) -> "Tensor":
        """2-D convolution, NCHW."""
        op = ops.Op_Conv2d(ops.Conv2dArgs(tuple(stride), tuple(padding), tuple(dilation), groups))
        return self._op(op, weight, bias) if bias is not None else self._op(op, weight)

    def pool2d(self, kind: "ops.PoolKind", kernel, stride=None, padding=(0, 0)) -> "Tensor":
        """2-D max or average pooling, NCHW (stride defaults to the kernel)."""
        stride = tuple(kernel) if stride is None else tuple(stride)
        return self._op(ops.Op_Pool2d(ops.Pool2dArgs(kind, tuple(kernel), stride, tuple(padding))))

    def max_pool2d(self, kernel, stride=None, padding=(0, 0)) -> "Tensor":
        """2-D max pooling, NCHW (stride defaults to the kernel)."""
        return self.pool2d(POOL.MAX, kernel, stride, padding)

    def avg_pool2d(self, kernel, stride=None, padding=(0, 0)) -> "Tensor":
        """2-D average pooling, NCHW (padding counts as zero, included in the divisor)."""
        return self.pool2d(POOL.AVG, kernel, stride, padding)

    # --- fused ops ----------------------------------------------------------------------

    def linear(
        self,
        weight: "Tensor",
        bias: Optional["Tensor"] = None,
        activation: Optional["ops.UnaryOp"] = None,
        transpose_w: bool = False,
    ) -> "Tensor":
        """`activation(x · w + b)` in one launch."""
        op = fused.FusedOp_Linear(fused.LinearArgs(transpose_w, activation))
        return self._fused(op, weight, bias) if bias is not None else self._fused(op, weight)

    def add_layer_norm(self, residual: "Tensor", gamma: "Tensor", beta: "Tensor", eps: float = 1e-5) -> "Tensor":
        """`layer_norm(x + residual)` in one launch."""
        return self._fused(fused.FusedOp_AddLayerNorm(ops.LayerNormArgs(float(eps))), residual, gamma, beta)

    def rms_norm(self, weight: "Tensor", residual: Optional["Tensor"] = None, eps: float = 1e-5) -> "Tensor":
        """RMS normalisation over the last axis, of `x + residual` when one is given."""
        op = fused.FusedOp_RmsNorm(ops.LayerNormArgs(float(eps)))
        return self._fused(op, residual, weight) if residual is not None else self._fused(op, weight)

    def add_rms_norm(self, residual: "Tensor", weight: "Tensor", eps: float = 1e-5) -> "Tensor":
        """RMS norm of `x + residual` (rounded to the dtype first) times `weight`, in one
        launch (a llama block's pre-norm)."""
        return self.rms_norm(weight, residual, eps)

    def gqa_attention(self, k_cache: "Tensor", v_cache: "Tensor", kv_len: int, scale: float) -> "Tensor":
        """Causal grouped-query attention of these queries over the first `kv_len`
        positions of a `[ctx, kv_heads, d]` KV cache."""
        op = fused.FusedOp_GqaAttention(fused.GqaAttentionArgs(int(kv_len), float(scale)))
        return self._fused(op, k_cache, v_cache)

    def kv_attention(
        self,
        k: "Tensor",
        v: "Tensor",
        caches: Sequence[Tuple["Tensor", "Tensor"]],
        spans: Sequence[Tuple[int, int]],
        rope_base: float,
        scale: float,
    ) -> "Tensor":
        """A llama's attention of new positions for one or more sequences in one launch
        (host API 1.2.0, the WIT `ops.kv-attention`), with these queries `[n, heads, d]`
        and the new keys and values `k`, `v` `[n, kv_heads, d]`. `spans` splits the n
        rows, in order, into sequences as `(rows, position)` pairs, and `caches` gives
        each its `(k_cache, v_cache)` `[ctx, kv_heads, d]` (made by `zeros`, each given
        once). Per span, exactly `rope(rope_base, position)` of its rows of q and k,
        `write_rows(position, …)` of the turned k and of v into its caches, then
        `gqa_attention` over `position + rows` positions with `scale`; the output is
        `[n, heads, d]`. Also `Tensor.kv_attention(q, k, v, caches, spans, …)`."""
        args = ops.KvAttentionArgs(float(rope_base), float(scale), [ops.KvSpan(int(r), int(p)) for r, p in spans])
        k_caches = [kc._handle for kc, _ in caches]
        v_caches = [vc._handle for _, vc in caches]
        return Tensor(host_call(ops.kv_attention, self._handle, k._handle, v._handle, k_caches, v_caches, args))

    def attention(
        self, k: "Tensor", v: "Tensor", heads: int, scale: float, mask: Optional["Tensor"] = None
    ) -> "Tensor":
        """Multi-head attention with this tensor as the queries (heads interleaved)."""
        op = fused.FusedOp_Attention(fused.AttentionArgs(heads, float(scale)))
        return self._fused(op, k, v, mask) if mask is not None else self._fused(op, k, v)


def _format(dtype: "types.Dtype"):
    try:
        return _FORMATS[dtype]
    except KeyError:
        raise HostError(types.ErrorCode.DTYPE_MISMATCH, f"no Python element type for {dtype.name.lower()}") from None


def load_tensor(artifact: str, name: str, as_dtype: Optional["types.Dtype"] = None) -> Tensor:
    """One tensor `name` of the safetensors or GGUF artifact `artifact`, optionally
    converted to `as_dtype` at load time (a GGUF tensor's fastest-first dims `[ne0, ne1]`
    load as the row-major shape `[ne1, ne0]`; Q4_1/Q8_0 weights stay quantized unless
    converted). Loaded once per function version and device, shared read-only: cheap
    after the first call. Also `artifacts.load_tensor`."""
    return Tensor(host_call(artifacts.load_tensor, artifact, name, as_dtype))


def read_artifact(artifact: str) -> bytes:
    """The raw bytes of an artifact (a vocabulary, a config); a missing one is
    `not-found`. Also `artifacts.read`."""
    return host_call(artifacts.read, artifact)
