"""Whether two stored tensors hold the same bits, shown from their files' bytes without NumPy.

A diff of a conversion against its source (what users run it for) finds every tensor equal, and
equality needs no value: a `memcmp` of the two files' mapped bytes shows it at memory speed, on
two threads (`diff`), each of its calls letting go of the GIL. NumPy's import (95 ms) and its
chunked comparisons (`arrays.compare_arrays`) are left to the pairs that differ, which they then
describe, and to those whose bytes cannot be compared as they lie: computed tensors, two dtypes,
a transposed kernel that is not float32 or holds a NaN (OpenBLAS would make a signalling one quiet).

A kernel stored transposed on one side only (Hugging Face's [out, in] against TensorFlow's
[in, out]) is transposed a strip at a time into a scratch buffer by OpenBLAS
(`transposes.transpose_at`) and compared there. What reading a tensor checks (a TF bundle's
CRC32C) is checked on the same bytes, and raises `BadInput` as reading would.

Memory, per thread: `WINDOW_BYTES` of each side at a time, and the whole of a matrix being
transposed (mapped, as reading it would).
"""

from __future__ import annotations

import ctypes
import mmap
import threading
from collections.abc import Callable
from pathlib import Path

from ..containers.advice import populate_for_writing
from ..containers.mapped_matrix import MappedBytes, matrix_source
from ..tensor import LazyTensor, TransposedTensor

#: Bytes of each side mapped and compared at a time (and of a transpose's strip).
WINDOW_BYTES = 8 << 20
#: `transpose_at`'s size from which it splits a transpose with its helper thread: never here, where
#: two threads each compare their own pair.
ONE_THREAD = 1 << 62

_memcmp = None  # libc's memcmp through ctypes, once looked up; False where there is none
_per_thread = threading.local()  # each thread's scratch for the strips it transposes


class _Stored:
    """A tensor's bytes as they lie in a file (row-major, little-endian), and the check reading
    them makes (`check(crc32c)`, a TF bundle's), if any."""

    def __init__(self, path: Path, offset: int, nbytes: int, check: Callable[[int], None] | None):
        self.path, self.offset, self.nbytes, self.check = Path(path), offset, nbytes, check

    def window(self, start: int, length: int) -> MappedBytes:
        """Bytes [start, start + length) of the tensor, mapped and mapped in."""
        window = MappedBytes(self.path, self.offset + start, length)
        window.populate()
        return window


def _stored(tensor: LazyTensor) -> _Stored | None:
    span = tensor.copy_span()
    if span is not None:
        return _Stored(*span, tensor.nbytes, None)
    checked = tensor.checked_copy_span()
    return _Stored(*checked[:2], tensor.nbytes, checked[2]) if checked is not None else None


def same_stored_bits(a: LazyTensor, b: LazyTensor) -> bool:
    """True when same-shaped `a` and `b` have one dtype and the same bits, shown from the bytes
    their files store them as (what reading them checks passing; a failing check raises
    `BadInput`); False when they differ, or when this cannot tell (see the module's docstring)."""
    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape) or not a.numel or not _libc_memcmp():
        return False
    while isinstance(a, TransposedTensor) and isinstance(b, TransposedTensor):
        a, b = a.base, b.base  # both stored transposed: their stored layouts agree
    stored_a, stored_b = _stored(a), _stored(b)
    if stored_a is not None and stored_b is not None:
        return _same_spans(stored_a, stored_b)
    if stored_a is not None:
        a, stored_b = b, stored_a
    return stored_b is not None and _same_transposed(a, stored_b)


def _same_spans(a: _Stored, b: _Stored) -> bool:
    crc_a = crc_b = 0
    for start in range(0, a.nbytes, WINDOW_BYTES):
        length = min(WINDOW_BYTES, a.nbytes - start)
        window_a, window_b = a.window(start, length), b.window(start, length)
        try:
            if _libc_memcmp()(window_a.address, window_b.address, length):
                return False
            if a.check is not None:
                crc_a = window_a.crc32c(crc_a)
            if b.check is not None:
                crc_b = window_b.crc32c(crc_b)
        finally:
            window_a.release()
            window_b.release()
    for stored, crc in ((a, crc_a), (b, crc_b)):
        if stored.check is not None:
            stored.check(crc)
    return True


def _same_transposed(transposed: LazyTensor, other: _Stored) -> bool:
    """Whether `transposed` (a float32 matrix's transpose, [R, C]) holds `other`'s bits: its
    matrix ([C, R]) is mapped whole and transposed `WINDOW_BYTES` of rows at a time."""
    source = matrix_source(transposed)
    if source is None:
        return False
    matrix = source.load()
    try:
        row_bytes = 4 * matrix.rows
        strip = max(1, WINDOW_BYTES // row_bytes)
        target = _scratch(row_bytes * strip)
        crc = 0
        for first in range(0, matrix.columns, strip):
            end = min(first + strip, matrix.columns)
            if not matrix.transpose_into(first, end, target, two_threads_from=ONE_THREAD):
                return False
            window = other.window(first * row_bytes, (end - first) * row_bytes)
            try:
                if _libc_memcmp()(target, window.address, window.nbytes):
                    return False
                if other.check is not None:
                    crc = window.crc32c(crc)
            finally:
                window.release()
        if other.check is not None:
            other.check(crc)
        return True
    finally:
        matrix.release()


def _scratch(nbytes: int) -> int:
    """The address of this thread's scratch of at least `nbytes`, kept for its next strips: its
    pages mapped in once (a fresh 8 MiB one took 7-15 ms of a 9 MiB kernel's 20)."""
    scratch = getattr(_per_thread, "scratch", None)
    if scratch is None or len(scratch) < nbytes:
        scratch = _per_thread.scratch = mmap.mmap(-1, max(nbytes, WINDOW_BYTES))
        populate_for_writing(scratch)
        _per_thread.address = ctypes.addressof(ctypes.c_char.from_buffer(scratch))
    return _per_thread.address


def _libc_memcmp():
    """libc's memcmp(a, b, n) -> int, or False where ctypes cannot find it."""
    global _memcmp
    if _memcmp is None:
        try:
            function = ctypes.CDLL(None).memcmp
        except (OSError, AttributeError, TypeError):
            function = False
        else:
            function.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
            function.restype = ctypes.c_int
        _memcmp = function
    return _memcmp
