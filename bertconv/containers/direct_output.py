"""A large output written front to back past the page cache (O_DIRECT), by two writer threads.

Why: a conversion that copies 1.3 GB through the page cache makes the kernel find 1.3 GB of new
cache pages and write them back; on this project's test machine (a virtual machine whose free
memory is returned to its host) that alone took 0.8 to 4.7 s for the same BERT-large copy,
nearly all of it system time. Written with O_DIRECT from a few reused, aligned blocks, the same
bytes take 0.6 to 0.75 s every time: no page cache is filled, the disk gets large aligned
writes, and two threads keep two writes in flight while the next block is filled.

The bytes are staged in `BLOCK_BYTES` blocks (anonymous maps, so page-aligned); a full block is
written at its offset by a writer thread while the next fills. The last, partial block is
padded to `ALIGNMENT` for its write and the file then cut to its true length. The file's own
bytes (a header, HDF5's metadata, the keys a msgpack file puts before each array), which the
conversion's read-back of its output walks next, are read into the page cache in the background
once written (`write(..., read_back=True)`). Where the file system refuses O_DIRECT when the
file is opened, `open_output` gives a plain buffered file; where it refuses an aligned write,
the file falls back to buffered writes from then on. Durability still rests on the fsync
`destination/atomic.py` does before the rename.
"""

from __future__ import annotations

import errno
import mmap
import os
from collections import deque
from collections.abc import Callable
from pathlib import Path

from ..errors import ended_early
from .advice import advise, populate_for_writing

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import BinaryIO

    from ..threads import Task

#: Offsets, lengths and buffer addresses of O_DIRECT writes are multiples of this (the largest
#: logical block size of common disks; 512-byte devices accept it too).
ALIGNMENT = 4096
#: Bytes staged per write. 16 MiB writes, two in flight, measured fastest among 4-32 MiB.
BLOCK_BYTES = 16 << 20
#: Writes in flight at once.
WRITERS = 2
#: Outputs smaller than this are written through the page cache: three blocks and two threads
#: are not worth it for a few megabytes.
DIRECT_MIN_BYTES = 64 << 20


def open_output(path: Path, size: int) -> BinaryIO | DirectOutput:
    """`path` opened for writing `size` bytes front to back: a `DirectOutput` when the output is
    large (`DIRECT_MIN_BYTES`) and the file system takes O_DIRECT, else a buffered file."""
    if size >= DIRECT_MIN_BYTES and hasattr(os, "O_DIRECT"):
        try:
            return DirectOutput(path, size)
        except OSError as error:
            if error.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                raise
    return open(path, "wb")


def _write_fully(fd: int, view: memoryview, offset: int) -> None:
    """pwrite all of `view` at `offset`; an O_DIRECT write the file system refuses (EINVAL:
    an alignment it wants larger) is made buffered, for this file from now on. The other writer
    thread may have cleared O_DIRECT already (its own write refused the same way), so a refused
    write is tried once more buffered whoever cleared it; refused again, the EINVAL is another error."""
    buffered_retry = False
    while view:
        try:
            written = os.pwritev(fd, [view], offset)
        except OSError as error:
            if error.errno != errno.EINVAL or buffered_retry:
                raise
            _drop_direct(fd)
            buffered_retry = True
            continue
        view, offset = view[written:], offset + written


def _write_and_cache(fd: int, view: memoryview, offset: int, read_back: list[tuple[int, int]]) -> None:
    """`_write_fully`, then the `read_back` spans (written by it) read into the page cache."""
    _write_fully(fd, view, offset)
    _cache(fd, read_back)


def _cache(fd: int, spans: list[tuple[int, int]]) -> None:
    """Have the kernel read the pages of the written `spans` [start, end) of `fd` into the page
    cache, in the background (POSIX_FADV_WILLNEED)."""
    for start, end in spans:
        advise(fd, start, end - start, "POSIX_FADV_WILLNEED")


