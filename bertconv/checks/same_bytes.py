"""Whether two stored tensors hold the same bits, shown from their files' bytes without NumPy.

A diff of a conversion against its source (what users run it for) finds every tensor equal, and
equality needs no value: libc's `memcmp` of the two files' bytes shows it at memory speed, each
call letting go of the GIL. NumPy's import (95 ms) and its chunked comparisons
(`arrays.compare_arrays`) are left to the pairs that differ, which they then describe, and to
those whose bytes cannot be compared as they lie: computed tensors, two dtypes, a transposed
kernel that is not float32 or holds a NaN (OpenBLAS would make a signalling one quiet).

- Two tensors stored in one layout are read `BLOCK_BYTES` at a time into two buffers the thread
  keeps, which stay in the CPU's caches, when they are smaller than a window, or split between
  two threads (`inspect`'s two stored embedding tables); else mapped `WINDOW_BYTES` at a time and
  compared in place. Each way where it was measured faster: bert-base's 130 small tensors took
  10 ms read against 28 ms mapped, its 94 MB table (CRC32C included) 97 ms read against 66 ms
  mapped, XLM-R's 732 MiB one 640 against 371 ms (medians of 5, in one process); a table split
  between two threads 16-20 ms read against 22-28 ms mapped.
- A kernel stored transposed on one side only (Hugging Face's [out, in] against TensorFlow's
  [in, out]) is mapped whole and transposed `WINDOW_BYTES` of rows at a time into a scratch the
  thread keeps, by OpenBLAS (`transposes.transpose_at`), and compared with a map of the other
  side's rows: read into a buffer instead, a BERT-large diff took 1.19 s against 0.97 s.

What reading a tensor checks (a TF bundle's CRC32C) is checked on the same bytes, and raises
`BadInput` as reading would.

Memory, per thread: two blocks, a scratch and two windows, and the whole of a matrix being
transposed (mapped, as reading it would).
"""

from __future__ import annotations

import _thread
import ctypes
import mmap
import os
from collections.abc import Callable

from ..containers.advice import populate_for_writing
from ..containers.mapped_matrix import MappedBytes, matrix_source
from ..tensor import LazyTensor, TransposedTensor

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from google_crc32c import cext as crc32c
else:
    from ..lazy import lazy_module

    crc32c = lazy_module("google_crc32c.cext")

#: Bytes of each side read and compared at a time (see the module's docstring).
BLOCK_BYTES = 1 << 20
#: Bytes of each side mapped at a time, and of a transposed kernel's rows copied.
WINDOW_BYTES = 8 << 20
#: `transpose_at`'s size from which it splits a transpose with its helper thread: never here, where
#: two threads each compare their own pair.
ONE_THREAD = 1 << 62

_memcmp = None  # libc's memcmp through ctypes, once looked up; False where there is none
_per_thread = _thread._local()  # each thread's buffers (`threading.local`, without importing threading)


class _Stored:
    """A tensor's bytes as they lie in a file (row-major, little-endian), and the check reading
    them makes (`check(crc32c)`, a TF bundle's), if any; `crc` is that of the bytes read so far."""

    def __init__(self, path, offset: int, nbytes: int, check: Callable[[int], None] | None):
        self.path, self.offset, self.nbytes, self.check = path, offset, nbytes, check
        self.crc = 0

    def read(self, descriptor: int, start: int, block: bytearray, length: int) -> bool:
        """Bytes [start, start + length) of the tensor read into `block`; False when the file
        ends before them."""
        if os.preadv(descriptor, [memoryview(block)[:length]], self.offset + start) != length:
            return False
        if self.check is not None:  # crc32c takes no bytearray: a ctypes view of it
            self.crc = crc32c.extend(self.crc, (ctypes.c_char * length).from_buffer(block))
        return True

    def window(self, start: int, length: int) -> MappedBytes:
        """Bytes [start, start + length) of the tensor, mapped and mapped in."""
        window = MappedBytes(self.path, self.offset + start, length)
        window.populate()
        if self.check is not None:
            self.crc = window.crc32c(self.crc)
        return window

    def checked(self) -> bool:
        """True once the check reading the tensor makes passes on the CRC32C of the bytes read
        (which must be all of them); it raises `BadInput` if it fails."""
        if self.check is not None:
            self.check(self.crc)
        return True


def _stored(tensor: LazyTensor) -> _Stored | None:
    span = tensor.copy_span()
    if span is not None:
        return _Stored(*span, tensor.nbytes, None)
    checked = tensor.checked_copy_span()
    return _Stored(*checked[:2], tensor.nbytes, checked[2]) if checked is not None else None


