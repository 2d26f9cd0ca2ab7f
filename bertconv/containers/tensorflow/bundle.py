"""TensorFlow's "tensor bundle" checkpoint container, read and written without TensorFlow.

A bundle with prefix `P` is the files

    P.index                       an SSTable (LevelDB's table format, `containers/tensorflow/sstable.py`)
                                  mapping tensor names to `BundleEntryProto`s, plus the header
                                  under the key ""
    P.data-00000-of-0000N ...     raw little-endian tensor bytes, row-major, one file per shard

Which prefix a path names (a prefix, its files, a directory with a `checkpoint` state file) is
`containers/tensorflow/prefix.py`'s business.

What TensorFlow 2.21 writes, and so what `write_bundle` writes byte for byte:
  - the .index file as its TableBuilder writes it (see `containers/tensorflow/sstable.py`);
  - the header is `num_shards: 1, version { producer: 1 }` (endianness LITTLE = 0 and
    min_consumer 0 are proto3 defaults, hence absent); entries carry dtype, shape, then shard_id,
    offset, size and the masked crc32c only when non-zero (proto3 omits zeros);
  - the data file is the tensors back to back in the order they were added, no alignment
    padding (`BundleWriter::Options::data_alignment` = 1); a TF1 `Saver` adds them in sorted
    name order, which is the order `write_bundle` uses.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType

from google_crc32c import cext as crc32c  # the compiled implementation, or ImportError

from ... import dtypes
from ...dtypes import DType
from ...errors import bad_input
from ...lazy import lazy_module
from ...records import record
from ...tensor import MappedTensor, check_span
from . import protowire as pw
from .prefix import INDEX_SUFFIX
from .sstable import UINT32_MASK, UINT32_SIZE, read_table, read_uint32, show_key, unmask_crc

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    import numpy as np
else:  # imported on first use: reading headers needs no NumPy
    np = lazy_module("numpy")

CRC_CHUNK_BYTES = 1 << 24  # checksum and write tensors 16 MiB at a time

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


def tf_dtype_name(code: int) -> str:
    """"DT_FLOAT (1)" for TensorFlow DataType enum value 1."""
    return f"{TF_DTYPE_NAMES.get(code, 'unknown DataType')} ({code})"


def crc32c_of_array(array: np.ndarray, crc: int = 0) -> int:
    """crc32c of a C-contiguous array's bytes, extending `crc`, CRC_CHUNK_BYTES at a time so a
    memory map is paged in piece by piece."""
    flat = array.reshape(-1).view(np.uint8)
    for start in range(0, flat.size, CRC_CHUNK_BYTES):
        crc = crc32c.extend(crc, flat[start:start + CRC_CHUNK_BYTES])
    return crc


# Bundle protos --------------------------------------------------------------------------------

@record
class BundleHeader:
    """BundleHeaderProto: how many data shards, their byte order, the format version."""

    num_shards: int
    endianness: int
    producer: int
    min_consumer: int
    bad_consumers: tuple[int, ...]


@record
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
        self._check_data_file()
        return super().read()

    def checked_copy_span(self) -> tuple[Path, int, Callable[[int], None]]:
        self._check_data_file()
        return self.path, self.entry.offset, self._check_copied_crc

    def _check_data_file(self) -> None:
        """BadInput, naming the index, unless the data file is there and holds the tensor's bytes."""
        size = _data_file_size(self.path, self.entry, self.index_path)
        check_span(self.path, self.entry.offset, self.entry.size, size, f"tensor {self.name!r}")

    def _check_crc(self, array: np.ndarray) -> None:
        self._check_copied_crc(crc32c_of_array(array))

    def _check_copied_crc(self, actual: int) -> None:
        if actual != self.entry.crc32c:
            raise bad_input(self.path, f"tensor {self.name!r}: crc32c of bytes "
                                       f"{self.entry.offset}..{self.entry.offset + self.entry.size} "
                                       f"is 0x{actual:08x}, the index {self.index_path} says "
                                       f"0x{self.entry.crc32c:08x} (corrupt data file?)")


@functools.lru_cache(maxsize=4)
def _parse_index(data: bytes, index_path: Path) -> tuple[BundleHeader, Mapping[str, BundleEntry]]:
    """The header and the entries (name -> BundleEntry, in key order) of an index file's bytes.

    Cached on the bytes themselves: telling a bundle's formats apart opens its index several
    times (Google's names, bert4keras' objects, TF2 objects, a SavedModel's variables), and the
    parse, not the read, is what costs (5 ms for bert-base, 10 for BERT-large). A file rewritten
    in place is parsed again because its bytes differ, whatever its timestamps say.
    """
    rows = read_table(data, index_path)
    if not rows or rows[0][0] != HEADER_KEY:
        raise bad_input(index_path, 'no header entry (key "") in the index: not a tensor bundle')
    header = parse_header(rows[0][1], index_path)
    entries: dict[str, BundleEntry] = {}
    for key, value in rows[1:]:
        if key.startswith(SLICE_KEY_MARKER):
            variable = key[len(SLICE_KEY_MARKER):].split(SLICE_NAME_END)[0].decode("utf-8", "replace")
            raise bad_input(index_path, f"holds slices of the partitioned variable {variable!r}; "
                                        f"bertconv reads only whole tensors (re-save the "
                                        f"checkpoint without partitioning)")
        try:
            name = key.decode("utf-8")
        except UnicodeDecodeError:
            raise bad_input(index_path, f"tensor name {show_key(key)} is not UTF-8") from None
        entries[name] = parse_entry(name, value, header, index_path)
    return header, MappingProxyType(entries)  # shared by every reader of these bytes: read-only


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
        self.header, self.entries = _parse_index(data, self.index_path)
        self.num_shards = self.header.num_shards
        self._data_paths: dict[int, Path] = {}  # one Path per shard, not one per tensor

    def __repr__(self) -> str:
        return f"BundleReader({str(self.prefix)!r}, {len(self.entries)} entries, {self.num_shards} shard(s))"

    def data_path(self, shard_id: int) -> Path:
        """"<prefix>.data-00000-of-00001" for shard 0 of 1."""
        path = self._data_paths.get(shard_id)
        if path is None:
            if not 0 <= shard_id < self.num_shards:
                raise ValueError(f"shard {shard_id} out of range: the bundle has {self.num_shards}")
            path = self._data_paths[shard_id] = Path(f"{self.prefix}.data-{shard_id:05d}-of-{self.num_shards:05d}")
        return path

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
    stored = read_uint32(data, pos)
    if unmask_crc(stored) != crc:
        raise bad_input(path, f"{where}: length checksum 0x{unmask_crc(stored):08x} does not match "
                              f"the length {length} (crc32c 0x{crc:08x})")
    raw_checksum = data[pos:pos + UINT32_SIZE]
    value = data[pos + UINT32_SIZE:]
    crc = crc32c.extend(crc32c.extend(crc, raw_checksum), value)
    if crc != entry.crc32c:
        raise bad_input(path, f"{where}: crc32c 0x{crc:08x}, the index says 0x{entry.crc32c:08x}")
    return value
