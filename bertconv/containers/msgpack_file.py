"""Flax msgpack state dicts (`flax.serialization.msgpack_serialize`), read and written per tensor.

Model-agnostic: this module knows flax's encoding of a parameter tree, not any model's names.

Layout (flax/serialization.py, flax 0.x): one msgpack value, a map of string keys whose values
are maps again or arrays, in the order the model created its parameters (dict insertion order;
transformers' BERT: embeddings word, position, token type, LayerNorm scale then bias, ...). An
array is

    ExtType(code 1, msgpack.packb((shape, dtype.name, arr.tobytes("C")), use_bin_type=True))

i.e. an ext record whose payload is a 3-array: the shape (array of ints), the NumPy dtype name
("float32", "bfloat16", ...) and a bin record holding the raw row-major little-endian bytes.
Arrays over 2**30 bytes are split into a `{"__msgpack_chunked_array__": True, ...}` map of
chunks; no BERT tensor comes near that size, and such a map is refused with a message.

How it is read, and why: the structure is walked here, byte by byte of msgpack's type
prefixes (maps, strings, ints, arrays, ext and bin headers: fixed, documented formats), so that
each array's raw bytes are located and seeked past without being read; the array becomes a
`MappedTensor` at that offset. Only the pages that hold header bytes are read (`_HeaderBytes`,
`pread` on a descriptor advised `POSIX_FADV_RANDOM`): a memory map or buffered reads would let the
kernel's readahead pull in megabytes of tensor data around every header (on a disk with 8 MiB
readahead, 310 of a bert-base file's 420 MiB). Keys and each array's (shape, dtype) prefix, once
their exact extent is known, are decoded by the `msgpack` package. `msgpack.Unpacker` alone
cannot do this: `unpack()` and `skip()` buffer an ext record whole (listing a 400 MB file would
read 400 MB), and it cannot peek at a value's type or seek past it. The walk is exact (every byte of the
file belongs to the one top-level value, lengths must agree with shapes and dtypes) and bounded
(nesting depth, entry counts checked against the bytes left, no allocation larger than a key).

Writing streams the same encoding: headers and keys packed by `msgpack`, ext and bin headers
built here (the `msgpack` packer has no header-only form for them), each array's bytes written
by `stream.append` as a safetensors file's are. The output is byte-identical to
`msgpack_serialize` for the same tree (same key order, smallest headers, as msgpack-python packs
them).
"""

from __future__ import annotations

import errno
import math
import os
import struct
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path

from .. import dtypes
from ..errors import BadInput, bad_input
from ..lazy import lazy_module
from ..records import record
from ..tensor import ArrayTensor, LazyTensor, MappedTensor
from .advice import advise

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    import msgpack
    import numpy as np
else:  # imported on first use: only a Flax file needs the codec, and headers need no NumPy
    msgpack = lazy_module("msgpack")
    np = lazy_module("numpy")

#: flax's ext type codes (flax/serialization.py `_MsgpackExtType`).
EXT_NDARRAY = 1
EXT_NATIVE_COMPLEX = 2
EXT_NPSCALAR = 3
#: flax's marker key of an array split into chunks (flax/serialization.py `_chunk`).
CHUNKED_ARRAY_KEY = "__msgpack_chunked_array__"
#: How deep maps may nest; a BERT's tree is 7 levels deep.
MAX_DEPTH = 32
#: The most dimensions an array record's shape may list (and dtype name bytes): bounds the prefix.
MAX_DIMENSIONS = 64
MAX_DTYPE_NAME = 64
#: No dimension of a real array comes near this; larger ones are corruption.
MAX_DIMENSION = 2**40
#: The unit the page cache reads a file in.
_PAGE = 4096

#: fixmap, fixarray and fixstr carry their size in the type byte's low bits.
_FIXMAP, _FIXARRAY, _FIXSTR = (0x80, 0x8F), (0x90, 0x9F), (0xA0, 0xBF)
_MAP16, _MAP32 = 0xDE, 0xDF
_STR8, _STR16, _STR32 = 0xD9, 0xDA, 0xDB
_ARRAY16, _ARRAY32 = 0xDC, 0xDD
#: Ints and floats: total encoded size by type byte (fixints are 1 byte).
_NUMBER_SIZES = {0xCA: 5, 0xCB: 9, 0xCC: 2, 0xCD: 3, 0xCE: 5, 0xCF: 9, 0xD0: 2, 0xD1: 3, 0xD2: 5, 0xD3: 9}
_BIN8, _BIN16, _BIN32 = 0xC4, 0xC5, 0xC6
_EXT8, _EXT16, _EXT32 = 0xC7, 0xC8, 0xC9
#: fixext1/2/4/8/16: payload length by type byte.
_FIXEXT = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}


