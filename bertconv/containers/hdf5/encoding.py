"""HDF5's oldest file format, encoded: the structures `image.py` lays a file out from.

The format h5py writes by default (`libver="earliest"`) and Keras, tf-keras and transformers
therefore write: superblock version 0, object headers version 1, groups as symbol tables (a
version 1 B-tree of symbol nodes, names in a local heap), variable-length strings in a global heap
collection (https://docs.hdfgroup.org/hdf5/develop/_f_m_t3.html). Each function returns the bytes
of one structure; the messages are the ones HDF5 1.14 writes for h5py's calls (compared byte for
byte with h5py's files when this was written; tests/test_hdf5_image.py reads both with h5py and
compares every object). Offsets and lengths are 8 bytes, every integer little-endian, every
structure 8-byte aligned.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from ... import dtypes
from ...dtypes import DType
from .signature import HDF5_SIGNATURE
from .workarounds import GLOBAL_HEAP_MIN_SIZE, GLOBAL_HEAP_SIGNATURE, GLOBAL_HEAP_VERSION

#: "No address" (HDF5's undefined address).
UNDEFINED = 0xFFFF_FFFF_FFFF_FFFF
#: A symbol node holds up to 2 * LEAF_K names, a B-tree node up to 2 * INTERNAL_K children (HDF5's
#: defaults, which the superblock records and every reader sizes the nodes by).
LEAF_K, INTERNAL_K = 4, 16
SUPERBLOCK_BYTES = 96
LOCAL_HEAP_HEADER_BYTES = 32
BTREE_NODE_BYTES = 24 + 2 * INTERNAL_K * 16 + 8
SYMBOL_NODE_BYTES = 8 + 2 * LEAF_K * 40
GLOBAL_HEAP_HEADER_BYTES = 16
#: A vlen element in an attribute's data: length, collection address, object index.
VLEN_REFERENCE_BYTES = 16
#: A local heap with no free block (HDF5's H5HL_FREE_NULL).
NO_FREE_BLOCK = 1
#: The largest header message body (its size is a 16-bit field) and global heap object index.
MAX_MESSAGE_BYTES = 0xFFFF
MAX_HEAP_OBJECTS = 0xFFFF

# Object header message types, and the flag HDF5 sets on messages that never change.
DATASPACE, DATATYPE, FILL_VALUE, LAYOUT, ATTRIBUTE, SYMBOL_TABLE = 1, 3, 5, 8, 12, 17
CONSTANT = 0x01

#: IEEE layouts (sign bit; bit offset, precision, exponent location and size, mantissa location
#: and size, exponent bias), as HDF5 describes H5T_IEEE_F16LE, F32LE, F64LE.
_IEEE = {2: (15, (0, 16, 10, 5, 0, 10, 15)), 4: (31, (0, 32, 23, 8, 0, 23, 127)), 8: (63, (0, 64, 52, 11, 0, 52, 1023))}
#: A dataset's fill value as h5py creates it here: allocated early, never filled, default value.
_FILL_NEVER = bytes([2, 1, 1, 1, 0, 0, 0, 0])


def padded(data: bytes) -> bytes:
    """`data` with zeros up to a multiple of 8 bytes."""
    return data + bytes(-len(data) % 8)


def superblock(end_of_file: int, root_header: int, root_btree: int, root_heap: int) -> bytes:
    """Superblock version 0, with the root group's symbol table entry (its B-tree and heap cached)."""
    head = HDF5_SIGNATURE + bytes([0, 0, 0, 0, 0, 8, 8, 0]) + struct.pack("<HHI", LEAF_K, INTERNAL_K, 0)
    addresses = struct.pack("<QQQQ", 0, UNDEFINED, end_of_file, UNDEFINED)
    return head + addresses + symbol_table_entry(0, root_header, (root_btree, root_heap))


def symbol_table_entry(name_offset: int, header: int, group: tuple[int, int] | None) -> bytes:
    """An entry of a symbol node (40 bytes): a group's carries its B-tree and heap addresses."""
    cached = struct.pack("<QQ", *group) if group else bytes(16)
    return struct.pack("<QQII", name_offset, header, 1 if group else 0, 0) + cached


def object_header(messages: Sequence[tuple[int, int, bytes]]) -> bytes:
    """An object header version 1, one chunk: `messages` as (type, flags, body). ValueError for a
    body over `MAX_MESSAGE_BYTES` (h5py refuses such an attribute too: Keras splits long lists)."""
    too_long = [len(data) for _, _, data in messages if len(padded(data)) > MAX_MESSAGE_BYTES]
    if too_long:
        raise ValueError(f"an HDF5 header message of {too_long[0]} bytes; at most {MAX_MESSAGE_BYTES} fit")
    body = b"".join(struct.pack("<HHB3x", kind, len(padded(data)), flags) + padded(data) for kind, flags, data in messages)
    return struct.pack("<BBHII4x", 1, 0, len(messages), 1, len(body)) + body


def symbol_table_message(btree: int, heap: int) -> bytes:
    return struct.pack("<QQ", btree, heap)


def local_heap(address: int, names: Sequence[bytes]) -> tuple[bytes, list[int]]:
    """A local heap at `address` holding `names` after the empty name at offset 0, and each name's
    offset in it."""
    data, offsets = bytearray(8), []
    for name in names:
        offsets.append(len(data))
        data += padded(name + b"\0")
    header = b"HEAP" + struct.pack("<B3xQQQ", 0, len(data), NO_FREE_BLOCK, address + LOCAL_HEAP_HEADER_BYTES)
    return header + bytes(data), offsets


