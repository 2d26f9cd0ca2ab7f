"""Two arrays compared, or one scanned, chunk by chunk: what `diff` and `verify` share.

A chunk holds at most `CHUNK_ELEMENTS` values along the axis slowest in memory, so memory stays
bounded by the chunk, not the tensor, and each chunk reads contiguous bytes of the file. At
`atol == 0` (`BIT_EXACT`) values are equal when their raw bits are; beyond it, by the largest
absolute difference in float64 of the float32-widened values (see `Comparison`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from .. import transposes
from ..dtypes import DType, as_float32
from ..lazy import lazy_module
from ..records import field, record

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    import numpy as np
else:  # imported by the first comparison: plain verify compares nothing
    np = lazy_module("numpy")

#: The most values a chunk holds: 2**20 values are 8 MB once widened to float64.
CHUNK_ELEMENTS = 1 << 20
#: `atol` at which comparisons are bit-exact.
BIT_EXACT = 0.0


# --- streaming ------------------------------------------------------------------------------


def chunk_indices(array: np.ndarray, max_elements: int | None = None) -> Iterator[tuple[slice, ...]]:
    """Index tuples that cover `array` in chunks of at most `max_elements` values (default
    `CHUNK_ELEMENTS`; one row when a single row is larger).

    Chunks run along the axis that is slowest in memory: axis 0 for a row-major array, axis 1 for
    the transposed view of one (a Hugging Face Linear weight read as a canonical kernel), so that
    each chunk reads contiguous bytes of the file.
    """
    max_elements = max_elements or CHUNK_ELEMENTS
    shape = array.shape
    if array.ndim == 0 or array.size == 0:
        yield tuple(slice(None) for _ in shape)
        return
    axis = 1 if array.ndim == 2 and abs(array.strides[1]) > abs(array.strides[0]) else 0
    per_step = math.prod(shape) // shape[axis]
    step = max(1, max_elements // max(per_step, 1))
    for start in range(0, shape[axis], step):
        index = [slice(None)] * array.ndim
        index[axis] = slice(start, min(start + step, shape[axis]))
        yield tuple(index)


def chunk_origin(index: tuple[slice, ...]) -> tuple[int, ...]:
    """The position in the whole array of a chunk's first element."""
    return tuple(s.start or 0 for s in index)


def global_position(index: tuple[slice, ...], chunk_shape: tuple[int, ...], flat: int) -> tuple[int, ...]:
    """The position in the whole array of element `flat` (row-major) of the chunk at `index`."""
    local = np.unravel_index(flat, chunk_shape) if chunk_shape else ()
    return tuple(int(o + l) for o, l in zip(chunk_origin(index), local))


def row_major(chunk: np.ndarray) -> np.ndarray:
    """`chunk` with its rows contiguous: a chunk of a transposed view (columns of the stored
    array) is copied with `transposes.transpose`, many times faster than numpy's
    element-by-element walk of it in every comparison below. Only the chunk is copied."""
    chunk = np.asarray(chunk)
    if chunk.ndim == 2 and abs(chunk.strides[1]) > abs(chunk.strides[0]):
        return transposes.transpose(chunk.T)
    return chunk


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether same-shaped `a` and `b` (one dtype) hold the same bits, copying at most one of them.

    They are compared in `a`'s memory order: a chunk of a transposed view (a Hugging Face kernel
    read as a canonical one) is compared as the contiguous rows it is, against a tiled transpose
    of `b`'s chunk; `row_major` on both would copy each.
    """
    if a.ndim == 2 and abs(a.strides[1]) > abs(a.strides[0]):
        a, b = a.T, b.T
    return bool(np.array_equal(raw_bits(row_major(a)), raw_bits(row_major(b))))


def raw_bits(values: np.ndarray) -> np.ndarray:
    """The bit patterns of `values` as unsigned integers of the same width."""
    values = np.ascontiguousarray(values)
    return values.view(f"<u{values.dtype.itemsize}")


def json_number(value: float) -> float | str:
    """`value` for a strict JSON document: NaN and infinities become the strings "nan", "inf"."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


# --- one tensor pair ------------------------------------------------------------------------