@record
class MsgpackArray:
    """One array leaf: `path` the keys from the root to it."""

    path: tuple[str, ...]
    tensor: LazyTensor


def looks_like_flax_msgpack(path: Path, top_keys: Collection[str] | None) -> bool:
    """True when the file starts with a msgpack map whose first key is one of `top_keys` (any key
    when None) and whose first value is a map or an array record. Reads a few bytes; never raises."""
    try:
        with open(path, "rb") as f:
            head = f.read(512)
        walker = _Walker(Path(path), head, allow_short=True)
        count, position = walker.map_header(0)
        if count == 0:
            return False
        key, position = walker.key(position, ())
        if top_keys is not None and key not in top_keys:
            return False
        first = head[position]
        return _is_map_byte(first) or first in _FIXEXT or first in (_EXT8, _EXT16, _EXT32)
    except (BadInput, IndexError, OSError, struct.error):
        return False


def read_file(path: Path) -> list[MsgpackArray]:
    """Every array of a flax msgpack file, in file order, as lazy tensors. Reads the headers
    only: keys, map/ext/bin headers and each array's (shape, dtype); no byte of tensor data."""
    path = Path(path)
    try:
        with open(path, "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise bad_input(path, "is empty, not a flax msgpack file")
            advise(f.fileno(), 0, 0, "POSIX_FADV_RANDOM")
            data = _HeaderBytes(f.fileno(), size)
            if not _is_map_byte(data[0]):
                raise bad_input(path, "does not start with a msgpack map (flax writes its parameter tree as one)")
            walker = _Walker(path, data)
            end = walker.value(0, (), depth=0)
            if end != size:
                raise bad_input(path, f"the msgpack value ends at byte {end} but the file has {size} bytes "
                                      f"(trailing data: not one flax state dict)")
            return walker.arrays
    except OSError as exc:
        raise bad_input(path, f"cannot read: {exc.strerror or exc}") from None


class _HeaderBytes:
    """A file's bytes, indexed like `bytes` (`data[i]` an int, `data[i:j]` bytes), read by `pread`
    a page at a time: the pages that hold the byte asked for, the last of them kept for the next.
    The kernel reads whole pages anyway, so this reads no page the walk would not, in one system
    call per header rather than one per type byte (a BERT-large file's 7,500 became 400)."""

    def __init__(self, fd: int, size: int):
        self.fd = fd
        self.size = size
        self._kept_at, self._kept = 0, b""

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index):
        if isinstance(index, slice):
            start, stop, _ = index.indices(self.size)
            return self._read(start, max(0, stop - start))
        if not 0 <= index < self.size:
            raise IndexError(index)
        offset = index - self._kept_at
        if 0 <= offset < len(self._kept):
            return self._kept[offset]
        return self._read(index, 1)[0]

    def _read(self, position: int, count: int) -> bytes:
        offset = position - self._kept_at
        if offset < 0 or offset + count > len(self._kept):
            start = position - position % _PAGE
            stop = min(self.size, -(-(position + count) // _PAGE) * _PAGE)
            got = os.pread(self.fd, stop - start, start)
            if len(got) != stop - start:  # the file shrank under us
                raise OSError(errno.EIO, f"short read of {stop - start} bytes at byte {start}")
            self._kept_at, self._kept = start, got
            offset = position - start
        return self._kept[offset:offset + count]


def _is_map_byte(byte: int) -> bool:
    return _FIXMAP[0] <= byte <= _FIXMAP[1] or byte in (_MAP16, _MAP32)


class _Walker:
    """The structural walk of one file (see the module docstring). `arrays` collects the leaves."""

    def __init__(self, path: Path, data, *, allow_short: bool = False):
        self.path = path
        self.data = data
        self.size = len(data)
        self.allow_short = allow_short
        self.arrays: list[MsgpackArray] = []

    def _need(self, position: int, count: int, what: str) -> None:
        if position + count > self.size:
            if self.allow_short:
                raise IndexError(what)
            raise bad_input(self.path, f"{what} at byte {position} needs {count} bytes, but the file has "
                                       f"{self.size} (truncated?)")

    def _uint(self, position: int, width: int, what: str) -> int:
        self._need(position, width, what)
        return int.from_bytes(self.data[position:position + width], "big")

    def map_header(self, position: int) -> tuple[int, int]:
        """(entry count, position after the header) of a map at `position`."""
        self._need(position, 1, "a map")
        byte = self.data[position]
        if _FIXMAP[0] <= byte <= _FIXMAP[1]:
            return byte & 0x0F, position + 1
        if byte == _MAP16:
            return self._uint(position + 1, 2, "a map16 header"), position + 3
        if byte == _MAP32:
            return self._uint(position + 1, 4, "a map32 header"), position + 5
        raise bad_input(self.path, f"byte {position}: expected a msgpack map, found type byte 0x{byte:02x}")

    def key(self, position: int, where: tuple[str, ...]) -> tuple[str, int]:
        """A map key (flax writes strings) and the position after it."""
        self._need(position, 1, "a key")
        byte = self.data[position]
        if _FIXSTR[0] <= byte <= _FIXSTR[1]:
            length, start = byte & 0x1F, position + 1
        elif byte in (_STR8, _STR16, _STR32):
            width = {_STR8: 1, _STR16: 2, _STR32: 4}[byte]
            length, start = self._uint(position + 1, width, "a string header"), position + 1 + width
        else:
            raise bad_input(self.path, f"byte {position}: a key under {'/'.join(where) or 'the root'} is "
                                       f"msgpack type 0x{byte:02x}, not a string (flax keys are strings)")
        self._need(start, length, "a key")
        try:
            key = msgpack.unpackb(bytes(self.data[position:start + length]), raw=False)
        except (ValueError, msgpack.UnpackException) as exc:
            raise bad_input(self.path, f"byte {position}: a key under {'/'.join(where) or 'the root'} is not "
                                       f"UTF-8 text: {exc}") from None
        return key, start + length

    def value(self, position: int, where: tuple[str, ...], depth: int) -> int:
        """Walk the value at `position` (a map or an array record); the position after it."""
        named = "/".join(where) or "the root"
        if depth > MAX_DEPTH:
            raise bad_input(self.path, f"{named}: maps nest deeper than {MAX_DEPTH} levels; not a parameter tree")
        self._need(position, 1, f"the value of {named}")
        byte = self.data[position]
        if _is_map_byte(byte):
            count, position = self.map_header(position)
            if count * 2 > self.size - position:  # every entry takes at least 2 bytes
                raise bad_input(self.path, f"{named}: a map of {count:,} entries cannot fit in the "
                                           f"{self.size - position:,} bytes left")
            seen = set()
            for _ in range(count):
                key, position = self.key(position, where)
                if key in seen:
                    raise bad_input(self.path, f"{named}: key {key!r} appears twice")
                seen.add(key)
                if key == CHUNKED_ARRAY_KEY:
                    raise bad_input(self.path, f"{named} is an array flax split into chunks (over 2**30 bytes); "
                                               f"bertconv reads arrays stored whole")
                position = self.value(position, where + (key,), depth + 1)
            return position
        if byte in _FIXEXT or byte in (_EXT8, _EXT16, _EXT32):
            return self._array(position, where)
        raise bad_input(self.path, f"{named}: msgpack type 0x{byte:02x} at byte {position} is neither a map nor "
                                   f"an array record; a flax parameter tree holds only those")

    def _array(self, position: int, where: tuple[str, ...]) -> int:
        named = "/".join(where) or "the root"
        byte = self.data[position]
        if byte in _FIXEXT:
            length, header = _FIXEXT[byte], 1
        else:
            width = {_EXT8: 1, _EXT16: 2, _EXT32: 4}[byte]
            length, header = self._uint(position + 1, width, f"{named}: an ext header"), 1 + width
        self._need(position + header, 1, f"{named}: an ext header")
        code = self.data[position + header]
        start = position + header + 1
        self._need(start, length, f"{named}: an array record of {length:,} bytes")
        end = start + length
        if code != EXT_NDARRAY:
            kind = {EXT_NATIVE_COMPLEX: "a complex number", EXT_NPSCALAR: "a NumPy scalar"}.get(code, f"ext type {code}")
            raise bad_input(self.path, f"{named} is {kind}, not an array (flax ext type {EXT_NDARRAY})")
        shape, dtype, raw = self._array_prefix(start, end, named)
        nbytes = math.prod(shape) * dtype.itemsize
        if raw + nbytes != end:
            raise bad_input(self.path, f"{named}: shape {list(shape)} of {dtype} needs {nbytes:,} bytes, but its "
                                       f"record holds {end - raw:,}")
        tensor = (MappedTensor(self.path, raw, dtype, shape, name=named) if nbytes
                  else ArrayTensor(np.empty(shape, dtype=dtype.numpy), dtype))
        self.arrays.append(MsgpackArray(where, tensor))
        return end

    def _array_header(self, position: int, end: int) -> tuple[int, int]:
        """(element count, position after the header) of a msgpack array inside a record ending at `end`."""
        if position >= end:
            raise ValueError(f"the record ends at byte {end}")
        byte = self.data[position]
        if _FIXARRAY[0] <= byte <= _FIXARRAY[1]:
            return byte & 0x0F, position + 1
        width = {_ARRAY16: 2, _ARRAY32: 4}.get(byte)
        if width is None or position + 1 + width > end:
            raise ValueError(f"expected an array at byte {position}, found type byte 0x{byte:02x}")
        return int.from_bytes(self.data[position + 1:position + 1 + width], "big"), position + 1 + width

    def _extent(self, position: int, end: int, *, nested: bool) -> int:
        """Where the value at `position` ends: a number or a string, or (if `nested`) an array of
        numbers, as a shape is; within the record ending at `end`. Reads type bytes only."""
        if position >= end:
            raise ValueError(f"the record ends at byte {end}")
        byte = self.data[position]
        if byte <= 0x7F or byte >= 0xE0:  # positive and negative fixint
            return position + 1
        if byte in _NUMBER_SIZES:
            stop = position + _NUMBER_SIZES[byte]
        elif _FIXSTR[0] <= byte <= _FIXSTR[1] or byte in (_STR8, _STR16, _STR32):
            width = 0 if byte <= _FIXSTR[1] else {_STR8: 1, _STR16: 2, _STR32: 4}[byte]
            length = (byte & 0x1F if not width else
                      int.from_bytes(self.data[position + 1:min(end, position + 1 + width)], "big"))
            if length > MAX_DTYPE_NAME:
                raise ValueError(f"a string of {length:,} bytes where a dtype name belongs")
            stop = position + 1 + width + length
        elif nested and (_FIXARRAY[0] <= byte <= _FIXARRAY[1] or byte in (_ARRAY16, _ARRAY32)):
            count, stop = self._array_header(position, end)
            if count > MAX_DIMENSIONS:
                raise ValueError(f"a shape of {count:,} dimensions")
            for _ in range(count):
                stop = self._extent(stop, end, nested=False)
        else:
            raise ValueError(f"unexpected msgpack type 0x{byte:02x} at byte {position}")
        if stop > end:
            raise ValueError(f"a value at byte {position} runs past the record's end (byte {end})")
        return stop

    def _array_prefix(self, start: int, end: int, named: str) -> tuple[tuple[int, ...], dtypes.DType, int]:
        """Decode (shape, dtype name) of an array payload; the offset of its raw bytes. Reads the
        triple's header, the shape and the dtype name exactly (their extents from type bytes)."""
        try:
            count, at = self._array_header(start, end)
            if count != 3:
                raise ValueError("the record is not a (shape, dtype, bytes) triple")
            shape_end = self._extent(at, end, nested=True)
            dtype_end = self._extent(shape_end, end, nested=False)
            shape = msgpack.unpackb(self.data[at:shape_end], raw=False)
            dtype_name = msgpack.unpackb(self.data[shape_end:dtype_end], raw=False)
            bin_at = dtype_end
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise bad_input(self.path, f"{named}: not a flax array record (shape, dtype, bytes): {exc}") from None
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool)
                                                  and 0 <= d <= MAX_DIMENSION for d in shape):
            raise bad_input(self.path, f"{named}: shape {shape!r} is not a list of sizes")
        try:
            dtype = dtypes.from_name(dtype_name) if isinstance(dtype_name, str) else None
        except KeyError:
            dtype = None
        if dtype is None:
            raise bad_input(self.path, f"{named}: dtype {dtype_name!r} is not one bertconv reads "
                                       f"({', '.join(dtypes.BY_NAME)})")
        self._need(bin_at, 1, f"{named}: the bytes record")
        byte = self.data[bin_at]
        widths = {_BIN8: 1, _BIN16: 2, _BIN32: 4}
        if byte not in widths:
            raise bad_input(self.path, f"{named}: expected the array's bytes (msgpack bin), found type 0x{byte:02x}")
        length = self._uint(bin_at + 1, widths[byte], f"{named}: a bin header")
        raw = bin_at + 1 + widths[byte]
        if raw + length != end:
            raise bad_input(self.path, f"{named}: its bytes record ({length:,} bytes) does not end where the "
                                       f"array record does")
        return tuple(shape), dtype, raw