def _drop_direct(fd: int) -> None:
    """Clear O_DIRECT on `fd` (if it is still set)."""
    import fcntl  # here: only a file system that refuses aligned O_DIRECT writes gets here

    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    if flags & os.O_DIRECT:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_DIRECT)


class DirectOutput:
    """A file written front to back with O_DIRECT (see the module's docstring).

    `write(data)` appends bytes, `copy_from(path, offset, nbytes)` appends a span of another
    file (read straight into the staging block), `staging()` and `staged(n)` let a caller fill
    the block in place (a transpose written as it is computed), `tell()` is the length written
    so far. Used as a context manager: on leaving normally the last block is written and the
    file cut to its length; on an error the writes in flight are waited for and the file is left
    to the caller (`destination/atomic.py` removes it). `size`, the expected length, is reserved
    up front (`_reserve`: one extent, and a full disk is found before anything is written).
    `block_bytes` is for tests.
    """

    def __init__(self, path: Path, size: int, *, block_bytes: int | None = None):
        block_bytes = block_bytes or BLOCK_BYTES
        if block_bytes % ALIGNMENT:
            raise ValueError(f"block_bytes must be a multiple of {ALIGNMENT}, got {block_bytes}")
        self.path = Path(path)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o666)
        try:
            if size:
                _reserve(self._fd, size)
        except BaseException:
            os.close(self._fd)
            raise
        from ..threads import Workers  # here: reading needs no threads

        self._writers = Workers(WRITERS, "bertconv-write")
        blocks = [mmap.mmap(-1, block_bytes) for _ in range(WRITERS + 1)]
        for block in blocks[1:]:  # by the idle writers while the first fills (where its pages fault in)
            self._writers.submit(populate_for_writing, block)
        self._free = deque(memoryview(block) for block in blocks)
        self._in_flight: deque = deque()  # (write, block, hold), oldest first
        self._block = self._free.popleft()
        self._hold = None  # what must be done before this block is refilled, besides its write
        self._filled = 0  # bytes staged in self._block
        self._block_offset = 0  # where self._block goes in the file
        self._sources: dict[str, int] = {}  # descriptors of the files copied from (`_source`)
        self._read_back: list[tuple[int, int]] = []  # [start, end) of bytes to cache once written

    def fileno(self) -> int:
        return self._fd

    def tell(self) -> int:
        return self._block_offset + self._filled

    def write(self, data, *, read_back: bool = False) -> int:
        """Append `data`'s bytes. `read_back`: they are the file's own, not a tensor's, and a
        reader walks them (the conversion's read-back of its output, next): once their block is
        written, the writer thread has the kernel read their pages into the page cache, in the
        background. A reader waits for the disk at each of them, since only parsing one tells
        where the next lies: read back from the disk, a bert-base flax_model.msgpack's keys took
        46-52 ms, against 10-19 ms cached; the global-heap check of a BERT-large bert4keras file
        (HDF5's metadata, `hdf5/workarounds.py`) 55-62 ms, against 20-29 ms."""
        view = memoryview(data).cast("B")
        total = len(view)
        if read_back and total:
            self._read_back.append((self.tell(), self.tell() + total))
        while view:
            n = min(len(view), len(self._block) - self._filled)
            self._block[self._filled:self._filled + n] = view[:n]
            self._filled += n
            view = view[n:]
            if self._filled == len(self._block):
                self._submit()
        return total

    def staging(self) -> memoryview:
        """The unfilled rest of the staging block (never empty): bytes put at its front are
        appended by `staged(n)`, so a producer fills the block without an array of its own."""
        return self._block[self._filled:]

    def staged(self, nbytes: int) -> None:
        """Append the first `nbytes` of `staging()`, filled by the caller."""
        if not 0 <= nbytes <= len(self._block) - self._filled:
            raise ValueError(f"{nbytes} bytes staged, {len(self._block) - self._filled} were free")
        self._filled += nbytes
        if self._filled == len(self._block):
            self._submit()

    def copy_from(self, source_path: Path, offset: int, nbytes: int,
                  read: Callable[[memoryview], None] | None = None) -> None:
        """Append bytes [offset, offset + nbytes) of `source_path`, read into the staging block;
        each piece read is shown to `read` (a checksum) before it is handed over."""
        source = self._source(source_path)
        copied = 0
        while copied < nbytes:
            n = min(nbytes - copied, len(self._block) - self._filled)
            got = os.preadv(source, [self._block[self._filled:self._filled + n]], offset + copied)
            if got == 0:
                raise ended_early(Path(source_path), offset + nbytes)
            if read is not None:
                read(self._block[self._filled:self._filled + got])
            self._filled += got
            copied += got
            if self._filled == len(self._block):
                self._submit()

    def _source(self, path: Path) -> int:
        """A descriptor of `path` open for reading, one per file for the output's life: opening
        and closing the file for each of bert-base's 205 tensors took 11 ms of the main thread
        (bert4keras -> TF, cProfile). Not open(): no buffer to allocate."""
        key = os.fspath(path)
        if key not in self._sources:
            self._sources[key] = os.open(key, os.O_RDONLY)
        return self._sources[key]

    def hold(self, until: Task) -> None:
        """The staging block is not refilled before `until` is done (a reader of its bytes: a
        checksum taken on another thread); a later hold of the same block replaces it, so the
        holds of a block must be done in the order given."""
        self._hold = until

    def _submit(self) -> None:
        """Hand the full block to a writer; take a free block, waiting for the oldest write (and
        hold) if none."""
        future = self._writers.submit(_write_and_cache, self._fd, self._block, self._block_offset,
                                      self._read_back_in_block())
        self._in_flight.append((future, self._block, self._hold))
        self._hold = None
        self._block_offset += self._filled
        self._filled = 0
        if not self._free:
            done, block, hold = self._in_flight.popleft()
            done.result()  # a write's error is raised here, at the next block
            if hold is not None:
                hold.result()
            self._free.append(block)
        self._block = self._free.popleft()

    def _finish(self) -> None:
        """Wait for the writes in flight, write the last block padded, cut the file to length."""
        while self._in_flight:
            self._in_flight.popleft()[0].result()
        length = self.tell()
        spans = self._read_back_in_block()
        if self._filled:
            padded = -(-self._filled // ALIGNMENT) * ALIGNMENT
            self._block[self._filled:padded] = bytes(padded - self._filled)
            _write_fully(self._fd, self._block[:padded], self._block_offset)
        _cache(self._fd, spans)  # before the cut, after which ext4 here read no partial last page in
        os.ftruncate(self._fd, length)

    def _read_back_in_block(self) -> list[tuple[int, int]]:
        """The parts of the `read_back` spans that lie in the staging block, taken off the list
        (a span running on past the block keeps its rest)."""
        start, end = self._block_offset, self._block_offset + self._filled
        inside = [(max(first, start), min(last, end)) for first, last in self._read_back if first < end]
        self._read_back = [(max(first, end), last) for first, last in self._read_back if last > end]
        return inside

    def __enter__(self) -> DirectOutput:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        try:
            if kind is None:
                self._finish()
        finally:
            self._writers.shutdown()  # no writer may still use the descriptor
            os.close(self._fd)
            for source in self._sources.values():
                os.close(source)


def _reserve(fd: int, size: int) -> None:
    """Allocate `size` bytes for the file with fallocate(2) itself, where the file system has it.

    Not `os.posix_fallocate`: where the file system lacks fallocate (NFS before 4.2 takes
    O_DIRECT but not fallocate), glibc emulates it by writing a byte into every block, hundreds
    of thousands of small writes for a large checkpoint. A full disk (ENOSPC) is raised here,
    before anything is written.
    """
    import ctypes  # here: only a large output reserves space

    try:
        fallocate = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return
    fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    fallocate.restype = ctypes.c_int
    if fallocate(fd, 0, 0, size) != 0:
        code = ctypes.get_errno()
        if code not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise OSError(code, os.strerror(code))
