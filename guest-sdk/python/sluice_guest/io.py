"""Tensors crossing the function boundary, as the Open Inference Protocol has them.

`IoTensor` is one named input or output: a datatype (`"FP32"`, `"FP16"`, `"BF16"`,
`"INT32"`, `"INT64"`, `"UINT8"`, `"BYTES"`), a shape and its elements (Python numbers;
FP16/BF16 as raw 16-bit patterns; UINT8 as `bytes`; BYTES as a list of `bytes`).
`Inputs` holds a request's inputs by name; a missing or mistyped input is the caller's
fault (`InvalidInput`). The constructors and accessors are the Rust SDK's (`IoTensor::f32`,
`as_f32`, `expect_shape`, `Inputs::find`, `take`, …) under the same names.
"""

import struct
from typing import Dict, Iterator, List, Optional, Sequence

from wit_world.imports import io, types

from .errors import InvalidInput
from .tensor import Tensor, is_quantized

#: datatype → (WIT variant class, device dtype, `struct` letter, element size)
_KINDS = {
    "FP32": (io.IoData_F32, types.Dtype.F32, "f", 4),
    "FP16": (io.IoData_F16, types.Dtype.F16, "H", 2),
    "BF16": (io.IoData_Bf16, types.Dtype.BF16, "H", 2),
    "INT32": (io.IoData_I32, types.Dtype.I32, "i", 4),
    "INT64": (io.IoData_I64, types.Dtype.I64, "q", 8),
    "UINT8": (io.IoData_U8, types.Dtype.U8, "B", 1),
    "BYTES": (io.IoData_Bytes, None, None, None),
}
_BY_VARIANT = {kind[0]: name for name, kind in _KINDS.items()}
_BY_DTYPE = {kind[1]: name for name, kind in _KINDS.items() if kind[1] is not None}


