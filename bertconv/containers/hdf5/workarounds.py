"""Where HDF5 cannot be trusted with a file, and what bertconv does instead.

HDF5 is C code. On some damaged files it loops forever, and after a failed write it crashes the
process; neither comes back as a Python exception that could become a clear message, so bertconv
keeps HDF5 from meeting those cases at all:

- Reading: `check_global_heaps` walks every global heap collection (where Keras keeps its layer
  and weight names) as HDF5 would, before any name is read, and refuses one that HDF5 1.14 would
  loop on forever.
- Writing: after ENOSPC, h5py's close crashes the process (SIGSEGV, HDF5 1.14). So HDF5 never
  writes a file: bertconv lays it out and writes the bytes itself (`containers/hdf5/image.py`),
  where a full disk is an ordinary OSError.

Layout-agnostic: `containers/hdf5/keras.py` applies both to Keras' files.
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Iterator
from pathlib import Path

from ...errors import bad_input
from ...lazy import lazy_module
from ..advice import advise
from ..one_reading import remembered
from .walk import dataset_paths

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    import h5py
else:  # imported on first use: most commands read no HDF5 file
    h5py = lazy_module("h5py")

#: HDF5 global heap collections hold variable-length strings (Keras' layer and weight names).
#: Layout: "GCOL", version 1, 3 reserved bytes, collection size (8 bytes), then objects of
#: index (2), reference count (2), reserved (4), size (8), data padded to 8 bytes; index 0 is
#: the free space. HDF5 1.14 loops forever on a collection whose free space claims 0 bytes
#: (H5HG__cache_heap_deserialize never advances), so collections are walked here first.
GLOBAL_HEAP_SIGNATURE = b"GCOL"
GLOBAL_HEAP_VERSION = 1
GLOBAL_HEAP_MIN_SIZE = 4096
_HEAP_HEADER_BYTES = 16
_HEAP_OBJECT_HEADER_BYTES = 16


# --- reading: the global heaps HDF5 would loop on -------------------------------------------------


def check_global_heaps(path: Path) -> None:
    """Refuse a file holding a global heap collection HDF5 would loop forever on.

    Every "GCOL" signature followed by a plausible header (version 1, zero reserved bytes, a
    size of at least 4096 bytes inside the file) is walked object by object as HDF5 walks it;
    an object that does not advance the walk is corruption. Only the metadata is searched, not
    the tensors' bytes, so checking a multi-GB file reads kilobytes. It is read with `pread`,
    not through a memory map: the page cache may hold the file in 2 MiB folios (a file just
    read or written), and touching a few bytes of a mapped folio maps all of it, so the scattered
    metadata of a BERT-large tf_model.h5 counted 300 MiB of resident memory.
    """
    remembered(path, "global heaps", lambda: _check_global_heaps(path))


def _check_global_heaps(path: Path) -> None:
    try:
        with open(path, "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return
            advise(f.fileno(), 0, 0, "POSIX_FADV_RANDOM")  # no readahead around each range
            for begin, end in _metadata_ranges(path, size):
                for start in _signatures(f.fileno(), begin, end):
                    _walk_global_heap(path, f.fileno(), start, size)
    except OSError as exc:
        raise bad_input(path, f"cannot read: {exc.strerror or exc}") from None


#: How much of a metadata range is read at a time while searching it (a damaged file's whole
#: length is searched).
_SCAN_BYTES = 1 << 20


def _signatures(fd: int, begin: int, end: int) -> Iterator[int]:
    """The offsets of every GLOBAL_HEAP_SIGNATURE lying wholly in bytes [begin, end) of the file."""
    overlap = len(GLOBAL_HEAP_SIGNATURE) - 1  # a signature across two reads is found in the second
    position = begin
    while position < end:
        want = min(_SCAN_BYTES, end - position)
        chunk = os.pread(fd, want, position)
        found = chunk.find(GLOBAL_HEAP_SIGNATURE)
        while found >= 0:
            yield position + found
            found = chunk.find(GLOBAL_HEAP_SIGNATURE, found + 1)
        if len(chunk) < want or position + len(chunk) >= end:
            return
        position += len(chunk) - overlap


def _metadata_ranges(path: Path, size: int) -> list[tuple[int, int]]:
    """The byte ranges of the file outside its datasets' contiguous storage: where HDF5 keeps
    metadata, global heaps included. Listing datasets reads no attribute (no global heap); if the
    file is too damaged to list them, the whole file is searched."""
    spans: list[tuple[int, int]] = []
    try:
        with h5py.File(path, "r") as f:
            for name in dataset_paths(f):
                dataset = h5py.h5d.open(f.id, name)
                offset = dataset.get_offset()
                if offset is not None:
                    spans.append((offset, dataset.get_storage_size()))
    except Exception:  # noqa: BLE001 - damaged structure: fall back to searching everything
        return [(0, size)]
    ranges, position = [], 0
    for offset, length in sorted(spans):
        if offset > position:
            ranges.append((position, offset))
        position = max(position, offset + length)
    ranges.append((position, size))
    return ranges


def _read_exactly(fd: int, offset: int, count: int) -> bytes:
    data = os.pread(fd, count, offset)
    if len(data) != count:  # the file shrank under us
        raise OSError(errno.EIO, f"short read of {count} bytes at byte {offset}")
    return data


def _walk_global_heap(path: Path, fd: int, start: int, size: int) -> None:
    if start + _HEAP_HEADER_BYTES > size:
        return
    version, reserved, length = struct.unpack("<B3sQ", _read_exactly(fd, start + 4, 12))
    if version != GLOBAL_HEAP_VERSION or reserved != bytes(3) or not GLOBAL_HEAP_MIN_SIZE <= length <= size - start:
        return  # not a collection HDF5 would accept; it reports its own error if one is used
    position, end = start + _HEAP_HEADER_BYTES, start + length
    while position + _HEAP_OBJECT_HEADER_BYTES <= end:
        index, _, _, object_size = struct.unpack("<HH4sQ", _read_exactly(fd, position, _HEAP_OBJECT_HEADER_BYTES))
        # HDF5's step, in its size_t arithmetic: the free space (index 0) spans `size` bytes,
        # any other object its header plus its size rounded up to 8.
        step = object_size if index == 0 else (_HEAP_OBJECT_HEADER_BYTES + ((object_size + 7) & ~7)) % 2**64
        if step == 0 or step >= 2**63:
            raise bad_input(path, f"HDF5 global heap collection at byte {start} is corrupt: object {index} at "
                                  f"byte {position} claims {object_size} bytes, which HDF5 cannot step over "
                                  f"(the names this file stores are damaged)")
        position += step