def btree_node(level: int, keys: Sequence[int], children: Sequence[int], left: int, right: int) -> bytes:
    """A group B-tree node (version 1, type 0) at `level` (0: its children are symbol nodes):
    `keys` are heap offsets of names, one more than `children`; allocated at full size."""
    node = bytearray(b"TREE" + struct.pack("<BBHQQ", 0, level, len(children), left, right))
    for key, child in zip(keys, children):
        node += struct.pack("<QQ", key, child)
    node += struct.pack("<Q", keys[-1])
    return bytes(node) + bytes(BTREE_NODE_BYTES - len(node))


def symbol_node(entries: Sequence[bytes]) -> bytes:
    """A symbol table node holding `entries` (`symbol_table_entry`s, in name order), full size."""
    node = b"SNOD" + struct.pack("<BBH", 1, 0, len(entries)) + b"".join(entries)
    return node + bytes(SYMBOL_NODE_BYTES - len(node))


def global_heap(strings: Sequence[bytes]) -> bytes:
    """A global heap collection holding `strings` as objects 1, 2, ..., its free space after them
    (at least `GLOBAL_HEAP_MIN_SIZE` bytes, as HDF5 makes one). ValueError for more strings than
    an object index can number."""
    if len(strings) > MAX_HEAP_OBJECTS:
        raise ValueError(f"{len(strings)} variable-length strings; one heap collection numbers {MAX_HEAP_OBJECTS}")
    objects = b"".join(struct.pack("<HH4xQ", index, 0, len(s)) + padded(s) for index, s in enumerate(strings, 1))
    size = global_heap_bytes(strings)
    free = size - GLOBAL_HEAP_HEADER_BYTES - len(objects)
    head = GLOBAL_HEAP_SIGNATURE + struct.pack("<B3xQ", GLOBAL_HEAP_VERSION, size)
    return head + objects + struct.pack("<HH4xQ", 0, 0, free) + bytes(free - 16)


def global_heap_bytes(strings: Sequence[bytes]) -> int:
    used = GLOBAL_HEAP_HEADER_BYTES + sum(16 + len(padded(s)) for s in strings) + 16  # and the free object
    return max(GLOBAL_HEAP_MIN_SIZE, used)


# --- datatypes and dataspaces (as HDF5 encodes them: version 1) ---------------------------------


def dataspace(shape: Sequence[int]) -> bytes:
    """A scalar (shape ()) or simple dataspace, its maximum the shape itself (as h5py makes one)."""
    if not shape:
        return struct.pack("<BBBB4x", 1, 0, 0, 0)
    dims = struct.pack(f"<{len(shape)}Q", *shape)
    return struct.pack("<BBBB4x", 1, len(shape), 1, 0) + dims + dims


def numeric_type(dtype: DType) -> bytes:
    """The datatype of a dataset of `dtype`: IEEE floats, integers, and bfloat16 as 2-byte opaque
    data (how h5py stores the ml_dtypes arrays Keras 3 hands it). ValueError for bool."""
    if dtype is dtypes.BFLOAT16:
        return struct.pack("<BBBBI", 0x15, 0, 0, 0, 2)
    if dtype is dtypes.BOOL:
        raise ValueError("bool datasets are not written (HDF5 would store an enum)")
    size = dtype.itemsize
    if dtype.is_float:
        sign, layout = _IEEE[size]
        return struct.pack("<BBBBI", 0x11, 0x20, sign, 0, size) + struct.pack("<HHBBBBI", *layout)
    signed = dtype.storage[1] == "i"
    return struct.pack("<BBBBI", 0x10, 0x08 if signed else 0, 0, 0, size) + struct.pack("<HH", 0, 8 * size)


def vlen_string_type(utf8: bool) -> bytes:
    """A variable-length string (null-terminated), its characters 1-byte integers."""
    base = struct.pack("<BBBBIHH", 0x10, 0, 0, 0, 1, 0, 8)
    return struct.pack("<BBBBI", 0x19, 0x01, 0x01 if utf8 else 0, 0, VLEN_REFERENCE_BYTES) + base


def fixed_string_type(length: int) -> bytes:
    """A fixed-length ASCII string padded with zeros (how h5py stores NumPy's `S` arrays)."""
    return struct.pack("<BBBBI", 0x13, 0x01, 0, 0, length)


def float64_type() -> bytes:
    return numeric_type(dtypes.FLOAT64)


def vlen_reference(length: int, collection: int, index: int) -> bytes:
    return struct.pack("<IQI", length, collection, index)


def attribute_message(name: bytes, datatype: bytes, space: bytes, data: bytes) -> bytes:
    """An attribute message version 1 (name, datatype and dataspace each padded to 8 bytes)."""
    head = struct.pack("<BBHHH", 1, 0, len(name) + 1, len(datatype), len(space))
    return head + padded(name + b"\0") + padded(datatype) + padded(space) + data


def dataset_messages(shape: Sequence[int], datatype: bytes, address: int, nbytes: int) -> list[tuple[int, int, bytes]]:
    """A contiguous dataset's messages (attributes apart): its values at `address`, `nbytes` long
    (no address for none), allocated early and never filled by HDF5, no time recorded."""
    layout = struct.pack("<BBQQ", 3, 1, address if nbytes else UNDEFINED, nbytes)
    return [(DATASPACE, 0, dataspace(shape)), (DATATYPE, CONSTANT, datatype), (FILL_VALUE, CONSTANT, _FILL_NEVER),
            (LAYOUT, CONSTANT, layout)]
