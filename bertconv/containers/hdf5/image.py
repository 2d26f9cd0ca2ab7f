"""HDF5 files written in one front-to-back stream: h5py lays the file out in memory, then bertconv
writes it.

h5py creates the groups, attributes and datasets into a `MetadataImage`, a file object that
keeps only the pages HDF5 writes (its metadata: some KiB for a BERT). Each dataset's storage is
allocated when it is created but never filled (`Layout.dataset`), so its offset is known and
HDF5 writes none of its bytes. `write_file` then writes the whole file in order, the image's
bytes between the datasets and each tensor at its dataset's offset, through `stream.append`:
past the page cache for a large file, transposes computed straight into the output.

Why not let HDF5 write the file: after a failed write (a full disk) h5py's close crashes the
process (SIGSEGV, HDF5 1.14), which no message can explain; here HDF5 never touches the disk, and
a full disk is an ordinary OSError from bertconv's own writes (found before anything is written
for a large file, whose size is reserved). And a file written by HDF5 itself goes through the page
cache: a bert-base hf -> bert4keras conversion took 1.3-1.8 s on the test machine, against
0.36-0.39 s for `cp` + `sync` of the same bytes (docs/performance.md).

h5py's file-object driver asks nothing of the layout (no metadata aggregation), so the offsets
differ from those the sec2 driver (h5py's default, which Keras uses) would choose: a different
layout of the same HDF5 objects, read alike by h5py and Keras.

No object records when it was made (`Layout`): HDF5 stamps each new object with the clock unless
told not to, and two conversions of one checkpoint differed in those seconds alone; the same
input gives the same bytes.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from ...lazy import lazy_module
from ...tensor import LazyTensor
from .. import stream
from ..advice import advise
from ..direct_output import DirectOutput, open_output

if TYPE_CHECKING:
    import h5py
    import numpy as np
else:  # imported on first use: most commands write no HDF5 file
    h5py = lazy_module("h5py")
    np = lazy_module("numpy")

#: The image keeps what HDF5 writes in pages of this many bytes.
PAGE_BYTES = 4096

#: (offset, where, tensor): a dataset's tensor and where its storage begins ("where" names it in
#: messages); the offset is None for a dataset HDF5 allocated no storage for (no values).
Placed = tuple["int | None", str, LazyTensor]


class MetadataImage(io.RawIOBase):
    """An HDF5 file as h5py's file-object driver writes it, kept in memory page by page: what was
    written reads back, anything else reads as zeros (as a hole in a file does)."""

    def __init__(self):
        super().__init__()
        self.pages: dict[int, bytearray] = {}
        self.size = 0  # the file's length (HDF5 truncates it to its end of allocation on close)
        self._position = 0

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self.size}[whence]
        self._position = base + offset
        return self._position

    def tell(self) -> int:
        return self._position

    def truncate(self, size: int | None = None) -> int:
        self.size = self._position if size is None else size
        for number in [n for n in self.pages if n * PAGE_BYTES >= self.size]:
            del self.pages[number]
        return self.size

    def write(self, data) -> int:
        data = memoryview(data).cast("B")
        for number, start, end, done in self._spans(self._position, len(data)):
            page = self.pages.setdefault(number, bytearray(PAGE_BYTES))
            page[start:end] = data[done:done + end - start]
        self._position += len(data)
        self.size = max(self.size, self._position)
        return len(data)

    def readinto(self, buffer) -> int:
        buffer = memoryview(buffer).cast("B")
        count = max(0, min(len(buffer), self.size - self._position))
        for number, start, end, done in self._spans(self._position, count):
            page = self.pages.get(number)
            buffer[done:done + end - start] = page[start:end] if page is not None else bytes(end - start)
        self._position += count
        return count

    def bytes_between(self, begin: int, end: int) -> bytes:
        """The file's bytes [begin, end)."""
        out = bytearray(end - begin)
        for number, start, stop, done in self._spans(begin, end - begin):
            page = self.pages.get(number)
            if page is not None:
                out[done:done + stop - start] = page[start:stop]
        return bytes(out)

    @staticmethod
    def _spans(offset: int, count: int) -> Iterator[tuple[int, int, int, int]]:
        """(page number, start, end within the page, bytes of the range before it) for each page
        the range [offset, offset + count) touches."""
        done = 0
        while done < count:
            number, start = divmod(offset + done, PAGE_BYTES)
            end = min(PAGE_BYTES, start + count - done)
            yield number, start, end, done
            done += end - start


