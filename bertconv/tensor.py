"""Lazy tensors: dtype and shape known from a file's header, data read only when asked.

Every reader hands out `LazyTensor`s. `read()` returns an array in the tensor's storage dtype
(see `dtypes`), usually a read-only memory map of exactly this tensor's bytes, so that reading
one tensor at a time keeps resident memory near the size of the largest tensor.
"""

from __future__ import annotations

import math
import mmap
import os
from collections.abc import Callable
from pathlib import Path

from . import transposes
from .dtypes import BFLOAT16, FLOAT32, DType, as_float32
from .errors import bad_input, ended_early
from .lazy import lazy_module

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    import numpy as np
else:  # imported on first use: reading headers needs no NumPy
    np = lazy_module("numpy")


class LazyTensor:
    """A tensor whose data stays on disk until `read()`.

    Attributes:
      dtype: element type.
      shape: dimensions, outermost first (row-major).
    """

    dtype: DType
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def read(self) -> np.ndarray:
        """The values, `shape`-shaped, in `dtype.storage`; may be a read-only memory map."""
        raise NotImplementedError

    def read_view(self) -> np.ndarray:
        """The values as `read()` gives them, but in any memory layout, without copying to change
        it: a transposed tensor is the transposed view of its base's values (F-ordered where the
        base is C-ordered), not a row-major copy."""
        return self.read()

    def read_bytes(self) -> bytes:
        """The bytes of `read()`'s values (row-major, little-endian, `dtype.storage`): read from the
        file with one `pread`, no NumPy, where a blind copy of them is allowed (`copy_span`); else
        through `read()`, so that what reading checks (a checksum) is checked."""
        span = self.copy_span()
        if span is None:
            return self.read().tobytes()
        path, offset = span
        with open(path, "rb") as file:
            data = os.pread(file.fileno(), self.nbytes, offset)
        if len(data) != self.nbytes:
            raise ended_early(path, offset + self.nbytes)
        return data

    def byte_span(self) -> tuple[Path, int] | None:
        """(file, offset) where this tensor's bytes lie contiguous, row-major, little-endian, or
        None when they do not (a computed or non-contiguous tensor)."""
        return None

    def copy_span(self) -> tuple[Path, int] | None:
        """`byte_span()` when a writer may copy those bytes file to file without looking at them
        (`os.copy_file_range`), else None: also None when reading the tensor checks something
        (a checksum) that a blind copy would skip."""
        return self.byte_span()

    def checked_copy_span(self) -> tuple[Path, int, Callable[[int], None]] | None:
        """(file, offset, check) when this tensor's bytes lie verbatim there and reading them
        checks only their CRC32C (a TF bundle's): a writer may copy them if it calls
        `check(crc32c)` with the CRC32C of the bytes it copied, which raises `BadInput` as reading
        them would if they are not the bytes the file promised. None otherwise."""
        return None

    def storage(self) -> tuple[Path, int, int] | None:
        """(file, offset, nbytes): the bytes of a file this tensor's values are read from,
        contiguous or not; None for a tensor not read from a file region."""
        span = self.byte_span()
        return (span[0], span[1], self.nbytes) if span is not None else None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.dtype}, {list(self.shape)})"


def check_span(path: Path, offset: int, nbytes: int, file_size: int, what: str) -> None:
    """Raise `BadInput` unless bytes [offset, offset + nbytes) lie inside a file of `file_size`."""
    if offset < 0 or nbytes < 0 or offset + nbytes > file_size:
        raise bad_input(
            path,
            f"{what} claims bytes {offset}..{offset + nbytes}, "
            f"but the file has {file_size} bytes (truncated or corrupt?)",
        )


