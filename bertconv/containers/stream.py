"""Appending a file's pieces front to back: the loop every writer of tensor data shares.

A writer says what its file holds, in file order: byte strings of its own (a safetensors
header, the HDF5 metadata between two datasets) and tensors (`TensorSource`). `append` writes
them so that the disk never waits for the processor nor the other way round:

- a tensor whose bytes lie verbatim in a file (`copy_span`) is copied: into a `DirectOutput`'s
  staging block by a read, else by the kernel (`copy_file_range`: no page of it enters this
  process), or read and written in pieces when its checksum is wanted;
- any other is loaded (read, checked, transposed) by a helper thread while the tensors before it
  are written, as many ahead as fit in `PREFETCH_MAX_BYTES`. The transpose of a float32 matrix
  stored verbatim in a file is mapped (`mapped_matrix`) and copied by OpenBLAS from the map,
  without NumPy; another transpose going to a `DirectOutput` is loaded as the matrix it
  transposes; either is computed straight into the staging block, so no array of it is made
  and copied.

What is written goes to the disk as it accumulates, not all at the final fsync: past the page
cache for a large file (`DirectOutput`), through it with early writeback for a small one
(`EarlyWriteback`). A tensor's CRC32C (TensorFlow bundles record one) is computed, when asked,
on its bytes as they are staged: no byte is read twice.
"""

from __future__ import annotations

import errno
import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from ..dtypes import DType
from ..errors import BertconvError, ended_early
from ..lazy import lazy_module
from ..tensor import LazyTensor, ReshapedTensor, TransposedTensor
from ..transposes import transpose, transpose_into
from .advice import populate
from .direct_output import DirectOutput
from .mapped_matrix import MappedMatrix, MatrixSource, matrix_source
from .writeback import EarlyWriteback

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    import ctypes
    from typing import BinaryIO

    from ..threads import Task

    import numpy as np
    from google_crc32c import cext as crc32c
else:  # imported on first use: reading headers needs neither
    np = lazy_module("numpy")
    crc32c = lazy_module("google_crc32c.cext")
    ctypes = lazy_module("ctypes")  # only a checksum of a staging block needs it

#: (name, dtype, shape, source): `source` a `LazyTensor` (whose bytes may be copied file to file,
#: see `copy_span`) or a callable returning the array, in `dtype.storage`, any strides.
TensorSource = tuple[str, DType, tuple[int, ...], "LazyTensor | Callable[[], np.ndarray]"]
#: What a file holds, in file order: its own bytes, or a tensor.
Piece = bytes | TensorSource


class Padding(bytes):
    """Zero bytes that align the piece after them, `Padding(n)`: written like a file's own bytes,
    but nobody reads them, so they are not cached for the read-back (`DirectOutput.write`)."""


#: While one tensor is written, the tensors after it are loaded by a helper thread, as many as fit
#: in this many bytes together: the two overlap on a second core, and resident memory grows by at
#: most this much over one tensor at a time. More than one: BERT's names sort a large kernel
#: between small biases and norms, and a loader that held only the next small tensor would sit
#: idle while the large one is written, then the writer idle while the next kernel is
#: transposed. 32 MiB holds BERT-large's next FFN kernel (16 MiB) with the small tensors around it.
PREFETCH_MAX_BYTES = 32 << 20
#: Copy granularity of a write through the page cache: large enough to be fast, small enough to
#: keep a transpose's scratch bounded.
CHUNK_BYTES = 16 << 20
#: A transpose computed into the staging block is split between two threads from this size on,
#: lower than `TRANSPOSE_TWO_THREADS_BYTES`: here the writer thread is otherwise the one busy
#: core. Measured side by side (medians of 5): BERT-large hf -> tf 1.26 s at 8 MiB, 1.15 s at
#: 1 MiB, 1.15 s at 256 KiB; tf -> hf 1.24 s, 1.09 s; bert-base hf -> tf 0.52 s, 0.51 s.
TWO_THREAD_TRANSPOSE_BYTES = 1 << 20
#: A transpose copied from a map to a buffered file, or to a staging block's odd byte, goes through
#: a scratch of this many bytes at a time (whole rows of the transpose): cache-sized.
SCRATCH_STRIP_BYTES = 1 << 20
#: Errors after which a kernel copy is not possible here and the bytes are written through
#: Python instead (old kernels, file systems or file kinds without copy_file_range support).
_NO_KERNEL_COPY = {errno.ENOSYS, errno.EXDEV, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF, errno.EPERM}


