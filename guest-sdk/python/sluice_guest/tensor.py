"""`Tensor`: a handle to a tensor on the host's device, with the op catalog as methods
and operators.

Every method launches one op on the host and returns the output's handle at once;
only `read`/`to_list` wait for the device. Shapes and dtypes are checked by the host
before anything is queued: a bad call raises `HostError` (`shape-mismatch`, …).
"""

import struct
from typing import List, Optional, Sequence

from wit_world.imports import artifacts, fused, ops, tensors, types

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

    @property
    def dtype(self) -> "types.Dtype":
        return self._handle.dtype()

    @property
    def shape(self) -> List[int]:
        return list(self._handle.shape())

    def read(self) -> bytes:
        """Waits for the ops producing this tensor and returns its little-endian bytes."""
        return host_call(self._handle.read)

    def to_list(self) -> list:
        """The elements as Python numbers, row-major (not for bf16: read the bytes)."""
        fmt, size = _format(self.dtype)
        data = self.read()
        return list(struct.unpack(f"<{len(data) // size}{fmt}", data))

    def drop(self) -> None:
        """Frees the tensor now (the host frees it once no pending op uses it)."""
        self._handle.__exit__(None, None, None)

    def __repr__(self) -> str:
        return f"Tensor({self.dtype.name.lower()}, {self.shape})"

    # --- the op catalog -------------------------------------------------------------

    def _op(self, op, *others: "Tensor") -> "Tensor":
        return Tensor(host_call(ops.launch, op, [self._handle, *[t._handle for t in others]]))

    def _fused(self, op, *others: "Tensor") -> "Tensor":
        return Tensor(host_call(fused.launch, op, [self._handle, *[t._handle for t in others]]))

    def matmul(self, other: "Tensor", transpose_a: bool = False, transpose_b: bool = False) -> "Tensor":
        """Matrix product of the last two axes, batched over the leading ones."""
        return self._op(ops.Op_Matmul(ops.MatmulArgs(transpose_a, transpose_b)), other)

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

    def affine(self, scale: float, bias: float = 0.0) -> "Tensor":
        """`x * scale + bias`, elementwise."""
        return self._op(ops.Op_Affine(ops.AffineArgs(float(scale), float(bias))))

    def softmax(self, scale: float = 1.0, mask: Optional["Tensor"] = None) -> "Tensor":
        """Softmax over the last axis of `x * scale + mask`."""
        op = ops.Op_Softmax(ops.SoftmaxArgs(float(scale)))
        return self._op(op, mask) if mask is not None else self._op(op)

    def layer_norm(self, gamma: "Tensor", beta: "Tensor", eps: float = 1e-5) -> "Tensor":
        """Layer normalisation over the last axis."""
        return self._op(ops.Op_LayerNorm(ops.LayerNormArgs(float(eps))), gamma, beta)

    def embedding(self, ids: "Tensor") -> "Tensor":
        """Rows of this table `[vocab, d]` gathered by `ids` (i32 or i64)."""
        return self._op(ops.Op_Embedding(), ids)

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

    def slice(self, axis: int, start: int, end: int) -> "Tensor":
        """Elements `start..end` of `axis`."""
        return self._op(ops.Op_Slice(ops.SliceArgs(axis, start, end)))

    def concat(self, others: Sequence["Tensor"], axis: int) -> "Tensor":
        """This tensor and `others`, joined along `axis`."""
        return self._op(ops.Op_Concat(axis), *others)

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

    def gqa_attention(self, k_cache: "Tensor", v_cache: "Tensor", kv_len: int, scale: float) -> "Tensor":
        """Causal grouped-query attention of these queries over the first `kv_len`
        positions of a `[ctx, kv_heads, d]` KV cache."""
        op = fused.FusedOp_GqaAttention(fused.GqaAttentionArgs(int(kv_len), float(scale)))
        return self._fused(op, k_cache, v_cache)

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
    """One tensor of a safetensors artifact uploaded with the function (loaded once per
    function version and device, shared read-only)."""
    return Tensor(host_call(artifacts.load_tensor, artifact, name, as_dtype))


def read_artifact(artifact: str) -> bytes:
    """The raw bytes of an artifact (a vocabulary, a config)."""
    return host_call(artifacts.read, artifact)