def same_stored_bits(a: LazyTensor, b: LazyTensor, *, two_threads: bool = False) -> bool:
    """True when same-shaped `a` and `b` have one dtype and the same bits, shown from the bytes
    their files store them as (what reading them checks passing; a failing check raises
    `BadInput`); False when they differ, or when this cannot tell (see the module's docstring),
    or their bytes cannot be read (a file cut short since its header was read: reading the
    tensor says what is wrong). With `two_threads`, two unchecked spans of at least two blocks
    are compared half on this thread and half on another."""
    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape) or not a.numel or not _libc_memcmp():
        return False
    while isinstance(a, TransposedTensor) and isinstance(b, TransposedTensor):
        a, b = a.base, b.base  # both stored transposed: their stored layouts agree
    try:
        stored_a, stored_b = _stored(a), _stored(b)
        if stored_a is not None and stored_b is not None:
            return _same_spans(stored_a, stored_b, two_threads=two_threads)
        if stored_a is not None:
            a, stored_b = b, stored_a
        return stored_b is not None and _same_transposed(a, stored_b)
    except (OSError, ValueError):  # ValueError: mmap's "mmap length is greater than file size"
        return False


def _same_spans(a: _Stored, b: _Stored, *, two_threads: bool) -> bool:
    if two_threads and a.check is None and b.check is None and a.nbytes >= 2 * BLOCK_BYTES:
        return _same_halves(a, b)
    if a.nbytes < WINDOW_BYTES:
        return _same_blocks(a, b, 0, a.nbytes) and a.checked() and b.checked()
    return _same_windows(a, b) and a.checked() and b.checked()


def _same_halves(a: _Stored, b: _Stored) -> bool:
    """`_same_blocks` of the first half on this thread, of the second on another."""
    import threading  # here: a header command starts no thread but for a table this size (inspect's copies)

    middle = a.nbytes // 2 // BLOCK_BYTES * BLOCK_BYTES
    second: list[bool | BaseException] = []

    def second_half() -> None:
        try:
            second.append(_same_blocks(a, b, middle, a.nbytes))
        except BaseException as error:  # noqa: BLE001 - raised on the caller's thread below
            second.append(error)

    helper = threading.Thread(target=second_half, daemon=True)
    helper.start()
    try:
        first = _same_blocks(a, b, 0, middle)
    finally:
        helper.join()
    if isinstance(second[0], BaseException):
        raise second[0]
    return first and second[0]


def _same_blocks(a: _Stored, b: _Stored, first: int, end: int) -> bool:
    """Whether bytes [first, end) of `a` and `b` are equal (each side's CRC32C carried on)."""
    block_a, address_a, block_b, address_b = _blocks()
    with open(a.path, "rb", buffering=0) as file_a, open(b.path, "rb", buffering=0) as file_b:
        for start in range(first, end, BLOCK_BYTES):
            length = min(BLOCK_BYTES, end - start)
            if not (a.read(file_a.fileno(), start, block_a, length) and b.read(file_b.fileno(), start, block_b, length)):
                return False
            if _libc_memcmp()(address_a, address_b, length):
                return False
    return True


def _same_windows(a: _Stored, b: _Stored) -> bool:
    """Whether `a` and `b` are equal, mapped a window at a time (each side's CRC32C carried on)."""
    for start in range(0, a.nbytes, WINDOW_BYTES):
        length = min(WINDOW_BYTES, a.nbytes - start)
        window_a, window_b = a.window(start, length), b.window(start, length)
        try:
            if _libc_memcmp()(window_a.address, window_b.address, length):
                return False
        finally:
            window_a.release()
            window_b.release()
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
        for first in range(0, matrix.columns, strip):
            end = min(first + strip, matrix.columns)
            if not matrix.transpose_into(first, end, target, two_threads_from=ONE_THREAD):
                return False
            window = other.window(first * row_bytes, (end - first) * row_bytes)
            try:
                if _libc_memcmp()(target, window.address, window.nbytes):
                    return False
            finally:
                window.release()
        return other.checked()
    finally:
        matrix.release()


def _blocks() -> tuple[bytearray, int, bytearray, int]:
    """This thread's two blocks of `BLOCK_BYTES` and their addresses, kept for its next spans (a
    bytearray's memory moves only when it is resized, never here)."""
    blocks = getattr(_per_thread, "blocks", None)
    if blocks is None or len(blocks[0]) < BLOCK_BYTES:
        block_a, block_b = bytearray(BLOCK_BYTES), bytearray(BLOCK_BYTES)
        blocks = _per_thread.blocks = (block_a, ctypes.addressof(ctypes.c_char.from_buffer(block_a)),
                                       block_b, ctypes.addressof(ctypes.c_char.from_buffer(block_b)))
    return blocks


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