def nbytes_of(piece: Piece) -> int:
    """How many bytes `piece` takes in the file."""
    if isinstance(piece, (bytes, bytearray)):
        return len(piece)
    _, dtype, shape, _ = piece
    return math.prod(shape) * dtype.itemsize


def append(out: BinaryIO | DirectOutput, pieces: Iterable[Piece], *, checksums: bool = False,
           on_tensor: Callable[[int], None] | None = None) -> list[int]:
    """Write `pieces` to `out` in order (see the module's docstring); `on_tensor(nbytes)` is
    called after each tensor. Returns each tensor's CRC32C (unmasked) with `checksums`, else [].

    A loaded array of another shape or dtype than planned is a ValueError naming the tensor.
    """
    pieces = list(pieces)
    direct = isinstance(out, DirectOutput)
    spans = [None if isinstance(p, (bytes, bytearray)) else _copy_span(p) for p in pieces]
    checks = _checked_copies(pieces, spans)
    sink = _Sink(out, checksums, verifies=bool(checks))
    pending = [i for i, p in enumerate(pieces) if not isinstance(p, (bytes, bytearray)) and spans[i] is None]
    loads = {i: _to_load(pieces[i], direct=direct) for i in pending}
    cursor = 0  # pending[cursor] is the next tensor to start loading
    from ..threads import Workers  # here: reading headers needs no threads

    with sink, Workers(1, "bertconv-load") as pool:
        loading: dict[int, Task] = {}  # submitted, not yet taken; loaded in this order
        ahead = 0  # their bytes

        def load_ahead(holding: int) -> None:
            """Submit the next tensors while they fit in PREFETCH_MAX_BYTES beside those already
            submitted; with no array in hand (`holding` 0 bytes) and none submitted, the next one
            whatever its size."""
            nonlocal cursor, ahead
            while cursor < len(pending):
                nbytes = nbytes_of(pieces[pending[cursor]])
                if ahead + nbytes > PREFETCH_MAX_BYTES and (loading or holding):
                    return
                loading[pending[cursor]] = pool.submit(_load, loads[pending[cursor]])
                ahead += nbytes
                cursor += 1

        load_ahead(holding=0)
        for i, piece in enumerate(pieces):
            if isinstance(piece, (bytes, bytearray)):
                sink.write(piece, read_back=not isinstance(piece, Padding))
                continue
            source = piece[3]
            nbytes = nbytes_of(piece)
            sink.begin_tensor(check=checks.get(i))
            if spans[i] is None or not sink.copy(spans[i], nbytes):
                if i in loading:
                    ahead -= nbytes
                    loaded = loading.pop(i).result()
                else:  # not submitted (a kernel copy that failed, or too large to load ahead)
                    if cursor < len(pending) and pending[cursor] == i:
                        cursor += 1
                    loaded = _load(loads.get(i, source))
                load_ahead(holding=loaded.nbytes)  # the next ones load while this one is written
                _append_loaded(sink, piece, loaded, transpose=loads.get(i, source) is not source)
                del loaded
                load_ahead(holding=0)
            sink.end_tensor()
            sink.flushed()
            if on_tensor:
                on_tensor(nbytes)
    sink.raise_failed_check()
    return sink.crcs


def _append_loaded(sink: _Sink, piece: TensorSource, loaded: np.ndarray | MappedMatrix, *, transpose: bool) -> None:
    """Append what the loader gave for `piece`: a mapped matrix's transpose, or an array or
    (`transpose`) its transpose, checked against the dtype and shape planned."""
    name, dtype, shape, _ = piece
    if isinstance(loaded, MappedMatrix):
        try:
            sink.mapped_transpose(loaded)
        finally:
            loaded.release()
        return
    array = loaded
    if array.dtype != dtype.numpy and array.dtype.newbyteorder("=") == dtype.numpy.newbyteorder("="):
        array = array.astype(dtype.numpy)  # the other byte order (a big-endian source)
    given = tuple(reversed(array.shape)) if transpose else tuple(array.shape)
    if given != tuple(shape) or array.dtype != dtype.numpy:
        raise ValueError(f"{name}: source gave {array.dtype} {list(given)}, planned {dtype} {list(shape)}")
    if transpose:
        sink.transposed(array)
    else:
        sink.array(array)