@record(frozen=False)
class Comparison:
    """How two same-shaped tensors compare.

    Attributes:
      bit_equal: every value has the same bits (after widening to float32 when the dtypes differ).
      max_abs_diff: largest |a - b| in float64 of the float32-widened values (inf when one side
        is NaN where the other is not).
      max_at: the position of that largest difference (None when every value is equal).
      first_difference: the first position, in row-major order, whose bits differ (or None).
      a_value, b_value: the values there, widened to float32.
    """

    bit_equal: bool = True
    max_abs_diff: float = 0.0
    max_at: tuple[int, ...] | None = None
    first_difference: tuple[int, ...] | None = None
    a_value: float = 0.0
    b_value: float = 0.0
    first_flat: int | None = field(default=None, repr=False)  # row-major offset of first_difference

    def within(self, atol: float) -> bool:
        """Equal at tolerance `atol` (bit-exact when `atol` is 0)."""
        return self.bit_equal if atol == BIT_EXACT else self.max_abs_diff <= atol

    def as_dict(self) -> dict:
        first = None
        if self.first_difference is not None:
            first = {"index": list(self.first_difference), "a": json_number(self.a_value),
                     "b": json_number(self.b_value)}
        return {"bit_equal": self.bit_equal, "max_abs_diff": json_number(self.max_abs_diff),
                "max_at": list(self.max_at) if self.max_at is not None else None,
                "first_difference": first}


def _abs_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| in float64, with equal values (infinities too) 0, NaN against NaN 0, and NaN
    against a number infinite."""
    with np.errstate(invalid="ignore"):  # inf - inf: resolved below
        difference = np.subtract(a, b, dtype=np.float64)  # exact: float32 operands, float64 result
    np.abs(difference, out=difference)
    undefined = np.isnan(difference)  # a NaN operand, or the same infinity on both sides
    if undefined.any():
        at_a, at_b = a[undefined], b[undefined]
        difference[undefined] = np.where((at_a == at_b) | (np.isnan(at_a) & np.isnan(at_b)), 0.0, np.inf)
    return difference


def compare_arrays(a: np.ndarray, a_dtype: DType, b: np.ndarray, b_dtype: DType) -> Comparison:
    """Compare two arrays of the same shape (in their storage dtypes), chunk by chunk."""
    if tuple(a.shape) != tuple(b.shape):
        raise ValueError(f"compare_arrays needs equal shapes, got {list(a.shape)} and {list(b.shape)}")
    result = Comparison()
    same_dtype = a_dtype == b_dtype
    for index in chunk_indices(a):
        if same_dtype and same_bits(a[index], b[index]):
            continue
        chunk_a, chunk_b = row_major(a[index]), row_major(b[index])
        wide_a, wide_b = as_float32(chunk_a, a_dtype), as_float32(chunk_b, b_dtype)
        if same_dtype:
            differs = raw_bits(chunk_a) != raw_bits(chunk_b)
        else:
            differs = raw_bits(wide_a) != raw_bits(wide_b)
        if not differs.any():
            continue  # equal bits: every difference is 0, nothing to widen to float64
        _note_first_difference(result, index, differs, wide_a, wide_b, a.shape)
        difference = _abs_difference(wide_a, wide_b)
        if difference.size:
            flat = int(np.argmax(difference))
            largest = float(difference.reshape(-1)[flat])
            if largest > result.max_abs_diff:
                result.max_abs_diff = largest
                result.max_at = global_position(index, difference.shape, flat)
    return result


def _note_first_difference(result: Comparison, index: tuple[slice, ...], differs: np.ndarray,
                           wide_a: np.ndarray, wide_b: np.ndarray, shape: tuple[int, ...]) -> None:
    """Record the chunk's first differing position if it comes before the one found so far.

    Within a chunk the first True of the row-major ravel is the earliest position in row-major
    order of the whole array too (a chunk is a sub-box; the order restricted to it is kept).
    """
    result.bit_equal = False
    local = int(np.argmax(differs))
    position = global_position(index, differs.shape, local)
    flat = int(np.ravel_multi_index(position, shape)) if shape else 0
    if result.first_flat is None or flat < result.first_flat:
        result.first_flat = flat
        result.first_difference = position
        result.a_value = float(wide_a.reshape(-1)[local])
        result.b_value = float(wide_b.reshape(-1)[local])


def describe_difference(a: np.ndarray, a_dtype: DType, b: np.ndarray, b_dtype: DType) -> str | None:
    """None when two arrays are bit-equal in the same dtype, else where and by how much they
    differ (or their shapes or dtypes), for a sentence."""
    if tuple(a.shape) != tuple(b.shape):
        return f"shape {list(a.shape)} against {list(b.shape)}"
    comparison = compare_arrays(a, a_dtype, b, b_dtype)
    if comparison.bit_equal and a_dtype == b_dtype:
        return None
    if comparison.first_difference is None:
        return f"dtype {a_dtype} against {b_dtype}"
    return (f"first at {list(comparison.first_difference)} ({format_value(comparison.a_value)} "
            f"against {format_value(comparison.b_value)}), max abs difference "
            f"{format_value(comparison.max_abs_diff)}")


def format_value(value: float | str) -> str:
    """A value for a sentence: float32 precision (9 significant digits), or nan / inf."""
    value = value if isinstance(value, str) else json_number(value)
    return value if isinstance(value, str) else f"{value:.9g}"