# --- writing --------------------------------------------------------------------------------


def ext_header(code: int, length: int) -> bytes:
    """The header msgpack-python packs before an ext payload of `length` bytes."""
    fixed = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}
    if length in fixed:
        return struct.pack(">Bb", fixed[length], code)
    if length <= 0xFF:
        return struct.pack(">BBb", _EXT8, length, code)
    if length <= 0xFFFF:
        return struct.pack(">BHb", _EXT16, length, code)
    return struct.pack(">BIb", _EXT32, length, code)


def bin_header(length: int) -> bytes:
    """The header msgpack-python packs before `length` bytes (use_bin_type=True)."""
    if length <= 0xFF:
        return struct.pack(">BB", _BIN8, length)
    if length <= 0xFFFF:
        return struct.pack(">BH", _BIN16, length)
    return struct.pack(">BI", _BIN32, length)


def write_file(path: Path, arrays: Sequence[tuple[tuple[str, ...], LazyTensor]], *,
               on_tensor: Callable[[int], None] | None = None) -> None:
    """Write `arrays` (key path, tensor) as `msgpack_serialize` would write their nested dict,
    streamed (`stream.append`: past the page cache for a large file, each array's bytes copied
    file to file where they are kept verbatim, else loaded ahead of the writing).

    Paths must form a tree (no path a prefix of another). Each map's keys are written in the
    order they first appear in `arrays`, as a dict built in that order keeps them.
    """
    from . import stream
    from .direct_output import open_output

    tree: dict = {}
    for keys, tensor in arrays:
        node = tree
        for key in keys[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ValueError(f"{'/'.join(keys)}: a parent is an array")
        if keys[-1] in node:
            raise ValueError(f"{'/'.join(keys)} given twice")
        node[keys[-1]] = tensor
    pieces: list[stream.Piece] = []
    encoded = bytearray()  # the headers and keys since the last array
    for piece in _pieces(msgpack.Packer(use_bin_type=True), tree, ()):
        if isinstance(piece, bytes):
            encoded += piece
        else:
            pieces += [bytes(encoded), piece]
            encoded.clear()
    pieces.append(bytes(encoded))
    with open_output(path, sum(stream.nbytes_of(piece) for piece in pieces)) as out:
        stream.append(out, pieces, on_tensor=on_tensor)


def _pieces(packer: msgpack.Packer, node, keys: tuple[str, ...]) -> Iterator[bytes | tuple]:
    """The encoding of `node` (a map, or an array at `keys`) in file order: msgpack's bytes, and
    for each array's raw bytes a `stream.TensorSource`."""
    if isinstance(node, dict):
        yield packer.pack_map_header(len(node))
        for key in node:
            yield packer.pack(key)
            yield from _pieces(packer, node[key], (*keys, key))
        return
    tensor: LazyTensor = node
    prefix = packer.pack_array_header(3) + packer.pack(list(tensor.shape)) + packer.pack(tensor.dtype.name)
    prefix += bin_header(tensor.nbytes)
    yield ext_header(EXT_NDARRAY, len(prefix) + tensor.nbytes) + prefix
    yield "/".join(keys), tensor.dtype, tuple(tensor.shape), tensor