class _Sink:
    """Where `append` puts bytes: `out`, with early writeback for a buffered file and, when
    `checksums`, each tensor's CRC32C (`crcs`, in order, complete once the sink is left).

    To a `DirectOutput` the checksums are taken by a thread of their own, in order, while the
    writer goes on: on the writer's thread they cost a BERT-large conversion to TF 0.12 s of
    its 1.07 s. A staging block is not refilled before the checksum of its bytes is taken
    (`DirectOutput.hold`).
    """

    def __init__(self, out: BinaryIO | DirectOutput, checksums: bool, *, verifies: bool = False):
        self.out = out
        self.direct = isinstance(out, DirectOutput)
        self.checksums = checksums
        self.crcs: list[int] = []
        self._crc = 0  # of the current tensor's bytes so far
        self._in_tensor = False  # taking the current tensor's CRC32C
        self._check: Callable[[int], None] | None = None  # of the current tensor's CRC32C
        self._failed: list[BaseException] = []  # what the checks raised
        self.writeback = None if self.direct else EarlyWriteback(out)
        self._checksummer = None
        if (checksums or verifies) and self.direct:
            from ..threads import Workers

            self._checksummer = Workers(1, "bertconv-crc")

    def __enter__(self) -> _Sink:
        return self

    def __exit__(self, *exc_info) -> None:
        if self._checksummer is not None:  # every checksum taken (or dropped, on an error)
            self._checksummer.shutdown(cancel=exc_info[0] is not None)

    def _in_order(self, step: Callable[..., None], *args) -> Task | None:
        """Run `step(*args)` now, or after the steps before it on the checksum thread."""
        if self._checksummer is None:
            step(*args)
            return None
        return self._checksummer.submit(self._kept_failure, step, args)

    def _kept_failure(self, step: Callable[..., None], args: tuple) -> None:
        """`step(*args)` on the checksum thread, whose tasks' results nobody reads (a hold only
        waits): what it raises is kept, and raised by `raise_failed_check`, so that no checksum
        is recorded wrong in silence."""
        try:
            step(*args)
        except BaseException as failed:  # noqa: BLE001 - raised once the sink is left
            self._failed.append(failed)

    def begin_tensor(self, *, check: Callable[[int], None] | None = None) -> None:
        """A tensor begins; `check(crc32c)` is called with the CRC32C of its bytes once they are
        all appended (a TF bundle's tensor copied verbatim: what reading it would check)."""
        self._in_tensor = self.checksums or check is not None
        if self._in_tensor:
            self._in_order(self._restart)
        self._check = check

    def end_tensor(self) -> None:
        if self._in_tensor:
            self._in_order(self._record, self._check)
        self._in_tensor, self._check = False, None

    def _restart(self) -> None:
        self._crc = 0

    def _record(self, check: Callable[[int], None] | None) -> None:
        if self.checksums:
            self.crcs.append(self._crc)
        if check is not None:
            try:
                check(self._crc)
            except BertconvError as failed:
                self._failed.append(failed)

    def raise_failed_check(self) -> None:
        """Raise what the first failed `check`, or checksum step, raised (called once the sink is
        left: every checksum taken)."""
        if self._failed:
            raise self._failed[0]

    def _extend(self, data) -> None:
        self._crc = crc32c.extend(self._crc, _unreleased(data))

    def _checksum(self, data, *, in_block: bool = False) -> None:
        """Extend the current tensor's CRC32C over `data` (bytes, or any C-contiguous buffer: the
        checksum takes only buffers it need not release, which a NumPy view of it is); `in_block`:
        `data` views the staging block, which must then wait for it."""
        if not self._in_tensor:
            return
        taken = self._in_order(self._extend, data)
        if in_block and taken is not None:
            self.out.hold(taken)

    def write(self, data, *, read_back: bool = False) -> None:
        """Append bytes (a bytes object or a C-contiguous array, which is not changed afterwards);
        `read_back`: the file's own bytes, not a tensor's (`DirectOutput.write`)."""
        if read_back and self.direct:
            self.out.write(data, read_back=True)
        else:
            self.out.write(data)
        self._checksum(data)

    def staged(self, nbytes: int) -> None:
        """Append the first `nbytes` of the `DirectOutput`'s staging block, filled by the caller."""
        self._checksum(self.out.staging()[:nbytes], in_block=True)
        self.out.staged(nbytes)

    def flushed(self) -> None:
        """A tensor is whole: a buffered file's written part may go to the disk now."""
        if self.writeback is not None:
            self.writeback.written(self.out.tell())

    def copy(self, span: tuple[Path, int], nbytes: int) -> bool:
        """Append `nbytes` of file `span[0]` from offset `span[1]`. False, with `out` where it was,
        when the kernel cannot copy between these files (the caller writes the bytes itself). A
        source shorter than its reader found it is `BadInput`."""
        source_path, offset = span
        if self.direct:
            self.out.copy_from(source_path, offset, nbytes, read=self._block_read if self._in_tensor else None)
            return True
        if self._in_tensor:  # its CRC32C is wanted: the bytes pass through here
            self._read_copy(source_path, offset, nbytes)
            return True
        return _kernel_copy(self.out, source_path, offset, nbytes)

    def _read_copy(self, source_path: Path, offset: int, nbytes: int) -> None:
        """Append the span, read in `CHUNK_BYTES` pieces, each checksummed as it is written."""
        descriptor = os.open(source_path, os.O_RDONLY)
        try:
            for start in range(offset, offset + nbytes, CHUNK_BYTES):
                length = min(CHUNK_BYTES, offset + nbytes - start)
                data = os.pread(descriptor, length, start)
                if len(data) != length:
                    raise ended_early(Path(source_path), offset + nbytes)
                self.write(data)
        finally:
            os.close(descriptor)

    def _block_read(self, view: memoryview) -> None:
        self._checksum(view, in_block=True)

    def array(self, array: np.ndarray) -> None:
        """Append `array`'s values row-major, in chunks of rows, without a whole extra copy when it
        is already contiguous (a memory map is written straight from the page cache)."""
        if array.ndim == 0 or array.size == 0:
            self.write(np.ascontiguousarray(array).tobytes())
            return
        if array.flags.c_contiguous:
            flat = array.reshape(-1).view(np.uint8)
            for start in range(0, flat.size, CHUNK_BYTES):
                self.write(flat[start:start + CHUNK_BYTES])
            return
        rows = max(1, CHUNK_BYTES // max(1, array[0].nbytes))
        for start in range(0, array.shape[0], rows):
            self.write(np.ascontiguousarray(array[start:start + rows]))

    def transposed(self, array: np.ndarray) -> None:
        """Append the transpose of 2-D `array` ([R, C]: C rows of R values) row-major, computed
        straight into the `DirectOutput`'s staging block, as many whole rows at a time as the block
        has room for; a row that would cross the block's end goes through `write`."""
        array = np.asarray(array)
        rows, columns = array.shape
        row_bytes = rows * array.dtype.itemsize
        done = 0  # rows of the transpose written
        while done < columns:
            room = self.out.staging()
            fit = min(columns - done, len(room) // row_bytes) if row_bytes else columns - done
            if fit == 0:
                self.write(np.ascontiguousarray(array[:, done]))
                done += 1
                continue
            target = np.frombuffer(room, dtype=array.dtype, count=fit * rows).reshape(fit, rows)
            transpose_into(array[:, done:done + fit], target, two_threads_from=TWO_THREAD_TRANSPOSE_BYTES)
            del target  # no view of the block may outlive its hand-over
            self.staged(fit * row_bytes)
            done += fit

    def mapped_transpose(self, matrix: MappedMatrix) -> None:
        """Append the transpose of `matrix` as `transposed` does, copied by OpenBLAS from its map,
        NumPy not imported: straight into a `DirectOutput`'s staging block; a strip at a time
        through a scratch into a buffered file, or where the block's free bytes start at an odd
        byte (a msgpack stream's values lie anywhere). From a strip whose bits OpenBLAS could
        not keep (a NaN) on, the rest goes through NumPy."""
        rows, columns = matrix.rows, matrix.columns
        row_bytes = 4 * rows
        in_strips = not self.direct or _address(self.out.staging()) % 4 != 0
        done = 0  # rows of the transpose written
        while done < columns:
            fit = 0 if in_strips else min(columns - done, len(self.out.staging()) // row_bytes)
            if fit:
                if not matrix.transpose_into(done, done + fit, _address(self.out.staging()),
                                             two_threads_from=TWO_THREAD_TRANSPOSE_BYTES):
                    break
                self.staged(fit * row_bytes)
            else:  # a strip, or a row that would cross the staging block's end
                fit = min(columns - done, max(1, SCRATCH_STRIP_BYTES // row_bytes) if in_strips else 1)
                scratch = bytearray(fit * row_bytes)  # a new one each time: its checksum may not be taken yet
                if not matrix.transpose_into(done, done + fit, _address(scratch),
                                             two_threads_from=TWO_THREAD_TRANSPOSE_BYTES):
                    break
                self.write(scratch)
            done += fit
        if done < columns:
            rest = matrix.array()[:, done:]
            if self.direct:
                self.transposed(rest)
            else:
                self.array(transpose(rest))


def _address(buffer) -> int:
    """The address of the first byte of a writable buffer."""
    return ctypes.addressof(ctypes.c_char.from_buffer(buffer))


def _unreleased(data):
    """`data` (bytes, a bytearray, a C-contiguous NumPy array or a memoryview of bytes) as a
    buffer crc32c's argument parser takes: read-only, or one it need not release, which a
    memoryview and a bytearray are not. Those are viewed through ctypes, not NumPy, whose import
    (95 ms) a verbatim copy would wait for."""
    if not isinstance(data, (memoryview, bytearray)):
        return data
    if isinstance(data, memoryview) and data.readonly:
        return data.tobytes()
    return (ctypes.c_char * memoryview(data).nbytes).from_buffer(data)


def _kernel_copy(out: BinaryIO, source_path: Path, offset: int, nbytes: int) -> bool:
    """`os.copy_file_range` of the span to `out`'s position; False (and `out` where it was) where
    the kernel cannot copy between these files, or the system has no such call (macOS)."""
    if not hasattr(os, "copy_file_range"):
        return False
    out.flush()
    start = out.tell()
    copied = 0
    try:
        with open(source_path, "rb") as source:
            while copied < nbytes:
                n = os.copy_file_range(source.fileno(), out.fileno(), nbytes - copied, offset + copied, start + copied)
                if n == 0:
                    raise ended_early(Path(source_path), offset + nbytes)
                copied += n
    except OSError as exc:
        if exc.errno not in _NO_KERNEL_COPY:
            raise
        out.seek(start)
        return False
    out.seek(start + nbytes)
    return True


def _checked_copies(pieces: list[Piece], spans: list) -> dict[int, Callable[[int], None]]:
    """The tensors not copied blind whose bytes may be copied if their CRC32C is checked (a TF
    bundle's, `checked_copy_span`): each one's span goes into `spans`, its check into the result."""
    checks = {}
    for i, piece in enumerate(pieces):
        source = _verbatim(piece) if spans[i] is None else None
        checked = source.checked_copy_span() if source is not None else None
        if checked is not None:
            path, offset, checks[i] = checked
            spans[i] = (path, offset)
    return checks


def _copy_span(piece: TensorSource) -> tuple[Path, int] | None:
    """Where the planned tensor's bytes can be copied from verbatim, unlooked at, if they can."""
    source = _verbatim(piece)
    return source.copy_span() if source is not None else None


def _verbatim(piece: Piece) -> LazyTensor | None:
    """The planned tensor's source when it is stored as planned (dtype, shape: its bytes are the
    output's), else None."""
    if isinstance(piece, (bytes, bytearray)):
        return None
    _, dtype, shape, source = piece
    if not isinstance(source, LazyTensor) or not math.prod(shape):
        return None
    if source.dtype != dtype or tuple(source.shape) != tuple(shape):
        return None
    return source


def _to_load(piece: TensorSource, *, direct: bool):
    """What the loader reads for `piece`'s source: the transpose (reshaped or not) of a float32
    matrix stored verbatim in a file is mapped, and `_Sink.mapped_transpose` copies it
    (`MatrixSource`); to a `DirectOutput` (`direct`), another computed transpose's base, whose
    transpose `_Sink.transposed` computes straight into the staging block; otherwise the source
    itself (a transpose of a transpose is its original's bytes)."""
    _, dtype, shape, source = piece
    if isinstance(source, LazyTensor) and dtype == source.dtype and tuple(shape) == tuple(source.shape):
        transposed = source
        while isinstance(transposed, ReshapedTensor):  # the same bytes as its base's
            transposed = transposed.base
        mapped = matrix_source(transposed)
        if mapped is not None:
            return mapped
    if direct and isinstance(source, TransposedTensor) and not isinstance(source.base, TransposedTensor):
        return source.base
    return source


def _load(source) -> np.ndarray | MappedMatrix:
    if isinstance(source, MatrixSource):
        return source.load()
    array = source.read() if isinstance(source, LazyTensor) else source()
    populate(array)
    return array
