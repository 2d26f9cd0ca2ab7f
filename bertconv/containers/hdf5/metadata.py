"""An HDF5 file's groups, attributes and datasets, read by bertconv itself: no h5py, no NumPy.

h5py's import (with NumPy's) and HDF5's calls per object cost an `audit` of a Keras file about
ten times Python's own start-up. Keras, tf-keras and transformers write their weights files with
HDF5's oldest file format (h5py's default, `libver="earliest"`), which is small and documented
(https://docs.hdfgroup.org/hdf5/develop/_f_m_t3.html), so that is what this module reads:

    superblock version 0 or 1 at byte 0       object headers version 1 (no checksums)
    groups with a symbol table (B-tree version 1 of symbol nodes, names in a local heap),
      or with link messages (compact links), hard links only
    attributes in the object header: integers, floats, fixed- and variable-length strings
      (the latter in global heap collections)
    datasets of little-endian integers, IEEE floats and Keras 3's 2-byte opaque bfloat16,
      stored contiguously in this file

Anything else raises `Unsupported`, as does any inconsistency, and the caller reads the file
with h5py instead (`nodes.read_with`), which is also what reports on a damaged file: this reader
only ever answers for a file it understands entirely. The whole tree is parsed at once, through
`pread` (a few KiB of a multi-GB file), and no dataset's bytes are read.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from ... import dtypes
from ...dtypes import DType
from .objects import Dataset, Group, Node, Unsupported
from .signature import HDF5_SIGNATURE
from .workarounds import GLOBAL_HEAP_MIN_SIZE, GLOBAL_HEAP_SIGNATURE, GLOBAL_HEAP_VERSION

#: The most objects (groups and datasets) and messages a file may hold before it is judged
#: implausible and left to h5py: a BERT-large Keras file holds about 800 objects.
MAX_OBJECTS = 1_000_000
MAX_MESSAGES_PER_OBJECT = 65_536


def read_tree(path: Path) -> Group:
    """The root group of the HDF5 file at `path`, every object below it parsed. `Unsupported`
    for a file this reader does not read entirely (see the module docstring); OSError as `open`."""
    with open(path, "rb", buffering=0) as f:
        try:
            return _Parser(f.fileno(), os.fstat(f.fileno()).st_size).root()
        except (struct.error, IndexError, ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise Unsupported(f"{type(exc).__name__}: {exc}") from None


# --- the parser ----------------------------------------------------------------------------------

# Object header message types (the specification's IV.A.2).
_NIL, _DATASPACE, _LINK_INFO, _DATATYPE, _FILL_OLD, _FILL, _LINK, _EXTERNAL = 0, 1, 2, 3, 4, 5, 6, 7
_LAYOUT, _GROUP_INFO, _FILTERS, _ATTRIBUTE, _CONTINUATION, _SYMBOL_TABLE = 8, 10, 11, 12, 16, 17
_ATTRIBUTE_INFO = 21
#: Messages that say nothing about the values read here (times, comments, B-tree sizes, ...).
_IGNORED = {_NIL, _FILL_OLD, _FILL, _GROUP_INFO, 13, 14, 18, 19, 20, 22, 23}
#: A header message's flag: its data is shared (stored elsewhere).
_SHARED = 0x02
#: Metadata is read a page at a time.
_PAGE = 4096
#: A version 1 object header's first 16 bytes: version, (reserved), message count, (reference
#: count), header size, (padding); then each message's type, size and flags (then 3 reserved bytes).
_HEADER_PREFIX = struct.Struct("<BxH4xI4x")
_MESSAGE_HEAD = struct.Struct("<HHB3x")

# Datatype classes.
_FIXED_POINT, _FLOAT, _STRING, _OPAQUE, _VLEN = 0, 1, 3, 5, 9
#: IEEE layouts by size: bit offset, precision, exponent location and size, mantissa location
#: and size, exponent bias.
_IEEE = {2: (0, 16, 10, 5, 0, 10, 15), 4: (0, 32, 23, 8, 0, 23, 127), 8: (0, 64, 52, 11, 0, 52, 1023)}
_FLOATS = {2: dtypes.FLOAT16, 4: dtypes.FLOAT32, 8: dtypes.FLOAT64}
_SIGNED = {1: dtypes.INT8, 2: dtypes.INT16, 4: dtypes.INT32, 8: dtypes.INT64}
_STRUCT_FLOATS = {2: "<e", 4: "<f", 8: "<d"}
_UINTS = {2: "H", 4: "I", 8: "Q"}
_STRUCT_INTS = {(1, True): "b", (2, True): "h", (4, True): "i", (8, True): "q",
                (1, False): "B", (2, False): "H", (4, False): "I", (8, False): "Q"}
#: What Keras 3 writes for bfloat16: 2-byte opaque data with this attribute.
_BFLOAT16_ATTR = ("dtype", "bfloat16")


class _Type:
    """A parsed datatype: `kind` is "int", "float", "string", "vlen-string" or "opaque"."""

    def __init__(self, kind: str, size: int, *, signed: bool = False, padding: int = 0):
        self.kind, self.size, self.signed, self.padding = kind, size, signed, padding


class _Parser:
    def __init__(self, fd: int, size: int):
        self.fd, self.size = fd, size
        self.objects: dict[int, Node] = {}
        self.heaps: dict[int, dict[int, bytes]] = {}
        self.pages: dict[int, bytes] = {}
        self.types: dict[bytes, _Type] = {}

    # raw reads

    def read(self, address: int, n: int) -> bytes:
        if address + n > self.size or address < 0 or n < 0:
            raise Unsupported(f"bytes {address}..{address + n} lie outside the file ({self.size} bytes)")
        start = address % _PAGE
        if start + n > _PAGE:
            data = os.pread(self.fd, n, address)
            if len(data) != n:
                raise Unsupported(f"short read at {address}")
            return data
        # HDF5 packs metadata in 2 KiB blocks: a bert-base file's 2400 reads lie in 200 pages.
        block = self.pages.get(address - start)
        if block is None:
            block = self.pages[address - start] = os.pread(self.fd, _PAGE, address - start)
            if len(block) != _PAGE and len(block) != self.size - (address - start):
                raise Unsupported(f"short read at {address}")
        return block[start:start + n]

    def uint(self, data: bytes, pos: int, n: int) -> int:
        return int.from_bytes(data[pos:pos + n], "little")

    def length(self, data: bytes, pos: int) -> int:
        """The length (HDF5's "size of lengths" bytes) at `pos` of `data`."""
        return self.length_at(data, pos)[0]

    def address(self, data: bytes, pos: int) -> int | None:
        """The address at `pos` of `data`, None for HDF5's undefined address (all bits set)."""
        value = self.address_at(data, pos)[0]
        return None if value == self.undefined else value

    # the superblock

    def root(self) -> Group:
        head = self.read(0, 24)
        if head[:8] != HDF5_SIGNATURE:
            raise Unsupported("no HDF5 signature at byte 0 (a user block?)")
        version = head[8]
        if version not in (0, 1):
            raise Unsupported(f"superblock version {version}")
        self.o, self.l = head[13], head[14]
        if self.o not in _UINTS or self.l not in _UINTS:
            raise Unsupported(f"sizes of offsets and lengths {self.o}, {self.l}")
        self.address_at = struct.Struct("<" + _UINTS[self.o]).unpack_from
        self.length_at = struct.Struct("<" + _UINTS[self.l]).unpack_from
        self.undefined = (1 << 8 * self.o) - 1
        #: A symbol table entry: the name's offset in the heap, the object header's address,
        #: the cache type (then 4 reserved bytes and 16 of scratch pad).
        self.entry = struct.Struct(f"<{_UINTS[self.o] * 2}I20x")
        #: A variable-length string's reference: its length, global heap collection and index there.
        self.vlen_entry = struct.Struct(f"<I{_UINTS[self.o]}I")
        pos = 24 + (4 if version == 1 else 0)
        block = self.read(pos, 4 * self.o + 2 * self.o + 24)
        if self.address(block, 0) != 0:
            raise Unsupported("a base address other than 0")
        root_header = self.address(block, 4 * self.o + self.o)
        if root_header is None:
            raise Unsupported("no root group")
        root = self.object(root_header, "/")
        if not isinstance(root, Group):
            raise Unsupported("the root object is not a group")
        for node in self.objects.values():
            if isinstance(node, Group):
                node.root = root
        return root

    # object headers

    def messages(self, address: int) -> list[tuple[int, bytes]]:
        """The messages of the version 1 object header at `address` that say something read
        here: (type, data)."""
        version, count, length = _HEADER_PREFIX.unpack(self.read(address, _HEADER_PREFIX.size))
        if version != 1:
            raise Unsupported(f"object header version {version} at {address}")
        blocks = [(address + _HEADER_PREFIX.size, length)]
        found: list[tuple[int, bytes]] = []
        seen = 0
        while blocks:
            start, length = blocks.pop(0)
            data = self.read(start, length)
            pos = 0
            while pos + 8 <= length:
                kind, size, flags = _MESSAGE_HEAD.unpack_from(data, pos)
                end = pos + 8 + size
                if end > length:
                    raise Unsupported(f"a message overruns its header at {address}")
                if flags & _SHARED:
                    raise Unsupported(f"a shared message at {address}")
                if kind == _CONTINUATION:
                    target, span = self.address(data, pos + 8), self.length(data, pos + 8 + self.o)
                    if target is None or size < self.o + self.l:
                        raise Unsupported(f"a continuation to nowhere at {address}")
                    blocks.append((target, span))
                elif kind not in _IGNORED:
                    found.append((kind, data[pos + 8:end]))
                pos = end
                seen += 1
            if seen > MAX_MESSAGES_PER_OBJECT:
                raise Unsupported(f"too many messages at {address}")
        if seen != count:
            raise Unsupported(f"object header at {address} claims {count} messages, holds {seen}")
        return found

    def object(self, address: int, name: str) -> Node:
        """The group or dataset whose header is at `address`, parsed once however often linked."""
        if address in self.objects:
            return self.objects[address]
        if len(self.objects) >= MAX_OBJECTS:
            raise Unsupported("too many objects")
        attrs: dict[str, object] = {}
        found: dict[int, bytes] = {}
        links: list[bytes] = []
        new_style = False  # a group whose links are link messages (a link info message says so)
        for kind, body in self.messages(address):
            if kind == _ATTRIBUTE:
                key, value = self.attribute(body)
                if key in attrs:
                    raise Unsupported(f"attribute {key!r} twice at {address}")
                attrs[key] = value
            elif kind == _LINK:
                links.append(body)
            elif kind == _LINK_INFO or kind == _ATTRIBUTE_INFO:
                self.check_compact(kind, body)
                new_style = new_style or kind == _LINK_INFO
            elif kind in (_DATASPACE, _DATATYPE, _LAYOUT, _FILTERS, _SYMBOL_TABLE) and kind not in found:
                found[kind] = body
            else:
                raise Unsupported(f"header message type {kind} at {address}")
        if _LAYOUT in found:
            if links or _SYMBOL_TABLE in found:
                raise Unsupported(f"an object both dataset and group at {address}")
            node = self.dataset(name, attrs, found)
            self.objects[address] = node
            return node
        if _DATATYPE in found or _DATASPACE in found:
            raise Unsupported(f"a committed datatype or an incomplete dataset at {address}")
        if (_SYMBOL_TABLE in found) == bool(links or new_style):
            raise Unsupported(f"an object at {address} that is not one kind of group (symbol table or links)")
        group = Group(name, attrs)
        self.objects[address] = group
        named = self.symbol_table(found[_SYMBOL_TABLE]) if _SYMBOL_TABLE in found else [
            self.link(body) for body in links]
        prefix = "" if name == "/" else name
        for link_name, target in sorted(named, key=lambda item: item[0]):
            text = link_name.decode("utf-8")
            if text in group.links or not text or "/" in text:
                raise Unsupported(f"link name {text!r} in {name}")
            group.links[text] = self.object(target, f"{prefix}/{text}")
        return group

    def check_compact(self, kind: int, body: bytes) -> None:
        """Link info and attribute info messages: only compact storage (no fractal heap) is read."""
        flags = body[1]
        pos = 2 + (8 if kind == _LINK_INFO and flags & 1 else 0) + (2 if kind == _ATTRIBUTE_INFO and flags & 1 else 0)
        if self.address(body, pos) is not None:
            raise Unsupported("links or attributes in dense storage (a fractal heap)")

    # groups

    def link(self, body: bytes) -> tuple[bytes, int]:
        """A link message: (name, object header address) of a hard link."""
        if body[0] != 1:
            raise Unsupported(f"link message version {body[0]}")
        flags, pos = body[1], 2
        link_type = 0
        if flags & 0x08:
            link_type, pos = body[pos], pos + 1
        if flags & 0x04:
            pos += 8
        if flags & 0x10:
            pos += 1
        width = 1 << (flags & 0x03)
        length = self.uint(body, pos, width)
        pos += width
        name = body[pos:pos + length]
        if link_type != 0:
            raise Unsupported(f"a soft or external link {name!r}")
        target = self.address(body, pos + length)
        if len(name) != length or target is None:
            raise Unsupported("a truncated link message")
        return name, target

    def symbol_table(self, body: bytes) -> list[tuple[bytes, int]]:
        """The (name, object header address) entries of a symbol-table group."""
        btree, heap_address = self.address(body, 0), self.address(body, self.o)
        if btree is None or heap_address is None:
            raise Unsupported("a symbol table without its B-tree or heap")
        heap = self.read(heap_address, 8 + 2 * self.l + self.o)
        if heap[:4] != b"HEAP" or heap[4] != 0:
            raise Unsupported(f"no local heap at {heap_address}")
        segment_size = self.length(heap, 8)
        segment_at = self.address(heap, 8 + 2 * self.l)
        segment = self.read(segment_at, segment_size) if segment_size else b""
        entries: list[tuple[bytes, int]] = []
        self.btree_node(btree, segment, entries, set())
        return entries

    def btree_node(self, address: int, names: bytes, entries: list, visited: set[int]) -> None:
        if address in visited:
            raise Unsupported(f"a B-tree that loops at {address}")
        visited.add(address)
        head = self.read(address, 8 + 2 * self.o)
        if head[:4] != b"TREE" or head[4] != 0:
            raise Unsupported(f"no group B-tree node at {address}")
        level, used = head[5], self.uint(head, 6, 2)
        body = self.read(address + 8 + 2 * self.o, self.l + used * (self.o + self.l))
        for index in range(used):  # keys and children alternate, a key first
            child = self.address(body, self.l + index * (self.o + self.l))
            if child is None:
                raise Unsupported(f"a B-tree child to nowhere at {address}")
            if level > 0:
                self.btree_node(child, names, entries, visited)
            else:
                self.symbol_node(child, names, entries)

    def symbol_node(self, address: int, names: bytes, entries: list) -> None:
        head = self.read(address, 8)
        if head[:4] != b"SNOD" or head[4] != 1:
            raise Unsupported(f"no symbol table node at {address}")
        count = self.uint(head, 6, 2)
        for name_at, target, cache_type in self.entry.iter_unpack(self.read(address + 8, count * self.entry.size)):
            if cache_type == 2:
                raise Unsupported("a soft link in a symbol table")
            end = names.find(b"\0", name_at)
            if target == self.undefined or end < 0:
                raise Unsupported(f"a symbol table entry out of its heap at {address}")
            entries.append((names[name_at:end], target))

    # datasets

    def dataset(self, name: str, attrs: dict[str, object], found: dict[int, bytes]) -> Dataset:
        if _DATATYPE not in found or _DATASPACE not in found:
            raise Unsupported(f"dataset {name} without a datatype or dataspace")
        if _FILTERS in found and found[_FILTERS][1] > 0:
            raise Unsupported(f"dataset {name} is filtered")
        shape = self.dataspace(found[_DATASPACE])
        stored = self.datatype(found[_DATATYPE])
        dtype = _tensor_dtype(stored, attrs)
        if shape is None or dtype is None:
            raise Unsupported(f"dataset {name}: no shape or a datatype bertconv does not map")
        layout = found[_LAYOUT]
        if layout[0] not in (3, 4) or layout[1] != 1:
            raise Unsupported(f"dataset {name} is not contiguous (layout {layout[0]}, class {layout[1]})")
        stored_bytes, nbytes = self.length(layout, 2 + self.o), dtype.itemsize
        for dim in shape:
            nbytes *= dim
        if stored_bytes != nbytes:
            raise Unsupported(f"dataset {name} stores {stored_bytes} bytes for a shape of {nbytes}")
        return Dataset(name, attrs, shape, dtype, self.address(layout, 2))

    def dataspace(self, body: bytes) -> tuple[int, ...] | None:
        """A shape; None for a null dataspace."""
        version, rank, flags = body[0], body[1], body[2]
        if version == 1:
            pos = 8
        elif version == 2:
            pos = 4
            if body[3] == 2:
                return None
        else:
            raise Unsupported(f"dataspace version {version}")
        dims = struct.unpack_from(f"<{rank}{_UINTS[self.l]}", body, pos)
        if len(body) < pos + rank * self.l * (2 if flags & 1 else 1):
            raise Unsupported("a truncated dataspace")
        return dims

    def datatype(self, body: bytes) -> _Type:
        """The datatype message `body`, parsed once per file: a Keras file's hundreds of datasets
        and attributes hold a handful of datatypes."""
        parsed = self.types.get(body)
        if parsed is None:
            parsed = self.types[body] = self._parse_datatype(body)
        return parsed

    def _parse_datatype(self, body: bytes) -> _Type:
        cls, version = body[0] & 0x0F, body[0] >> 4
        bits, size = self.uint(body, 1, 3), self.uint(body, 4, 4)
        props = body[8:]
        if version not in (1, 2, 3):
            raise Unsupported(f"datatype version {version}")
        if cls == _FIXED_POINT and not bits & 1 and size in _SIGNED and props[:4] == struct.pack("<HH", 0, 8 * size):
            return _Type("int", size, signed=bool(bits & 0x08))
        if cls == _FLOAT and not bits & 0x4F and (bits >> 4) & 3 == 2 and size in _IEEE:
            layout = struct.unpack_from("<HHBBBBI", props)
            if layout == _IEEE[size]:
                return _Type("float", size)
        if cls == _STRING and (bits & 0x0F) in (0, 1):
            return _Type("string", size, padding=bits & 0x0F)
        if cls == _OPAQUE:
            return _Type("opaque", size)
        if cls == _VLEN and (bits & 0x0F) == 1:
            return _Type("vlen-string", 4 + self.o + 4)
        raise Unsupported(f"datatype class {cls} (bits {bits:#x}, size {size})")

    # attributes

    def attribute(self, body: bytes) -> tuple[str, object]:
        """An attribute message: its name and its value as h5py gives it (str for a variable-length
        string, bytes for a fixed-length one, int or float), a list for any non-scalar shape."""
        version = body[0]
        if version not in (1, 2, 3) or version > 1 and body[1] & 0x03:
            raise Unsupported(f"attribute message version {version} (or a shared datatype)")
        name_size, type_size, space_size = struct.unpack_from("<HHH", body, 2)

        def pad(n: int) -> int:
            return (n + 7) & ~7 if version == 1 else n

        pos = 8 if version == 1 else 8 if version == 2 else 9
        name = body[pos:pos + name_size].rstrip(b"\0").decode("utf-8")
        pos += pad(name_size)
        stored = self.datatype(body[pos:pos + type_size])
        pos += pad(type_size)
        shape = self.dataspace(body[pos:pos + space_size])
        pos += pad(space_size)
        if shape is None:
            raise Unsupported(f"attribute {name!r} has a null dataspace")
        count = 1
        for dim in shape:
            count *= dim
        data = body[pos:pos + count * stored.size]
        if len(data) != count * stored.size:
            raise Unsupported(f"attribute {name!r} holds fewer bytes than its shape needs")
        if stored.kind == "vlen-string":  # Keras' weight_names: hundreds of them in one attribute
            values = [self.vlen_string(*entry) for entry in self.vlen_entry.iter_unpack(data)]
        else:
            values = [self.value(stored, data, i * stored.size) for i in range(count)]
        return name, values if shape else values[0]

    def value(self, stored: _Type, data: bytes, pos: int) -> object:
        """The fixed-size value at `pos` of `data` (variable-length strings: `vlen_string`)."""
        if stored.kind == "int":
            return struct.unpack_from("<" + _STRUCT_INTS[stored.size, stored.signed], data, pos)[0]
        if stored.kind == "float":
            return struct.unpack_from(_STRUCT_FLOATS[stored.size], data, pos)[0]
        if stored.kind == "string":
            raw = data[pos:pos + stored.size]
            return raw.split(b"\0", 1)[0] if stored.padding == 0 else raw.rstrip(b"\0")
        raise Unsupported(f"an attribute of {stored.kind} data")

    def vlen_string(self, length: int, collection: int, index: int) -> str:
        """A variable-length string: `length` bytes of object `index` of the global heap
        collection at `collection`."""
        if length == 0:
            return ""
        if collection == self.undefined:
            raise Unsupported("a variable-length string with no heap")
        raw = self.global_heap(collection).get(index)
        if raw is None or len(raw) < length:
            raise Unsupported(f"a variable-length string missing from the heap at {collection}")
        return raw[:length].decode("utf-8")

    def global_heap(self, address: int) -> dict[int, bytes]:
        """The objects of the global heap collection at `address`, by index, walked as HDF5 walks
        it (`workarounds.check_global_heaps`): one HDF5 would not step over is left to that check."""
        if address in self.heaps:
            return self.heaps[address]
        head = self.read(address, 8 + self.l)
        size = self.length(head, 8)
        if head[:4] != GLOBAL_HEAP_SIGNATURE or head[4] != GLOBAL_HEAP_VERSION or size < GLOBAL_HEAP_MIN_SIZE:
            raise Unsupported(f"no global heap collection at {address}")
        data = self.read(address, size)
        objects: dict[int, bytes] = {}
        pos = 8 + self.l
        while pos + 8 + self.l <= size:
            index, length = self.uint(data, pos, 2), self.length(data, pos + 8)
            step = length if index == 0 else 8 + self.l + ((length + 7) & ~7)
            if step == 0 or (index != 0 and pos + 8 + self.l + length > size):
                raise Unsupported(f"a global heap object HDF5 cannot step over at {address + pos}")
            if index != 0:
                objects[index] = data[pos + 8 + self.l:pos + 8 + self.l + length]
            pos += step
        self.heaps[address] = objects
        return objects


def _tensor_dtype(stored: _Type, attrs: dict[str, object]) -> DType | None:
    """The tensor dtype of a dataset's stored type; None for one bertconv does not map here."""
    if stored.kind == "float":
        return _FLOATS[stored.size]
    if stored.kind == "int":
        return _SIGNED[stored.size] if stored.signed else dtypes.UINT8 if stored.size == 1 else None
    if stored.kind == "opaque" and stored.size == 2 and attrs.get(_BFLOAT16_ATTR[0]) == _BFLOAT16_ATTR[1]:
        return dtypes.BFLOAT16
    return None
