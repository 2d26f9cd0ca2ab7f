"""LevelDB's table format (SSTable), read and written: the container of TensorFlow's checkpoint
index (`containers/tensorflow/bundle.py` keeps its tensor entries in one).

Layout (every integer little-endian; `varint` is protobuf's base-128 encoding):

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

What TensorFlow 2.21's TableBuilder writes, and so what `TableBuilder` writes byte for byte:
  - raw blocks (TF has not snappy-compressed them since 1.2; files from older releases, still in
    circulation, are compressed);
  - data blocks are cut when their size estimate reaches `TF_BLOCK_SIZE` = 262144 bytes (the
    default of tsl::table::Options; LevelDB's own default is 4096), restart interval 16;
    the index block uses restart interval 1; the metaindex block is empty;
  - index keys are LevelDB's FindShortestSeparator / FindShortSuccessor of the block
    boundaries (e.g. the last key "h" of the last block is indexed as "i").
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterator
from pathlib import Path

from google_crc32c import cext as crc32c  # the compiled implementation, or ImportError

from ...errors import bad_input
from ...lazy import lazy_module
from . import protowire as pw

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import BinaryIO

    import cramjam
else:  # imported on first use: an uncompressed table (what bertconv writes) needs no snappy
    cramjam = lazy_module("cramjam")

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
KEY_SHOWN_CHARS = 120  # keys in messages are clipped to this


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


def show_key(key: bytes) -> str:
    """A key for a message: its repr, clipped to KEY_SHOWN_CHARS characters."""
    shown = repr(key)
    return shown if len(shown) <= KEY_SHOWN_CHARS else f"{shown[:KEY_SHOWN_CHARS]}... ({len(key)} bytes)"


def read_uint32(data: bytes, pos: int) -> int:
    """The little-endian uint32 at byte `pos` of `data`."""
    return int.from_bytes(data[pos:pos + UINT32_SIZE], "little")


# Reading the SSTable --------------------------------------------------------------------------

class BlockHandle(namedtuple("BlockHandle", ("offset", "size"))):
    """Where a block lies in the table file (`offset` and `size`, ints): its contents, without
    the 5-byte trailer."""

    __slots__ = ()


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
    stored = unmask_crc(read_uint32(data, handle.offset + handle.size + 1))
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
    num_restarts = read_uint32(block, len(block) - UINT32_SIZE)
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


class TableBuilder:
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