def mapped_array(path: Path, offset: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """A read-only array of the `shape` values of `dtype` at byte `offset` of `path`, through a
    memory map of just those bytes (from the page boundary before them), unmapped when the last
    view of it goes. As np.memmap, without the ~30 µs of bookkeeping (a file object, a
    `Path.resolve()`) it spends on each map: a diff of bert-base makes 412 of them."""
    dtype, count = np.dtype(dtype), math.prod(shape)
    start = offset - offset % mmap.ALLOCATIONGRANULARITY
    fd = os.open(path, os.O_RDONLY)
    try:
        region = mmap.mmap(fd, offset - start + count * dtype.itemsize, access=mmap.ACCESS_READ, offset=start)
    finally:
        os.close(fd)
    return np.frombuffer(region, dtype=dtype, count=count, offset=offset - start).reshape(shape)


class MappedTensor(LazyTensor):
    """A contiguous tensor at `offset` in `path`, read through a memory map of its own bytes.

    `verify(array, tensor_name)`, if given, runs on every read (for example a CRC check).
    """

    def __init__(
        self,
        path: Path,
        offset: int,
        dtype: DType,
        shape: tuple[int, ...],
        *,
        name: str = "",
        verify: Callable[[np.ndarray], None] | None = None,
    ):
        self.path = path if isinstance(path, Path) else Path(path)  # a reader makes hundreds: no new Path each
        self.offset = offset
        self.dtype = dtype
        self.shape = tuple(shape)
        self.name = name
        self._verify = verify

    def read(self) -> np.ndarray:
        if self.nbytes == 0:
            array = np.empty(self.shape, dtype=self.dtype.numpy)
        else:
            array = mapped_array(self.path, self.offset, self.dtype.numpy, self.shape)
        if self._verify is not None:
            self._verify(array)
        return array

    def byte_span(self) -> tuple[Path, int]:
        return self.path, self.offset

    def copy_span(self) -> tuple[Path, int] | None:
        return None if self._verify is not None else self.byte_span()


class StridedTensor(LazyTensor):
    """A tensor viewed with element strides inside a span of a file (torch storages can hold
    non-contiguous or offset views); the span has been bounds-checked by the reader."""

    def __init__(self, path: Path, storage_offset: int, storage_nbytes: int, dtype: DType,
                 shape: tuple[int, ...], strides: tuple[int, ...], element_offset: int):
        self.path = path if isinstance(path, Path) else Path(path)  # as MappedTensor's
        self.dtype = dtype
        self.shape = tuple(shape)
        self._storage = (storage_offset, storage_nbytes)
        self._strides = tuple(strides)
        self._element_offset = element_offset

    def storage(self) -> tuple[Path, int, int]:
        return (self.path, *self._storage)

    def is_contiguous(self) -> bool:
        expected, step = [], 1
        for dim in reversed(self.shape):
            expected.append(step)
            step *= dim
        return all(d == 1 or s == e for d, s, e in zip(self.shape, self._strides, reversed(expected)))

    def read(self) -> np.ndarray:
        offset, nbytes = self._storage
        if nbytes == 0 or self.numel == 0:
            return np.empty(self.shape, dtype=self.dtype.numpy)
        storage = mapped_array(self.path, offset, self.dtype.numpy, (nbytes // self.dtype.itemsize,))
        itemsize = self.dtype.itemsize
        view = np.lib.stride_tricks.as_strided(
            storage[self._element_offset:],
            shape=self.shape,
            strides=tuple(s * itemsize for s in self._strides),
            writeable=False,
        )
        return view

    def byte_span(self) -> tuple[Path, int] | None:
        if not self.is_contiguous():
            return None
        return self.path, self._storage[0] + self._element_offset * self.dtype.itemsize


class ArrayTensor(LazyTensor):
    """A tensor already in memory (small values decoded from a header, or made by a test)."""

    def __init__(self, array: np.ndarray, dtype: DType):
        self.array = array
        self.dtype = dtype
        self.shape = tuple(array.shape)

    def read(self) -> np.ndarray:
        return self.array


class TransposedTensor(LazyTensor):
    """The 2-D transpose of another lazy tensor, computed when read.

    `read()` returns a new C-contiguous array (see `transpose`), except that the transpose of a
    transpose is the original tensor: read, spanned and copied as it is, with no copy made.
    """

    def __init__(self, base: LazyTensor):
        if len(base.shape) != 2:
            raise ValueError(f"only 2-D tensors transpose, got shape {list(base.shape)}")
        self.base = base
        self.dtype = base.dtype
        self.shape = (base.shape[1], base.shape[0])

    def _original(self) -> LazyTensor | None:
        """The tensor this is the identity of (a transpose of a transpose), or None."""
        return self.base.base if isinstance(self.base, TransposedTensor) else None

    def read(self) -> np.ndarray:
        original = self._original()
        if original is not None:
            return original.read()
        return transposes.transpose(self.base.read())

    def read_view(self) -> np.ndarray:
        return self.base.read_view().T

    def byte_span(self) -> tuple[Path, int] | None:
        original = self._original()
        return original.byte_span() if original is not None else None

    def copy_span(self) -> tuple[Path, int] | None:
        original = self._original()
        return original.copy_span() if original is not None else None

    def checked_copy_span(self) -> tuple[Path, int, Callable[[int], None]] | None:
        original = self._original()
        return original.checked_copy_span() if original is not None else None

    def storage(self) -> tuple[Path, int, int] | None:
        return self.base.storage()


class ReshapedTensor(LazyTensor):
    """Another lazy tensor's values in another shape of as many values, row-major: the same bytes
    in the same order, so its spans are its base's (a Keras attention kernel [H, A, D] is the
    canonical [H, H])."""

    def __init__(self, base: LazyTensor, shape: tuple[int, ...]):
        if math.prod(shape) != base.numel:
            raise ValueError(f"cannot reshape {list(base.shape)} to {list(shape)}")
        self.base = base
        self.dtype = base.dtype
        self.shape = tuple(shape)

    def read(self) -> np.ndarray:
        return np.asarray(self.base.read()).reshape(self.shape)

    def byte_span(self) -> tuple[Path, int] | None:
        return self.base.byte_span()

    def copy_span(self) -> tuple[Path, int] | None:
        return self.base.copy_span()

    def checked_copy_span(self) -> tuple[Path, int, Callable[[int], None]] | None:
        return self.base.checked_copy_span()

    def storage(self) -> tuple[Path, int, int] | None:
        return self.base.storage()


def file_size(path: Path) -> int:
    return os.stat(path).st_size


class Bfloat16Widened(LazyTensor):
    """A bfloat16 tensor widened to float32, exactly (every bfloat16 value is a float32 value):
    for containers that have no bfloat16, such as Keras HDF5."""

    def __init__(self, base: LazyTensor):
        if base.dtype is not BFLOAT16:
            raise ValueError(f"only bfloat16 tensors are widened, got {base.dtype}")
        self.base = base
        self.dtype = FLOAT32
        self.shape = tuple(base.shape)

    def read(self) -> np.ndarray:
        return as_float32(self.base.read(), BFLOAT16)
