"""Conversions done in the guest, in pure Python (no bindings needed, so they are unit
tested natively): f16/bf16 bit patterns to floats, little-endian packing, and what the
block formats (`Q4_1`, `Q8_0`) of the host API take. The same as the Rust SDK's
`convert.rs` and `DType` helpers.
"""

import struct
from typing import List, Sequence

#: Elements per block of a block-quantized dtype (ggml's `QK`).
BLOCK_LEN = 32
#: Bytes per block: Q4_1 (f16 d, f16 m, 16 nibble bytes), Q8_0 (f16 d, 32 signed bytes).
BLOCK_BYTES = {"Q41": 20, "Q80": 34}
#: Bytes per element of the plain dtypes, by the WIT enum's Python name.
ELEMENT_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "I32": 4, "I64": 8, "U8": 1}


def f16_bits_to_f32(h: int) -> float:
    """IEEE 754 binary16 bits as a float, exactly (subnormals, infinities, NaN)."""
    return struct.unpack("<e", struct.pack("<H", h & 0xFFFF))[0]


def bf16_bits_to_f32(b: int) -> float:
    """bfloat16 bits as a float, exactly."""
    return struct.unpack("<f", struct.pack("<I", (b & 0xFFFF) << 16))[0]


def u16_le(values: Sequence[int]) -> bytes:
    """16-bit values as little-endian bytes."""
    return struct.pack(f"<{len(values)}H", *values)


def unpack(fmt: str, size: int, data: bytes) -> List:
    """Little-endian elements of `struct` letter `fmt` and `size` bytes from `data`."""
    return list(struct.unpack(f"<{len(data) // size}{fmt}", data))


def numel(shape: Sequence[int]) -> int:
    """The element count of `shape` (1 for a scalar)."""
    n = 1
    for d in shape:
        n *= int(d)
    return n


def is_quantized(dtype_name: str) -> bool:
    """Whether the dtype (the WIT enum's Python name, e.g. `"Q41"`) is a block format."""
    return dtype_name in BLOCK_BYTES


def zero_bytes(dtype_name: str, shape: Sequence[int]) -> bytes:
    """All-zero element bytes of `shape` (blocks for a block format): zero in every dtype."""
    n = numel(shape)
    if is_quantized(dtype_name):
        return bytes(n // BLOCK_LEN * BLOCK_BYTES[dtype_name])
    return bytes(n * ELEMENT_BYTES[dtype_name])
