"""TensorFlow's "tensor bundle" checkpoint container, read and written without TensorFlow.

A bundle with prefix `P` is the files

    P.index                       an SSTable (LevelDB's table format) mapping tensor names to
                                  `BundleEntryProto`s, plus the header under the key ""
    P.data-00000-of-0000N ...     raw little-endian tensor bytes, row-major, one file per shard

SSTable layout (every integer little-endian; `varint` is protobuf's base-128 encoding):

    data block 0 | trailer | data block 1 | trailer | ... | metaindex block | trailer
    | index block | trailer | footer (48 bytes)

    block    := entry* restarts:uint32[num_restarts] num_restarts:uint32
    entry    := shared:varint32 non_shared:varint32 value_len:varint32
                key[shared:] (non_shared bytes) value (value_len bytes)
                (the key is the previous key's first `shared` bytes + key[shared:])
    trailer  := type:uint8 (0 raw, 1 snappy) masked_crc32c(block bytes + type):uint32
    index block entries: key >= every key of data block i and < every key of block i + 1,
                         value = BlockHandle(offset:varint64, size:varint64) of data block i
    footer   := metaindex BlockHandle, index BlockHandle, zero padding to 40 bytes,
                magic 0xdb4775248b80fb57 as a little-endian uint64

What TensorFlow 2.21 writes, and so what `write_bundle` writes byte for byte:
  - the .index file's blocks are raw (TF has not snappy-compressed them since 1.2; files
    from older releases, still in circulation, are compressed);
  - data blocks are cut when their size estimate reaches `TF_BLOCK_SIZE` = 262144 bytes (the
    default of tsl::table::Options; LevelDB's own default is 4096), restart interval 16;
    the index block uses restart interval 1; the metaindex block is empty;
  - index keys are LevelDB's FindShortestSeparator / FindShortSuccessor of the block
    boundaries (e.g. the last key "h" of the last block is indexed as "i");
  - the header is `num_shards: 1, version { producer: 1 }` (endianness LITTLE = 0 and
    min_consumer 0 are proto3 defaults, hence absent); entries carry dtype, shape, then shard_id,
    offset, size and the masked crc32c only when non-zero (proto3 omits zeros);
  - the data file is the tensors back to back in the order they were added, no alignment
    padding (`BundleWriter::Options::data_alignment` = 1); a TF1 `Saver` adds them in sorted
    name order, which is the order `write_bundle` uses.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Callable, Iterable, Iterator, NamedTuple

import cramjam
from google_crc32c import cext as crc32c  # the compiled implementation, or ImportError

from .. import dtypes
from ..dtypes import DType
from ..errors import bad_input
from ..lazy import lazy_module
from ..tensor import MappedTensor, check_span
from . import protowire as pw

if TYPE_CHECKING:
    import numpy as np
else:  # imported on first use: reading headers needs no NumPy
    np = lazy_module("numpy")

# SSTable (LevelDB table format) --------------------------------------------------------------
TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER_SIZE = 48
BLOCK_HANDLE_MAX_SIZE = 20  # two varint64s
FOOTER_HANDLES_SIZE = 2 * BLOCK_HANDLE_MAX_SIZE
BLOCK_TRAILER_SIZE = 5  # type byte + masked crc32c
BLOCK_TYPE_RAW = 0
BLOCK_TYPE_SNAPPY = 1
UINT32_SIZE = 4
# Snappy's densest element is a 3-byte copy of 64 bytes (21x); a block claiming more than this
# expansion is corrupt, and refusing it keeps a forged length from allocating gigabytes.
SNAPPY_MAX_EXPANSION = 32
# Prefix compression lets an entry of 3 bytes repeat a long key. Real indexes rebuild at most a
# few times their block's size in keys; a block rebuilding more is hostile, and stopping it keeps
# a small file from costing quadratic time.
KEY_EXPANSION_LIMIT = 64

# What TensorFlow's TableBuilder uses (tsl/lib/io/table_options.h, table_builder.cc).
TF_BLOCK_SIZE = 262_144
DATA_BLOCK_RESTART_INTERVAL = 16
INDEX_BLOCK_RESTART_INTERVAL = 1
OVERLY_LARGE_BLOCK_RATIO = 2  # an entry this many block sizes long gets a block of its own
COMPRESSION_MIN_SAVING_DIVISOR = 8  # keep a compressed block only if it saves >= 1/8 (12.5%)

# crc32c masking (LevelDB util/crc32c.h): rotate right by 15 bits, add a constant.
CRC_MASK_DELTA = 0xA282EAD8
CRC_MASK_ROTATION = 15
UINT32_MASK = 0xFFFFFFFF
CRC_CHUNK_BYTES = 1 << 24  # checksum and write tensors 16 MiB at a time
KEY_SHOWN_CHARS = 120  # keys in messages are clipped to this

# Tensor bundle (tensorflow/core/protobuf/tensor_bundle.proto, util/tensor_bundle).
HEADER_KEY = b""
# Slices of partitioned variables are stored under OrderedCode-encoded keys, which start with a
# zero byte (checkpoint::EncodeTensorNameSlice); the variable's name follows, ended by 00 01.
SLICE_KEY_MARKER = b"\x00"
SLICE_NAME_END = b"\x00\x01"
BUNDLE_VERSION = 1  # kTensorBundleVersion: the producer we write, the consumer we are
BUNDLE_MIN_PRODUCER = 0  # kTensorBundleMinProducer
ENDIANNESS_LITTLE = 0
ENDIANNESS_BIG = 1

HEADER_NUM_SHARDS, HEADER_ENDIANNESS, HEADER_VERSION = 1, 2, 3
VERSION_PRODUCER, VERSION_MIN_CONSUMER, VERSION_BAD_CONSUMERS = 1, 2, 3
ENTRY_DTYPE, ENTRY_SHAPE, ENTRY_SHARD_ID, ENTRY_OFFSET, ENTRY_SIZE, ENTRY_CRC32C, ENTRY_SLICES = (
    1, 2, 3, 4, 5, 6, 7)
SHAPE_DIM, SHAPE_UNKNOWN_RANK = 2, 3
DIM_SIZE = 1

# TensorFlow DataType enum (tensorflow/core/framework/types.proto).
DT_INVALID = 0
DT_STRING = 7
TF_DTYPES: dict[int, DType] = {
    1: dtypes.FLOAT32,
    2: dtypes.FLOAT64,
    3: dtypes.INT32,
    4: dtypes.UINT8,
    5: dtypes.INT16,
    6: dtypes.INT8,
    9: dtypes.INT64,
    10: dtypes.BOOL,
    14: dtypes.BFLOAT16,
    19: dtypes.FLOAT16,
}
TF_DTYPE_CODES: dict[DType, int] = {dtype: code for code, dtype in TF_DTYPES.items()}
TF_DTYPE_NAMES = {
    0: "DT_INVALID", 1: "DT_FLOAT", 2: "DT_DOUBLE", 3: "DT_INT32", 4: "DT_UINT8", 5: "DT_INT16",
    6: "DT_INT8", 7: "DT_STRING", 8: "DT_COMPLEX64", 9: "DT_INT64", 10: "DT_BOOL", 11: "DT_QINT8",
    12: "DT_QUINT8", 13: "DT_QINT32", 14: "DT_BFLOAT16", 15: "DT_QINT16", 16: "DT_QUINT16",
    17: "DT_UINT16", 18: "DT_COMPLEX128", 19: "DT_HALF", 20: "DT_RESOURCE", 21: "DT_VARIANT",
    22: "DT_UINT32", 23: "DT_UINT64",
}

DATA_FILE_PATTERN = re.compile(r"^(?P<prefix>.+)\.data-(?P<shard>\d{5})-of-(?P<shards>\d{5})$")
INDEX_SUFFIX = ".index"
CHECKPOINT_STATE_FILE = "checkpoint"
CHECKPOINT_STATE_LINE = re.compile(r'^\s*model_checkpoint_path\s*:\s*"(?P<path>(?:[^"\\]|\\.)*)"\s*$')


def tf_dtype_name(code: int) -> str:
    """"DT_FLOAT (1)" for TensorFlow DataType enum value 1."""
    return f"{TF_DTYPE_NAMES.get(code, 'unknown DataType')} ({code})"


# crc32c ---------------------------------------------------------------------------------------

def mask_crc(crc: int) -> int:
    """LevelDB's masked crc32c: stored checksums are masked so that a crc of data that itself
    holds crcs does not degenerate."""
    rotated = ((crc >> CRC_MASK_ROTATION) | (crc << (32 - CRC_MASK_ROTATION))) & UINT32_MASK
    return (rotated + CRC_MASK_DELTA) & UINT32_MASK


def unmask_crc(masked: int) -> int:
    """The inverse of `mask_crc`."""
    rotated = (masked - CRC_MASK_DELTA) & UINT32_MASK
    return ((rotated >> (32 - CRC_MASK_ROTATION)) | (rotated << CRC_MASK_ROTATION)) & UINT32_MASK


def crc32c_of_array(array: np.ndarray, crc: int = 0) -> int:
    """crc32c of a C-contiguous array's bytes, extending `crc`, CRC_CHUNK_BYTES at a time so a
    memory map is paged in piece by piece."""
    flat = array.reshape(-1).view(np.uint8)
    for start in range(0, flat.size, CRC_CHUNK_BYTES):
        crc = crc32c.extend(crc, flat[start:start + CRC_CHUNK_BYTES])
    return crc


def show_key(key: bytes) -> str:
    """A key for a message: its repr, clipped to KEY_SHOWN_CHARS characters."""
    shown = repr(key)
    return shown if len(shown) <= KEY_SHOWN_CHARS else f"{shown[:KEY_SHOWN_CHARS]}... ({len(key)} bytes)"


def _u32(data: bytes, pos: int) -> int:
    return int.from_bytes(data[pos:pos + UINT32_SIZE], "little")


# Reading the SSTable --------------------------------------------------------------------------

class BlockHandle(NamedTuple):
    """Where a block lies in the table file: its contents, without the 5-byte trailer."""

    offset: int
    size: int


def _decode_handle(data: bytes, pos: int, *, path: Path, what: str, end: int | None = None
                   ) -> tuple[BlockHandle, int]:
    offset, pos = pw.decode_varint(data, pos, source=path, entry=what, end=end)
    size, pos = pw.decode_varint(data, pos, source=path, entry=what, end=end)
    return BlockHandle(offset, size), pos


def _read_footer(data: bytes, path: Path) -> tuple[BlockHandle, BlockHandle]:
    """(metaindex handle, index handle) from the last 48 bytes of the file."""
    if len(data) < FOOTER_SIZE:
        raise bad_input(path, f"truncated index: the file has {len(data)} bytes, fewer than the "
                              f"{FOOTER_SIZE}-byte SSTable footer (not a TensorFlow checkpoint index?)")
    footer = data[-FOOTER_SIZE:]
    magic = int.from_bytes(footer[FOOTER_HANDLES_SIZE:], "little")
    if magic != TABLE_MAGIC:
        raise bad_input(path, f"bad magic 0x{magic:016x} expected 0x{TABLE_MAGIC:016x} at the end of "
                              f"the file (not a TensorFlow checkpoint index, or truncated)")
    metaindex, pos = _decode_handle(footer, 0, path=path, what="footer", end=FOOTER_HANDLES_SIZE)
    index, _ = _decode_handle(footer, pos, path=path, what="footer", end=FOOTER_HANDLES_SIZE)
    return metaindex, index


def _snappy_decompress(contents: bytes, *, path: Path, what: str) -> bytes:
    claimed, _ = pw.decode_varint(contents, 0, source=path, entry=f"{what} (snappy length)")
    if claimed > SNAPPY_MAX_EXPANSION * len(contents):
        raise bad_input(path, f"{what}: snappy block of {len(contents)} bytes claims to expand to "
                              f"{claimed} bytes, more than snappy can encode (corrupt)")
    try:
        raw = bytes(cramjam.snappy.decompress_raw(contents))
    except cramjam.DecompressionError as error:
        raise bad_input(path, f"{what}: corrupt snappy block ({error})") from None
    if len(raw) != claimed:
        raise bad_input(path, f"{what}: snappy block expanded to {len(raw)} bytes, claimed {claimed}")
    return raw


def _read_block(data: bytes, handle: BlockHandle, *, path: Path, what: str) -> bytes:
    """The contents of the block at `handle`: checked against its crc, decompressed."""
    blocks_end = len(data) - FOOTER_SIZE
    end = handle.offset + handle.size + BLOCK_TRAILER_SIZE
    if end > len(data):
        raise bad_input(path, f"truncated index: {what} at offset {handle.offset} size {handle.size} "
                              f"(+{BLOCK_TRAILER_SIZE}-byte trailer) past end of file ({len(data)} bytes)")
    if end > blocks_end:
        raise bad_input(path, f"corrupt index: {what} at offset {handle.offset} size {handle.size} "
                              f"(+{BLOCK_TRAILER_SIZE}-byte trailer) overlaps the footer at byte "
                              f"{blocks_end}")
    contents = data[handle.offset:handle.offset + handle.size]
    block_type = data[handle.offset + handle.size]
    stored = unmask_crc(_u32(data, handle.offset + handle.size + 1))
    actual = crc32c.extend(crc32c.value(contents), bytes((block_type,)))
    if actual != stored:
        raise bad_input(path, f"corrupt index: {what} at offset {handle.offset} size {handle.size} "
                              f"has crc32c 0x{actual:08x}, its trailer says 0x{stored:08x}")
    if block_type == BLOCK_TYPE_RAW:
        return contents
    if block_type == BLOCK_TYPE_SNAPPY:
        return _snappy_decompress(contents, path=path, what=what)
    raise bad_input(path, f"{what} at offset {handle.offset}: unknown block type {block_type} "
                          f"(known: 0 raw, 1 snappy)")


def _iter_block(block: bytes, *, path: Path, what: str) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of each entry of a block's contents, undoing the prefix compression."""
    if len(block) < UINT32_SIZE:
        raise bad_input(path, f"{what}: {len(block)} bytes, too short to hold its restart count")
    num_restarts = _u32(block, len(block) - UINT32_SIZE)
    max_restarts = (len(block) - UINT32_SIZE) // UINT32_SIZE
    if num_restarts > max_restarts:
        raise bad_input(path, f"{what}: claims {num_restarts} restart points, "
                              f"a block of {len(block)} bytes holds at most {max_restarts}")
    entries_end = len(block) - UINT32_SIZE * (num_restarts + 1)
    key_budget = KEY_EXPANSION_LIMIT * len(block)
    pos, key, number = 0, b"", 0
    while pos < entries_end:
        where = f"{what}, entry #{number} at byte {pos}"
        shared, pos = pw.decode_varint(block, pos, source=path, entry=where,
                                       max_bytes=pw.MAX_VARINT32_BYTES, end=entries_end)
        non_shared, pos = pw.decode_varint(block, pos, source=path, entry=where,
                                           max_bytes=pw.MAX_VARINT32_BYTES, end=entries_end)
        value_len, pos = pw.decode_varint(block, pos, source=path, entry=where,
                                          max_bytes=pw.MAX_VARINT32_BYTES, end=entries_end)
        if shared > len(key):
            raise bad_input(path, f"{where}: shares {shared} bytes with a previous key of {len(key)}")
        if non_shared + value_len > entries_end - pos:
            raise bad_input(path, f"{where}: key and value claim {non_shared} + {value_len} bytes, "
                                  f"{entries_end - pos} left in the block")
        key_budget -= shared + non_shared
        if key_budget < 0:
            raise bad_input(path, f"{where}: the block's keys expand to more than "
                                  f"{KEY_EXPANSION_LIMIT} times its size (corrupt or hostile index)")
        key = key[:shared] + block[pos:pos + non_shared]
        value = block[pos + non_shared:pos + non_shared + value_len]
        pos += non_shared + value_len
        number += 1
        yield key, value


