"""A float32 matrix stored verbatim in a file, mapped so that its transpose is copied from the
map's address into an output's staging block (`transposes.transpose_at`), without NumPy; and
any span of a file mapped for its address (diff compares two such spans with `memcmp`).

Every dense kernel of a conversion between Hugging Face's `[out, in]` and TensorFlow's `[in, out]`
is transposed. Read as NumPy arrays, they made a conversion import NumPy: 95 ms of one core,
most of it holding the GIL, which on a bert-base conversion sat between the first
verbatim-copied bytes and the first transposed ones.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from collections.abc import Callable
from pathlib import Path

from ..dtypes import FLOAT32
from ..tensor import LazyTensor, TransposedTensor
from ..transposes import transpose_at, transposes_at_addresses
from .advice import populate_for_writing, populate_range

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    import numpy as np
    from google_crc32c import cext as crc32c
else:
    from ..lazy import lazy_module

    crc32c = lazy_module("google_crc32c.cext")


#: A matrix whose values lie at an odd byte (a msgpack stream's) is copied to an aligned buffer for
#: OpenBLAS, whose kernels may assume a float's alignment, up to this size; a larger one (an untied
#: decoder of a large vocabulary) goes through NumPy's scratch strips, in bounded memory.
UNALIGNED_COPY_MAX_BYTES = 32 << 20


class MappedBytes:
    """The `nbytes` bytes at byte `offset` of `path`, mapped: `address` is the first one's, valid
    until `release()`."""

    def __init__(self, path: Path, offset: int, nbytes: int):
        self.path = path
        start = offset - offset % mmap.ALLOCATIONGRANULARITY
        descriptor = os.open(path, os.O_RDONLY)
        try:
            # ACCESS_COPY (private, writable) only so that ctypes gives the address: nothing writes it
            self._map = mmap.mmap(descriptor, offset - start + nbytes, access=mmap.ACCESS_COPY, offset=start)
        finally:
            os.close(descriptor)
        self._values = (ctypes.c_char * nbytes).from_buffer(self._map, offset - start)
        self.address = ctypes.addressof(self._values)

    @property
    def nbytes(self) -> int:
        return len(self._values)

    def populate(self) -> None:
        """Map in its pages now (see `advice.populate`), so that reading them does not fault them in
        one by one."""
        populate_range(self.address, self.nbytes)

    def crc32c(self, crc: int = 0) -> int:
        """The CRC32C (unmasked) of its bytes, extending `crc` (that of the bytes before them)."""
        return crc32c.extend(crc, self._values)

    def release(self) -> None:
        """Let go of the map: it is unmapped once no view of it is left (a checksum of a row
        written from a NumPy view may still be reading one)."""
        self._values = self._map = None


class MappedMatrix(MappedBytes):
    """The `rows` x `columns` float32 values (row-major) at byte `offset` of `path`, mapped (or,
    at an odd byte, copied to an aligned buffer by `populate`)."""

    def __init__(self, path: Path, offset: int, rows: int, columns: int):
        super().__init__(path, offset, 4 * rows * columns)
        self.rows, self.columns = rows, columns

    def populate(self) -> None:
        """Map in its pages now; values at an odd byte are then copied to an aligned buffer (the
        copy's pages mapped in first)."""
        super().populate()
        if self.address % 4:
            aligned = mmap.mmap(-1, self.nbytes)
            populate_for_writing(aligned)
            values = (ctypes.c_char * self.nbytes).from_buffer(aligned)
            ctypes.memmove(values, self.address, self.nbytes)  # without the GIL, as any ctypes call
            self._map, self._values, self.address = aligned, values, ctypes.addressof(values)

    def transpose_into(self, first: int, end: int, target: int, *, two_threads_from: int) -> bool:
        """Rows [first, end) of the transpose ([columns, rows], C-contiguous) copied to address
        `target`, bit for bit; False when they could not be (see `transpose_at`)."""
        return transpose_at(self.address + 4 * first, self.rows, end - first, self.columns, target,
                            two_threads_from=two_threads_from)

    def array(self) -> np.ndarray:
        """Its values as a NumPy array [rows, columns] viewing the map (which it keeps mapped)."""
        import numpy as np  # here: only a matrix OpenBLAS could not copy bit for bit needs it

        return np.frombuffer(self._values, dtype=np.float32).reshape(self.rows, self.columns)


class MatrixSource:
    """How to map the matrix a planned transpose is copied from, and the CRC32C its file promises
    (a TF bundle's tensor: `check`, as reading it would)."""

    def __init__(self, path: Path, offset: int, rows: int, columns: int, check: Callable[[int], None] | None):
        self.path, self.offset, self.rows, self.columns, self.check = path, offset, rows, columns, check

    def load(self) -> MappedMatrix:
        """The matrix mapped (see `MappedMatrix.populate`) and its CRC32C checked (if asked)."""
        matrix = MappedMatrix(self.path, self.offset, self.rows, self.columns)
        try:
            matrix.populate()
            if self.check is not None:
                self.check(matrix.crc32c())
        except BaseException:
            matrix.release()
            raise
        return matrix


def matrix_source(source: object) -> MatrixSource | None:
    """A `MatrixSource` for a planned tensor that is the transpose of a float32 matrix whose bytes
    lie verbatim in a file (blindly copyable, or copyable with its CRC32C checked), 4-byte
    aligned or small enough to copy (`UNALIGNED_COPY_MAX_BYTES`); None for anything else, or where
    OpenBLAS is not there to copy it."""
    if not isinstance(source, TransposedTensor) or isinstance(source.base, TransposedTensor):
        return None
    base = source.base
    if base.dtype != FLOAT32 or not isinstance(base, LazyTensor) or not base.numel:
        return None
    span = base.copy_span()
    checked = base.checked_copy_span() if span is None else None
    if span is None and checked is None:
        return None
    path, offset = span if span is not None else checked[:2]
    if offset % 4 and base.nbytes > UNALIGNED_COPY_MAX_BYTES or not transposes_at_addresses():
        return None
    rows, columns = base.shape
    return MatrixSource(Path(path), offset, rows, columns, checked[2] if checked is not None else None)