def _count(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


class IoTensor:
    """A named tensor of a request or a response."""

    __slots__ = ("name", "datatype", "shape", "data")

    def __init__(self, name: str, datatype: str, shape: Sequence[int], data):
        if datatype not in _KINDS:
            raise ValueError(f"unknown datatype {datatype!r}; one of {sorted(_KINDS)}")
        self.name = name
        self.datatype = datatype
        self.shape = [int(d) for d in shape]
        self.data = data

    @staticmethod
    def new(name: str, datatype: str, shape: Sequence[int], data) -> "IoTensor":
        """A tensor with the given name, datatype, shape and elements."""
        return IoTensor(name, datatype, shape, data)

    @staticmethod
    def f32(name: str, shape: Sequence[int], values: Sequence[float]) -> "IoTensor":
        return IoTensor(name, "FP32", shape, [float(v) for v in values])

    @staticmethod
    def f16_bits(name: str, shape: Sequence[int], bits: Sequence[int]) -> "IoTensor":
        """An FP16 tensor from raw binary16 bit patterns."""
        return IoTensor(name, "FP16", shape, [int(b) for b in bits])

    @staticmethod
    def bf16_bits(name: str, shape: Sequence[int], bits: Sequence[int]) -> "IoTensor":
        """A BF16 tensor from raw bfloat16 bit patterns."""
        return IoTensor(name, "BF16", shape, [int(b) for b in bits])

    @staticmethod
    def i32(name: str, shape: Sequence[int], values: Sequence[int]) -> "IoTensor":
        return IoTensor(name, "INT32", shape, [int(v) for v in values])

    @staticmethod
    def i64(name: str, shape: Sequence[int], values: Sequence[int]) -> "IoTensor":
        return IoTensor(name, "INT64", shape, [int(v) for v in values])

    @staticmethod
    def u8(name: str, shape: Sequence[int], values: bytes) -> "IoTensor":
        return IoTensor(name, "UINT8", shape, bytes(values))

    @staticmethod
    def bytes(name: str, shape: Sequence[int], values: Sequence[bytes]) -> "IoTensor":
        """A BYTES tensor: one byte string per element."""
        return IoTensor(name, "BYTES", shape, [bytes(v) for v in values])

    @staticmethod
    def text(name: str, values: Sequence[str]) -> "IoTensor":
        """A 1-D BYTES tensor of UTF-8 strings."""
        return IoTensor(name, "BYTES", [len(values)], [v.encode() for v in values])

    @property
    def dtype(self) -> Optional["types.Dtype"]:
        """The device dtype of the elements; `None` for BYTES."""
        return _KINDS[self.datatype][1]

    @property
    def numel(self) -> int:
        """The number of elements the shape says."""
        return _count(self.shape)

    def check(self) -> "IoTensor":
        """Raises `InvalidInput` unless the element count matches the shape."""
        if len(self.data) != _count(self.shape):
            raise InvalidInput(
                f"tensor `{self.name}`: shape {self.shape} holds {_count(self.shape)} elements, got {len(self.data)}"
            )
        return self

    def expect(self, datatype: str) -> "IoTensor":
        """Raises `InvalidInput` unless this tensor has `datatype` (and a consistent shape)."""
        if self.datatype != datatype:
            raise InvalidInput(f"tensor `{self.name}`: expected {datatype}, got {self.datatype}")
        return self.check()

    def expect_shape(self, pattern: Sequence[Optional[int]]) -> "IoTensor":
        """Raises `InvalidInput` unless the shape matches `pattern`, where `None` accepts
        any size: `expect_shape([None, 16])` accepts `[n, 16]`."""
        ok = len(self.shape) == len(pattern) and all(p is None or p == d for d, p in zip(self.shape, pattern))
        if not ok:
            want = ", ".join("?" if p is None else str(p) for p in pattern)
            raise InvalidInput(f"tensor `{self.name}`: expected shape [{want}], got {self.shape}")
        return self

    def _as(self, datatype: str):
        if self.datatype != datatype:
            raise InvalidInput(f"tensor `{self.name}`: expected {datatype}, got {self.datatype}")
        return self.data

    def as_f32(self) -> List[float]:
        """The FP32 elements, or `InvalidInput` for another datatype."""
        return self._as("FP32")

    def as_i32(self) -> List[int]:
        """The INT32 elements, or `InvalidInput` for another datatype."""
        return self._as("INT32")

    def as_i64(self) -> List[int]:
        """The INT64 elements, or `InvalidInput` for another datatype."""
        return self._as("INT64")

    def as_u8(self) -> "bytes":
        """The UINT8 elements, or `InvalidInput` for another datatype."""
        return self._as("UINT8")

    def as_bytes(self) -> List[bytes]:
        """The BYTES elements, or `InvalidInput` for another datatype."""
        return self._as("BYTES")

    def as_strings(self) -> List[str]:
        """A BYTES tensor's elements as UTF-8 text."""
        self.expect("BYTES")
        try:
            return [b.decode() for b in self.data]
        except UnicodeDecodeError as e:
            raise InvalidInput(f"tensor `{self.name}`: an element is not UTF-8 ({e})") from None

    def to_bytes(self) -> bytes:
        """A numeric tensor's elements as little-endian bytes."""
        _, _, fmt, _ = _KINDS[self.datatype]
        if fmt is None:
            raise InvalidInput(f"tensor `{self.name}`: BYTES has no device form")
        if self.datatype == "UINT8":
            return bytes(self.data)
        return struct.pack(f"<{len(self.data)}{fmt}", *self.data)

    def to_tensor(self) -> Tensor:
        """Uploads a numeric tensor to the device."""
        self.check()
        return Tensor.from_bytes(_KINDS[self.datatype][1], self.shape, self.to_bytes())

    @staticmethod
    def from_tensor(name: str, tensor: Tensor) -> "IoTensor":
        """Reads `tensor` back (waiting for the device) as an output named `name`, keeping
        dtype and shape (a block-quantized tensor is dequantized to f32 on the device first)."""
        if is_quantized(tensor.dtype):
            tensor = tensor.cast(types.Dtype.F32)
        datatype = _BY_DTYPE[tensor.dtype]
        _, _, fmt, size = _KINDS[datatype]
        raw = tensor.read()
        data = raw if datatype == "UINT8" else list(struct.unpack(f"<{len(raw) // size}{fmt}", raw))
        return IoTensor(name, datatype, tensor.shape, data)

    def __repr__(self) -> str:
        return f"IoTensor({self.name!r}, {self.datatype}, {self.shape})"

    # --- the WIT form ---------------------------------------------------------------

    @staticmethod
    def _from_wit(t: "io.IoTensor") -> "IoTensor":
        return IoTensor(t.name, _BY_VARIANT[type(t.data)], t.shape, t.data.value)

    def _to_wit(self) -> "io.IoTensor":
        self.check()
        return io.IoTensor(self.name, self.shape, _KINDS[self.datatype][0](self.data))


class Inputs:
    """A request's inputs, by name and in order."""

    def __init__(self, tensors: List[IoTensor]):
        self._list = tensors
        self._by_name: Dict[str, IoTensor] = {t.name: t for t in tensors}

    def get(self, name: str) -> IoTensor:
        """The input named `name`; `InvalidInput` if there is none."""
        try:
            return self._by_name[name]
        except KeyError:
            names = [t.name for t in self._list]
            raise InvalidInput(f"missing input `{name}` (got {names})") from None

    def __getitem__(self, name: str) -> IoTensor:
        return self.get(name)

    def find(self, name: str) -> Optional[IoTensor]:
        """The input named `name`, or `None`."""
        return self._by_name.get(name)

    def take(self, name: str) -> IoTensor:
        """Removes and returns the input named `name`; `InvalidInput` if there is none."""
        t = self.get(name)
        self._list = [u for u in self._list if u is not t]
        del self._by_name[name]
        return t

    def names(self) -> List[str]:
        """The names of the inputs, in request order."""
        return [t.name for t in self._list]

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[IoTensor]:
        return iter(self._list)

    def __len__(self) -> int:
        return len(self._list)