def read_table(data: bytes, path: Path) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of an SSTable held in `data`, in key order.

    Checks the magic, every block's crc32c, that every block lies inside the file, that keys
    strictly increase, and that the index keys separate the data blocks as a seek relies on.
    """
    metaindex_handle, index_handle = _read_footer(data, path)
    for _ in _iter_block(_read_block(data, metaindex_handle, path=path, what="metaindex block"),
                         path=path, what="metaindex block"):
        pass  # TensorFlow writes it empty; LevelDB keeps filter names here. Checked, not used.
    index_block = _read_block(data, index_handle, path=path, what="index block")
    rows: list[tuple[bytes, bytes]] = []
    lower_bound: bytes | None = None  # the previous index key: every later key is above it
    for separator, handle_bytes in _iter_block(index_block, path=path, what="index block"):
        what = f"data block indexed by key {show_key(separator)}"
        handle, used = _decode_handle(handle_bytes, 0, path=path, what=f"index entry {show_key(separator)}")
        if used != len(handle_bytes):
            raise bad_input(path, f"index entry {show_key(separator)}: {len(handle_bytes) - used} stray "
                                  f"bytes after its block handle")
        block = _read_block(data, handle, path=path, what=what)
        for key, value in _iter_block(block, path=path, what=what):
            if rows and key <= rows[-1][0]:
                raise bad_input(path, f"{what}: key {show_key(key)} does not sort after {show_key(rows[-1][0])}")
            if lower_bound is not None and key <= lower_bound:
                raise bad_input(path, f"{what}: key {show_key(key)} does not sort after the previous "
                                      f"block's index key {show_key(lower_bound)}")
            if key > separator:
                raise bad_input(path, f"{what}: key {show_key(key)} sorts after the block's index key")
            rows.append((key, value))
        lower_bound = separator
    return rows


# Bundle protos --------------------------------------------------------------------------------

@dataclass(frozen=True)
class BundleHeader:
    """BundleHeaderProto: how many data shards, their byte order, the format version."""

    num_shards: int
    endianness: int
    producer: int
    min_consumer: int
    bad_consumers: tuple[int, ...]


@dataclass(frozen=True)
class BundleEntry:
    """One tensor of a bundle, as its BundleEntryProto describes it.

    `dtype` is None for strings (DT_STRING, see `BundleReader.read_string_scalar`) and for other
    TensorFlow types bertconv has no DType for (`tf_dtype` says which). `crc32c` is the unmasked
    crc32c of the tensor's bytes in the data file (TensorFlow always writes one; an absent field
    is proto3's zero, which TensorFlow reads the same way).
    """

    name: str
    dtype: DType | None
    tf_dtype: int
    shape: tuple[int, ...]
    shard_id: int
    offset: int
    size: int
    crc32c: int | None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def _varint(field: pw.Field, name: str, *, path: Path, entry: str) -> int:
    pw.require_wire_type(field, pw.WIRE_VARINT, name, source=path, entry=entry)
    return pw.as_int64(field.value)


def _message(field: pw.Field, name: str, *, path: Path, entry: str) -> memoryview:
    pw.require_wire_type(field, pw.WIRE_LEN, name, source=path, entry=entry)
    return field.value


def _repeated_varints(field: pw.Field, name: str, *, path: Path, entry: str) -> list[int]:
    """A repeated int field: one varint, or (packed) a length-delimited run of them."""
    if field.wire_type == pw.WIRE_VARINT:
        return [pw.as_int64(field.value)]
    packed = _message(field, name, path=path, entry=entry)
    values, pos = [], 0
    while pos < len(packed):
        value, pos = pw.decode_varint(packed, pos, source=path, entry=entry)
        values.append(pw.as_int64(value))
    return values


def parse_header(value: bytes, path: Path) -> BundleHeader:
    """Decode and validate the BundleHeaderProto stored under the key ""."""
    entry = "header entry"
    num_shards, endianness, version = 0, ENDIANNESS_LITTLE, bytearray()
    for field in pw.iter_fields(value, source=path, entry=entry):
        if field.number == HEADER_NUM_SHARDS:
            num_shards = _varint(field, "num_shards", path=path, entry=entry)
        elif field.number == HEADER_ENDIANNESS:
            endianness = _varint(field, "endianness", path=path, entry=entry)
        elif field.number == HEADER_VERSION:  # repeats of a message field merge: concatenate
            version += _message(field, "version", path=path, entry=entry)
    producer, min_consumer, bad_consumers = 0, 0, []
    for field in pw.iter_fields(version, source=path, entry=f"{entry}, version"):
        if field.number == VERSION_PRODUCER:
            producer = _varint(field, "producer", path=path, entry=entry)
        elif field.number == VERSION_MIN_CONSUMER:
            min_consumer = _varint(field, "min_consumer", path=path, entry=entry)
        elif field.number == VERSION_BAD_CONSUMERS:
            bad_consumers += _repeated_varints(field, "bad_consumers", path=path, entry=entry)
    if endianness == ENDIANNESS_BIG:
        raise bad_input(path, "the checkpoint was written on a big-endian machine; bertconv reads "
                              "little-endian bundles only (re-save it on a little-endian machine)")
    if endianness != ENDIANNESS_LITTLE:
        raise bad_input(path, f"{entry}: unknown endianness {endianness} (0 little, 1 big)")
    if num_shards < 1:
        raise bad_input(path, f"{entry}: num_shards is {num_shards}, expected at least 1")
    if producer < BUNDLE_MIN_PRODUCER:
        raise bad_input(path, f"{entry}: producer version {producer} is older than the oldest "
                              f"supported ({BUNDLE_MIN_PRODUCER})")
    if min_consumer > BUNDLE_VERSION:
        raise bad_input(path, f"{entry}: the bundle needs a reader of version {min_consumer} or "
                              f"newer; this one is version {BUNDLE_VERSION}")
    if BUNDLE_VERSION in bad_consumers:
        raise bad_input(path, f"{entry}: the bundle disallows readers of version {BUNDLE_VERSION}")
    return BundleHeader(num_shards, endianness, producer, min_consumer, tuple(bad_consumers))


def _parse_shape(value: bytes, *, path: Path, entry: str) -> tuple[int, ...]:
    """TensorShapeProto -> dims; refuses unknown rank and unknown (-1) dimensions."""
    dims = []
    for field in pw.iter_fields(value, source=path, entry=f"{entry}, shape"):
        if field.number == SHAPE_DIM:
            size = 0
            dim = _message(field, "dim", path=path, entry=entry)
            for dfield in pw.iter_fields(dim, source=path, entry=f"{entry}, shape dim {len(dims)}"):
                if dfield.number == DIM_SIZE:
                    size = _varint(dfield, "size", path=path, entry=entry)
            if size < 0:
                raise bad_input(path, f"{entry}: dimension {len(dims)} has size {size} (unknown); "
                                      f"a checkpoint must store fully defined shapes")
            dims.append(size)
        elif field.number == SHAPE_UNKNOWN_RANK and _varint(field, "unknown_rank", path=path, entry=entry):
            raise bad_input(path, f"{entry}: shape of unknown rank; a checkpoint must store "
                                  f"fully defined shapes")
    return tuple(dims)


def parse_entry(name: str, value: bytes, header: BundleHeader, path: Path) -> BundleEntry:
    """Decode and validate the BundleEntryProto of tensor `name`."""
    entry = f"entry {name!r}"
    tf_dtype, shard_id, offset, size, masked_crc, shape_proto = DT_INVALID, 0, 0, 0, 0, bytearray()
    for field in pw.iter_fields(value, source=path, entry=entry):
        if field.number == ENTRY_DTYPE:
            tf_dtype = _varint(field, "dtype", path=path, entry=entry)
        elif field.number == ENTRY_SHAPE:  # repeats of a message field merge: concatenate
            shape_proto += _message(field, "shape", path=path, entry=entry)
        elif field.number == ENTRY_SHARD_ID:
            shard_id = _varint(field, "shard_id", path=path, entry=entry)
        elif field.number == ENTRY_OFFSET:
            offset = _varint(field, "offset", path=path, entry=entry)
        elif field.number == ENTRY_SIZE:
            size = _varint(field, "size", path=path, entry=entry)
        elif field.number == ENTRY_CRC32C:
            pw.require_wire_type(field, pw.WIRE_FIXED32, "crc32c", source=path, entry=entry)
            masked_crc = field.value
        elif field.number == ENTRY_SLICES:
            raise bad_input(path, f"{entry} is a partitioned (sliced) variable; bertconv reads only "
                                  f"whole tensors (re-save the checkpoint without partitioning)")
    if tf_dtype == DT_INVALID:
        raise bad_input(path, f"{entry} has no dtype")
    shape = _parse_shape(bytes(shape_proto), path=path, entry=entry)
    if not 0 <= shard_id < header.num_shards:
        raise bad_input(path, f"{entry}: shard_id {shard_id}, but the bundle has "
                              f"{header.num_shards} shard(s)")
    if offset < 0 or size < 0:
        raise bad_input(path, f"{entry}: negative offset {offset} or size {size}")
    dtype = TF_DTYPES.get(tf_dtype)
    if dtype is not None and size != math.prod(shape) * dtype.itemsize:
        raise bad_input(path, f"{entry}: size is {size} bytes, but shape {list(shape)} of {dtype} "
                              f"needs {math.prod(shape) * dtype.itemsize}")
    return BundleEntry(name, dtype, tf_dtype, shape, shard_id, offset, size, unmask_crc(masked_crc))


# Reading the bundle ---------------------------------------------------------------------------

def _data_file_size(path: Path, entry: BundleEntry, index_path: Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        raise bad_input(path, f"missing data file (shard {entry.shard_id}) holding tensor "
                              f"{entry.name!r}, listed in {index_path}") from None
    except OSError as error:
        raise bad_input(path, f"cannot read data file for tensor {entry.name!r}: {error.strerror}") from None


class BundleTensor(MappedTensor):
    """A tensor of a bundle: memory-mapped from its data shard, its crc32c checked on read.

    The data file is looked at only by `read()`, so an index alone can be inspected.
    """

    def __init__(self, path: Path, entry: BundleEntry, index_path: Path):
        super().__init__(path, entry.offset, entry.dtype, entry.shape, name=entry.name,
                         verify=self._check_crc)
        self.entry = entry
        self.index_path = index_path

    def read(self) -> np.ndarray:
        size = _data_file_size(self.path, self.entry, self.index_path)
        check_span(self.path, self.entry.offset, self.entry.size, size, f"tensor {self.name!r}")
        return super().read()

    def _check_crc(self, array: np.ndarray) -> None:
        actual = crc32c_of_array(array)
        if actual != self.entry.crc32c:
            raise bad_input(self.path, f"tensor {self.name!r}: crc32c of bytes "
                                       f"{self.entry.offset}..{self.entry.offset + self.entry.size} "
                                       f"is 0x{actual:08x}, the index {self.index_path} says "
                                       f"0x{self.entry.crc32c:08x} (corrupt data file?)")


class BundleReader:
    """The tensors of the bundle at `prefix` (".../bert_model.ckpt"), from its index alone.

    Attributes:
      prefix: the bundle prefix.
      index_path: "<prefix>.index", read whole when constructed.
      header: the decoded BundleHeaderProto.
      num_shards: number of data files.
      entries: name -> BundleEntry, in key (byte) order; the header is not among them.
    """

    def __init__(self, prefix: str | Path):
        self.prefix = Path(prefix)
        self.index_path = Path(f"{prefix}{INDEX_SUFFIX}")
        try:
            data = self.index_path.read_bytes()
        except FileNotFoundError:
            raise bad_input(self.index_path, "does not exist (no TensorFlow checkpoint at this prefix)") from None
        except OSError as error:
            raise bad_input(self.index_path, f"cannot read: {error.strerror}") from None
        rows = read_table(data, self.index_path)
        if not rows or rows[0][0] != HEADER_KEY:
            raise bad_input(self.index_path, 'no header entry (key "") in the index: not a tensor bundle')
        self.header = parse_header(rows[0][1], self.index_path)
        self.num_shards = self.header.num_shards
        self.entries: dict[str, BundleEntry] = {}
        for key, value in rows[1:]:
            if key.startswith(SLICE_KEY_MARKER):
                variable = key[len(SLICE_KEY_MARKER):].split(SLICE_NAME_END)[0].decode("utf-8", "replace")
                raise bad_input(self.index_path, f"holds slices of the partitioned variable {variable!r}; "
                                                 f"bertconv reads only whole tensors (re-save the "
                                                 f"checkpoint without partitioning)")
            try:
                name = key.decode("utf-8")
            except UnicodeDecodeError:
                raise bad_input(self.index_path, f"tensor name {show_key(key)} is not UTF-8") from None
            self.entries[name] = parse_entry(name, value, self.header, self.index_path)

    def __repr__(self) -> str:
        return f"BundleReader({str(self.prefix)!r}, {len(self.entries)} entries, {self.num_shards} shard(s))"

    def data_path(self, shard_id: int) -> Path:
        """"<prefix>.data-00000-of-00001" for shard 0 of 1."""
        if not 0 <= shard_id < self.num_shards:
            raise ValueError(f"shard {shard_id} out of range: the bundle has {self.num_shards}")
        return Path(f"{self.prefix}.data-{shard_id:05d}-of-{self.num_shards:05d}")

    def entry(self, name: str) -> BundleEntry:
        """The entry of tensor `name`; `BadInput` when the index has no such tensor."""
        try:
            return self.entries[name]
        except KeyError:
            raise bad_input(self.index_path, f"no tensor named {name!r} "
                                             f"(the index has {len(self.entries)} entries)") from None

    def tensor(self, name: str) -> BundleTensor:
        """Tensor `name` as a lazy `BundleTensor` (a `MappedTensor`) of its storage dtype."""
        entry = self.entry(name)
        if entry.dtype is None:
            hint = "; read it with read_string_scalar" if entry.tf_dtype == DT_STRING else ""
            raise bad_input(self.index_path, f"tensor {name!r} has dtype {tf_dtype_name(entry.tf_dtype)}, "
                                             f"not a numeric type bertconv reads{hint}")
        return BundleTensor(self.data_path(entry.shard_id), entry, self.index_path)

    def read_string_scalar(self, name: str) -> bytes:
        """The bytes of DT_STRING scalar `name` (e.g. Keras' `_CHECKPOINTABLE_OBJECT_GRAPH`).

        On disk: varint64 length, a masked crc32c of that length (as a little-endian uint32;
        uint64 beyond 4 GiB), the string bytes. The entry's crc32c covers the length as that
        fixed-width integer, the 4 masked-crc bytes, then the string bytes.
        """
        entry = self.entry(name)
        if entry.tf_dtype != DT_STRING or entry.shape != ():
            raise bad_input(self.index_path, f"tensor {name!r} is {tf_dtype_name(entry.tf_dtype)} of "
                                             f"shape {list(entry.shape)}, not a DT_STRING scalar")
        path = self.data_path(entry.shard_id)
        check_span(path, entry.offset, entry.size, _data_file_size(path, entry, self.index_path),
                   f"tensor {name!r}")
        with open(path, "rb") as file:
            file.seek(entry.offset)
            data = file.read(entry.size)
        return _decode_string_scalar(data, entry, path)


def _decode_string_scalar(data: bytes, entry: BundleEntry, path: Path) -> bytes:
    where = f"string tensor {entry.name!r}"
    length, pos = pw.decode_varint(data, 0, source=path, entry=where)
    if len(data) - pos != UINT32_SIZE + length:
        raise bad_input(path, f"{where}: a {length}-byte string needs {pos + UINT32_SIZE + length} "
                              f"bytes, the entry's size is {len(data)}")
    width = UINT32_SIZE if length <= UINT32_MASK else 2 * UINT32_SIZE
    crc = crc32c.value(length.to_bytes(width, "little"))
    stored = _u32(data, pos)
    if unmask_crc(stored) != crc:
        raise bad_input(path, f"{where}: length checksum 0x{unmask_crc(stored):08x} does not match "
                              f"the length {length} (crc32c 0x{crc:08x})")
    raw_checksum = data[pos:pos + UINT32_SIZE]
    value = data[pos + UINT32_SIZE:]
    crc = crc32c.extend(crc32c.extend(crc, raw_checksum), value)
    if crc != entry.crc32c:
        raise bad_input(path, f"{where}: crc32c 0x{crc:08x}, the index says 0x{entry.crc32c:08x}")
    return value


# Finding a bundle -----------------------------------------------------------------------------

def _index_exists(prefix: Path) -> bool:
    return Path(f"{prefix}{INDEX_SUFFIX}").is_file()


def _prefix_from_state_file(directory: Path) -> Path | None:
    """The bundle named by `<directory>/checkpoint` if it exists here, else None.

    The state file is a text proto; its path may be relative to the directory, or absolute from
    another machine (then the bundle of the same name in `directory` is used).
    """
    state = directory / CHECKPOINT_STATE_FILE
    if not state.is_file():
        return None
    try:
        text = state.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        match = CHECKPOINT_STATE_LINE.match(line)
        if match:
            named = Path(re.sub(r"\\(.)", r"\1", match.group("path")))  # undo text-proto escapes
            for candidate in (directory / named, directory / named.name):
                if _index_exists(candidate):
                    return candidate
    return None


def _prefix_in_directory(directory: Path) -> Path:
    from_state = _prefix_from_state_file(directory)
    if from_state is not None:
        return from_state
    indexes = sorted(directory.glob(f"*{INDEX_SUFFIX}"))
    if len(indexes) == 1:
        return indexes[0].with_name(indexes[0].name[:-len(INDEX_SUFFIX)])
    if not indexes:
        raise bad_input(directory, "no TensorFlow checkpoint here (no *.index file, and no "
                                   "'checkpoint' file naming one)")
    names = ", ".join(index.name for index in indexes)
    raise bad_input(directory, f"holds {len(indexes)} checkpoints ({names}); pass the prefix of the "
                               f"one you mean, e.g. {indexes[0].with_suffix('')}")


def bundle_prefix_of(path: str | Path) -> Path | None:
    """The bundle prefix a file path (a prefix, its `.index` or a data file) names, or None when
    it names no bundle; never raises (for sniffing; `resolve_prefix` explains failures)."""
    path = Path(path)
    if path.is_dir():
        return None
    try:
        return resolve_prefix(path)
    except Exception:  # noqa: BLE001 - a sniff answers "no", the reader reports errors properly
        return None


def resolve_prefix(path: str | Path) -> Path:
    """The bundle prefix meant by `path`.

    Accepts a prefix ("x/bert_model.ckpt"), its ".index", one of its data files
    (".data-00000-of-00001"), or a directory holding a `checkpoint` state file or exactly one
    "*.index". Raises `BadInput` saying what was looked for when there is no such bundle.
    """
    path = Path(path)
    if path.is_dir():
        return _prefix_in_directory(path)
    prefix = path
    data_match = DATA_FILE_PATTERN.match(path.name)
    if data_match:
        prefix = path.with_name(data_match.group("prefix"))
    elif path.name.endswith(INDEX_SUFFIX):
        prefix = path.with_name(path.name[:-len(INDEX_SUFFIX)])
    if _index_exists(prefix):
        return prefix
    if not path.exists():
        raise bad_input(path, f"does not exist (looked for the checkpoint index {prefix}{INDEX_SUFFIX})")
    raise bad_input(path, f"is not a TensorFlow checkpoint: {prefix}{INDEX_SUFFIX} does not exist")


# Writing --------------------------------------------------------------------------------------

class _BlockBuilder:
    """Builds one SSTable block: prefix-compressed entries, then the restart array."""

    def __init__(self, restart_interval: int):
        self.restart_interval = restart_interval
        self.reset()

    def reset(self) -> None:
        self.buffer = bytearray()
        self.restarts = [0]
        self.counter = 0
        self.last_key = b""

    @property
    def empty(self) -> bool:
        return not self.buffer

    def size_estimate(self) -> int:
        """Size of the block if finished now (TensorFlow cuts blocks on this estimate)."""
        return len(self.buffer) + UINT32_SIZE * len(self.restarts) + UINT32_SIZE

    def add(self, key: bytes, value: bytes) -> None:
        shared = 0
        if self.counter < self.restart_interval:
            limit = min(len(key), len(self.last_key))
            while shared < limit and key[shared] == self.last_key[shared]:
                shared += 1
        else:
            self.restarts.append(len(self.buffer))
            self.counter = 0
        self.buffer += pw.encode_varint(shared)
        self.buffer += pw.encode_varint(len(key) - shared)
        self.buffer += pw.encode_varint(len(value))
        self.buffer += key[shared:]
        self.buffer += value
        self.last_key = key
        self.counter += 1

    def finish(self) -> bytes:
        trailer = b"".join(offset.to_bytes(UINT32_SIZE, "little") for offset in self.restarts)
        return bytes(self.buffer) + trailer + len(self.restarts).to_bytes(UINT32_SIZE, "little")


def shortest_separator(start: bytes, limit: bytes) -> bytes:
    """LevelDB's FindShortestSeparator: a short key k with start <= k < limit."""
    common = 0
    while common < min(len(start), len(limit)) and start[common] == limit[common]:
        common += 1
    if common >= min(len(start), len(limit)):
        return start  # one is a prefix of the other
    byte = start[common]
    if byte < 0xFF and byte + 1 < limit[common]:
        return start[:common] + bytes((byte + 1,))
    return start


def short_successor(key: bytes) -> bytes:
    """LevelDB's FindShortSuccessor: a short key k >= key."""
    for i, byte in enumerate(key):
        if byte != 0xFF:
            return key[:i] + bytes((byte + 1,))
    return key


class _TableBuilder:
    """Writes an SSTable exactly as TensorFlow's tsl::table::TableBuilder does."""

    def __init__(self, file: BinaryIO, *, block_size: int, compress: bool):
        self.file = file
        self.block_size = block_size
        self.compress = compress
        self.offset = 0
        self.data_block = _BlockBuilder(DATA_BLOCK_RESTART_INTERVAL)
        self.index_block = _BlockBuilder(INDEX_BLOCK_RESTART_INTERVAL)
        self.last_key = b""
        self.num_entries = 0
        self.pending_handle: BlockHandle | None = None  # written block awaiting its index key

    def add(self, key: bytes, value: bytes) -> None:
        if self.num_entries and key <= self.last_key:
            raise ValueError(f"keys must be added in increasing order: {key!r} after {self.last_key!r}")
        if self.num_entries and len(key) + len(value) >= OVERLY_LARGE_BLOCK_RATIO * self.block_size:
            self._flush()
        if self.pending_handle is not None:
            self._add_index_entry(shortest_separator(self.last_key, key))
        self.last_key = key
        self.num_entries += 1
        self.data_block.add(key, value)
        if self.data_block.size_estimate() >= self.block_size:
            self._flush()

    def finish(self) -> None:
        self._flush()
        metaindex_handle = self._write_block(_BlockBuilder(DATA_BLOCK_RESTART_INTERVAL))
        if self.pending_handle is not None:
            self._add_index_entry(short_successor(self.last_key))
        index_handle = self._write_block(self.index_block)
        handles = _encode_handle(metaindex_handle) + _encode_handle(index_handle)
        footer = handles.ljust(FOOTER_HANDLES_SIZE, b"\0") + TABLE_MAGIC.to_bytes(8, "little")
        self.file.write(footer)
        self.offset += len(footer)

    def _add_index_entry(self, key: bytes) -> None:
        self.index_block.add(key, _encode_handle(self.pending_handle))
        self.pending_handle = None

    def _flush(self) -> None:
        if not self.data_block.empty:
            self.pending_handle = self._write_block(self.data_block)

    def _write_block(self, block: _BlockBuilder) -> BlockHandle:
        raw = block.finish()
        contents, block_type = raw, BLOCK_TYPE_RAW
        if self.compress:
            compressed = bytes(cramjam.snappy.compress_raw(raw))
            if len(compressed) < len(raw) - len(raw) // COMPRESSION_MIN_SAVING_DIVISOR:
                contents, block_type = compressed, BLOCK_TYPE_SNAPPY
        block.reset()
        handle = BlockHandle(self.offset, len(contents))
        crc = crc32c.extend(crc32c.value(contents), bytes((block_type,)))
        self.file.write(contents + bytes((block_type,)) + mask_crc(crc).to_bytes(UINT32_SIZE, "little"))
        self.offset += len(contents) + BLOCK_TRAILER_SIZE
        return handle


def _encode_handle(handle: BlockHandle) -> bytes:
    return pw.encode_varint(handle.offset) + pw.encode_varint(handle.size)


def encode_header(num_shards: int = 1) -> bytes:
    """BundleHeaderProto as TensorFlow serializes it (proto3: zero fields omitted)."""
    version = pw.encode_varint_field(VERSION_PRODUCER, BUNDLE_VERSION)
    return pw.encode_varint_field(HEADER_NUM_SHARDS, num_shards) + pw.encode_len_field(HEADER_VERSION, version)


def encode_entry(tf_dtype: int, shape: tuple[int, ...], *, shard_id: int, offset: int, size: int,
                 crc32c_value: int) -> bytes:
    """BundleEntryProto as TensorFlow serializes it; `crc32c_value` unmasked."""
    dims = b"".join(pw.encode_len_field(SHAPE_DIM, pw.encode_varint_field(DIM_SIZE, d) if d else b"")
                    for d in shape)
    out = pw.encode_varint_field(ENTRY_DTYPE, tf_dtype) + pw.encode_len_field(ENTRY_SHAPE, dims)
    for number, value in ((ENTRY_SHARD_ID, shard_id), (ENTRY_OFFSET, offset), (ENTRY_SIZE, size)):
        if value:
            out += pw.encode_varint_field(number, value)
    masked = mask_crc(crc32c_value)
    if masked:
        out += pw.encode_fixed32_field(ENTRY_CRC32C, masked)
    return out


TensorSource = tuple[str, DType, tuple[int, ...], Callable[[], "np.ndarray"]]

#: `write_bundle` loads the next tensor while writing the current one when the next is at most
#: this large: the overlap uses a second core, and memory grows by at most this much.
PREFETCH_MAX_BYTES = 64 << 20


def _source_nbytes(source: TensorSource) -> int:
    _, dtype, shape, _ = source
    return math.prod(shape) * dtype.itemsize


def _little_endian_chunks(array: np.ndarray, dtype: DType) -> Iterator[np.ndarray]:
    """`array`'s bytes, row-major little-endian, as uint8 arrays of about CRC_CHUNK_BYTES:
    a contiguous little-endian array is not copied, anything else one chunk at a time."""
    if array.ndim == 0 or array.size == 0:
        yield np.ascontiguousarray(array, dtype=dtype.numpy).reshape(-1).view(np.uint8)
        return
    row_bytes = array[0].size * dtype.itemsize
    rows = max(1, CRC_CHUNK_BYTES // max(row_bytes, 1))
    for start in range(0, array.shape[0], rows):
        piece = np.ascontiguousarray(array[start:start + rows], dtype=dtype.numpy)
        yield piece.reshape(-1).view(np.uint8)


def _write_tensor(file: BinaryIO, name: str, dtype: DType, shape: tuple[int, ...],
                  array: np.ndarray) -> tuple[int, int]:
    """Append one tensor to the data file; return (bytes written, crc32c)."""
    array = np.asarray(array)
    if tuple(array.shape) != tuple(shape):
        raise ValueError(f"tensor {name!r}: declared shape {list(shape)}, got {list(array.shape)}")
    if array.dtype.newbyteorder("<") != dtype.numpy.newbyteorder("<"):
        raise ValueError(f"tensor {name!r}: declared {dtype} (stored as {dtype.storage}), "
                         f"got an array of {array.dtype}")
    size, crc = 0, 0
    for chunk in _little_endian_chunks(array, dtype):
        file.write(chunk)
        crc = crc32c.extend(crc, chunk)
        size += chunk.size
    return size, crc


def write_bundle(prefix: str | Path, tensors: Iterable[TensorSource], *, compress: bool = False,
                 block_size: int = TF_BLOCK_SIZE) -> None:
    """Write a one-shard bundle at `prefix`, byte-identical to TensorFlow 2.21's for the same
    tensors added in name order (TF1 `Saver`; `SaveV2` given sorted names).

    `tensors` yields (name, dtype, shape, load); `load()` returns the values in `dtype.storage`
    (bfloat16 as uint16 bits), any strides or byte order. Names are sorted first; each `load`
    is called once, in that order, by a helper thread, the next one while the previous array
    is written if it is at most PREFETCH_MAX_BYTES (a second core reads, checks and transposes
    while the first checksums and writes), so memory stays bounded by one tensor plus
    PREFETCH_MAX_BYTES. Writes "<prefix>.data-00000-of-00001", then "<prefix>.index".
    `compress` snappy-compresses the .index file's blocks that shrink by at least 12.5%
    (LevelDB's rule; TensorFlow reads such files, as older releases wrote them).
    """
    sources = sorted(tensors, key=lambda source: source[0].encode("utf-8"))
    for (name, *_), (next_name, *_) in zip(sources, sources[1:]):
        if name == next_name:
            raise ValueError(f"tensor name {name!r} appears twice")
    if sources and sources[0][0] == HEADER_KEY.decode():
        raise ValueError('the empty name "" is reserved for the bundle header')
    unknown = sorted({str(dtype) for _, dtype, _, _ in sources if dtype not in TF_DTYPE_CODES})
    if unknown:
        raise ValueError(f"no TensorFlow dtype for {', '.join(unknown)}")

    entries: list[tuple[bytes, bytes]] = []
    offset = 0
    from concurrent.futures import ThreadPoolExecutor  # here: reading headers needs no thread pool

    with (open(f"{prefix}.data-00000-of-00001", "wb") as data_file,
          ThreadPoolExecutor(max_workers=1, thread_name_prefix="bertconv-load") as pool):
        upcoming = pool.submit(sources[0][3]) if sources else None
        for k, (name, dtype, shape, _) in enumerate(sources):
            array = upcoming.result()
            following = sources[k + 1] if k + 1 < len(sources) else None
            upcoming = None
            if following is not None and _source_nbytes(following) <= PREFETCH_MAX_BYTES:
                upcoming = pool.submit(following[3])  # loads while this one is written
            size, crc = _write_tensor(data_file, name, dtype, tuple(shape), array)
            del array
            if upcoming is None and following is not None:
                upcoming = pool.submit(following[3])
            entry = encode_entry(TF_DTYPE_CODES[dtype], tuple(shape), shard_id=0, offset=offset,
                                 size=size, crc32c_value=crc)
            entries.append((name.encode("utf-8"), entry))
            offset += size

    with open(f"{prefix}{INDEX_SUFFIX}", "wb") as index_file:
        table = _TableBuilder(index_file, block_size=block_size, compress=compress)
        table.add(HEADER_KEY, encode_header())
        for key, value in entries:
            table.add(key, value)
        table.finish()