class Layout:
    """The objects of a new HDF5 file, made in its `MetadataImage`: groups (`group`) and datasets
    whose storage is allocated but never filled (`dataset`), none recording when it was made.

    Made through h5py's low-level calls with property lists built once per file: h5py's
    `create_dataset` costs about twice as much per dataset (it checks the name, makes a property
    list, wraps each object twice). Every group is made here, so one not yet made does not exist
    and no path is looked up in the file.
    """

    def __init__(self, file: h5py.File):
        self.file = file
        self._groups: dict[str, h5py.h5g.GroupID] = {"": file.id}
        self._group_plist = _untimed(h5py.h5p.GROUP_CREATE)
        self._dataset_plist = _untimed(h5py.h5p.DATASET_CREATE)
        self._dataset_plist.set_layout(h5py.h5d.CONTIGUOUS)
        self._dataset_plist.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
        self._dataset_plist.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
        self._link_plists = {True: _link_properties(ascii_name=True), False: _link_properties(ascii_name=False)}

    def group(self, path: str) -> h5py.Group:
        """The group at `path` ("a/b/c"), made with any group missing on the way."""
        return h5py.Group(self._group_id(path))

    def dataset(self, path: str, shape: tuple[int, ...], dtype) -> h5py.Dataset:
        """A dataset at `path` (its groups made) of `shape` and `dtype`, its storage contiguous,
        allocated at once and never filled by HDF5: its offset is known, its bytes are the
        writer's."""
        folder, _, name = path.rpartition("/")
        space = h5py.h5s.create_simple(shape) if shape else h5py.h5s.create(h5py.h5s.SCALAR)
        stored = h5py.h5t.py_create(np.dtype(dtype), logical=True)
        return h5py.Dataset(h5py.h5d.create(self._group_id(folder), name.encode("utf-8"), stored, space,
                                            dcpl=self._dataset_plist, lcpl=self._link_plists[name.isascii()]))

    def _group_id(self, path: str) -> h5py.h5g.GroupID:
        path = "/".join(part for part in path.split("/") if part)  # as HDF5 reads "a//b/"
        made = self._groups.get(path)
        if made is None:
            folder, _, name = path.rpartition("/")
            made = h5py.h5g.create(self._group_id(folder), name.encode("utf-8"), lcpl=self._link_plists[name.isascii()],
                                   gcpl=self._group_plist)
            self._groups[path] = made
        return made


def _untimed(plist_class):
    """A creation property list of `plist_class` whose object records no creation time."""
    plist = h5py.h5p.create(plist_class)
    plist.set_obj_track_times(False)
    return plist


def _link_properties(ascii_name: bool) -> h5py.h5p.PropLCID:
    """Links whose names are marked UTF-8 unless ASCII (as h5py marks them)."""
    lcpl = h5py.h5p.create(h5py.h5p.LINK_CREATE)
    if not ascii_name:
        lcpl.set_char_encoding(h5py.h5t.CSET_UTF8)
    return lcpl


def _new_file(image: MetadataImage) -> h5py.File:
    """An empty HDF5 file written into `image` as h5py.File(image, "w") makes one, except that its
    root group records no creation time."""
    access = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    access.set_libver_bounds(h5py.h5f.LIBVER_EARLIEST, h5py.h5f.LIBVER_LATEST)
    access.set_fileobj_driver(h5py.h5fd.fileobj_driver, image)
    return h5py.File(h5py.h5f.create(b"image", h5py.h5f.ACC_TRUNC, fapl=access,
                                     fcpl=_untimed(h5py.h5p.FILE_CREATE)))


def write_file(path: Path, lay_out: Callable[[Layout], list[Placed]],
               on_tensor: Callable[[int], None] | None = None) -> None:
    """Write a new HDF5 file at `path`: `lay_out(layout)` creates its objects (every dataset
    through `Layout.dataset`) and returns where each tensor goes; then the file is written front
    to back. `on_tensor(nbytes)` is called after each tensor."""
    image = MetadataImage()
    with _new_file(image) as f:
        placed = lay_out(Layout(f))
    pieces: list[stream.Piece] = []
    metadata: list[tuple[int, int]] = []  # [begin, end) of each span between the tensors
    position = 0
    for offset, where, tensor in sorted((p for p in placed if p[2].nbytes), key=lambda p: p[0] or 0):
        if offset is None:
            raise ValueError(f"{where}: HDF5 allocated no storage for a dataset of {tensor.numel} values")
        if offset < position or offset + tensor.nbytes > image.size:
            raise ValueError(f"{where}: HDF5 placed its {tensor.nbytes} bytes at byte {offset}, overlapping "
                             f"other data or past the file's {image.size} bytes")
        pieces += [image.bytes_between(position, offset), (where, tensor.dtype, tuple(tensor.shape), tensor)]
        metadata.append((position, offset))
        position = offset + tensor.nbytes
    pieces.append(image.bytes_between(position, image.size))
    metadata.append((position, image.size))
    with open_output(path, image.size) as out:
        stream.append(out, pieces, on_tensor=on_tensor)
    if isinstance(out, DirectOutput):
        _read_ahead(path, metadata)


def _read_ahead(path: Path, spans: list[tuple[int, int]]) -> None:
    """Start reading `spans` of the file at `path` into the page cache, all at once.

    A file written past the page cache (`DirectOutput`) is read back next, and HDF5 reads its
    metadata (the spans between the tensors) one small read at a time, each waiting for the disk
    before the next is known: in a BERT-large bert4keras read-back, the global-heap check alone
    (`workarounds.py`) took 55-62 ms so, 20-29 ms with the spans read ahead.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        for begin, end in spans:
            if end > begin:
                advise(fd, begin, end - begin, "POSIX_FADV_WILLNEED")
    finally:
        os.close(fd)
