"""Element types, and how each checkpoint family spells them.

NumPy has no bfloat16, so bfloat16 tensors are carried as their raw 16-bit patterns (`<u2`):
copying, transposing and comparing them stays bit-exact, and `as_float32` widens them exactly
when a value is needed for arithmetic.
"""

from __future__ import annotations

import struct

from .lazy import lazy_module
from .records import record

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    import numpy as np
else:  # imported on first use: reading headers needs no NumPy
    np = lazy_module("numpy")


@record
class DType:
    """One element type.

    `storage` is the NumPy dtype holding the bits (little-endian); `is_float` says whether the
    values are floating point (bfloat16 included, although its storage is an unsigned int).
    """

    name: str
    itemsize: int
    storage: str
    is_float: bool

    @property
    def numpy(self) -> np.dtype:
        return np.dtype(self.storage)

    def __str__(self) -> str:
        return self.name


FLOAT32 = DType("float32", 4, "<f4", True)
FLOAT16 = DType("float16", 2, "<f2", True)
BFLOAT16 = DType("bfloat16", 2, "<u2", True)
FLOAT64 = DType("float64", 8, "<f8", True)
INT64 = DType("int64", 8, "<i8", False)
INT32 = DType("int32", 4, "<i4", False)
INT16 = DType("int16", 2, "<i2", False)
INT8 = DType("int8", 1, "<i1", False)
UINT8 = DType("uint8", 1, "<u1", False)
BOOL = DType("bool", 1, "|b1", False)

BY_NAME: dict[str, DType] = {
    d.name: d for d in (FLOAT32, FLOAT16, BFLOAT16, FLOAT64, INT64, INT32, INT16, INT8, UINT8, BOOL)
}


def from_name(name: str) -> DType:
    """The DType called `name` ("float32", "bfloat16", ...); KeyError when there is none."""
    return BY_NAME[name]


def from_numpy(dtype: np.dtype) -> DType:
    """The DType of a NumPy array (bfloat16 cannot come from here: NumPy has no such type)."""
    kind = np.dtype(dtype).newbyteorder("<") if np.dtype(dtype).byteorder == ">" else np.dtype(dtype)
    for d in BY_NAME.values():
        if d is not BFLOAT16 and d.numpy == kind:
            return d
    raise KeyError(f"no bertconv dtype for NumPy dtype {dtype}")


def as_float32(values: np.ndarray, dtype: DType) -> np.ndarray:
    """`values` (stored as `dtype`) widened to float32; bfloat16 bit patterns become their floats.

    Widening bfloat16 is exact: its bits are the top half of a float32.
    """
    if dtype is BFLOAT16:
        return (np.asarray(values).astype(np.uint32) << 16).view(np.float32)
    return np.asarray(values, dtype=np.float32)


#: struct's format of one little-endian element of each float type that struct knows; bfloat16 is
#: the top half of a float32.
_STRUCT_FLOATS = {"float32": "<f", "float16": "<e", "float64": "<d"}


def element_bytes(value: float, dtype: DType) -> bytes:
    """The stored bytes of `value` as one element of `dtype` (little-endian); ValueError unless
    `dtype` holds `value` exactly."""
    if dtype is BFLOAT16:
        encoded = struct.pack("<f", value)[2:]
        decoded = struct.unpack("<f", bytes(2) + encoded)[0]
    elif dtype.name in _STRUCT_FLOATS:
        encoded = struct.pack(_STRUCT_FLOATS[dtype.name], value)
        decoded = struct.unpack(_STRUCT_FLOATS[dtype.name], encoded)[0]
    elif dtype is BOOL or float(value).is_integer():
        encoded = int(value).to_bytes(dtype.itemsize, "little", signed=dtype.storage[1] == "i")
        decoded = value
    else:
        raise ValueError(f"{dtype} has no element equal to {value!r}")
    if decoded != value:
        raise ValueError(f"{dtype} holds {value!r} only approximately")
    return encoded


def all_elements_equal(data: bytes, dtype: DType, value: float) -> bool:
    """Whether every element of `data` (little-endian `dtype` elements) equals `value` exactly, as
    float comparison has it (0.0 and -0.0 are equal), decided from the bytes: no NumPy.

    A float other than zero has one bit pattern; zero has two, differing in the sign bit, which is
    the top bit of an element's last byte.
    """
    count, remainder = divmod(len(data), dtype.itemsize)
    if remainder:
        raise ValueError(f"{len(data)} bytes are not whole {dtype} elements")
    if value != 0 or not dtype.is_float:
        return data == element_bytes(value, dtype) * count
    last = dtype.itemsize - 1
    signs = data[last::dtype.itemsize]
    if signs.translate(None, b"\x00\x80"):
        return False
    magnitudes = bytearray(data)
    magnitudes[last::dtype.itemsize] = bytes(count)  # sign bytes checked: clear them
    return magnitudes.count(0) == len(magnitudes)
