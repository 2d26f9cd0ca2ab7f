"""Writing TensorFlow's tensor bundle (`write_bundle`), byte for byte as TensorFlow 2.21 does:
see `tf_bundle`'s docstring for what that is.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Callable, Iterable, Iterator

from google_crc32c import cext as crc32c  # the compiled implementation, or ImportError

from ...dtypes import DType
from ...lazy import lazy_module
from . import protowire as pw
from .sstable import TF_BLOCK_SIZE, TableBuilder, mask_crc
from .bundle import (
    BUNDLE_VERSION,
    CRC_CHUNK_BYTES,
    DIM_SIZE,
    ENTRY_CRC32C,
    ENTRY_DTYPE,
    ENTRY_OFFSET,
    ENTRY_SHAPE,
    ENTRY_SHARD_ID,
    ENTRY_SIZE,
    HEADER_KEY,
    HEADER_NUM_SHARDS,
    HEADER_VERSION,
    INDEX_SUFFIX,
    SHAPE_DIM,
    TF_DTYPE_CODES,
    VERSION_PRODUCER,
)
from ..direct_output import DirectOutput, open_output
from ..writeback import EarlyWriteback

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")

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

    total = sum(_source_nbytes(source) for source in sources)
    with (open_output(Path(f"{prefix}.data-00000-of-00001"), total) as data_file,
          ThreadPoolExecutor(max_workers=1, thread_name_prefix="bertconv-load") as pool):
        upcoming = pool.submit(sources[0][3]) if sources else None
        # A large data file bypasses the page cache (as a large safetensors output does); a small
        # one is written through it, with its dirty pages handed to the disk as they are written.
        writeback = None if isinstance(data_file, DirectOutput) else EarlyWriteback(data_file)
        for k, (name, dtype, shape, _) in enumerate(sources):
            array = upcoming.result()
            following = sources[k + 1] if k + 1 < len(sources) else None
            upcoming = None
            if following is not None and _source_nbytes(following) <= PREFETCH_MAX_BYTES:
                upcoming = pool.submit(following[3])  # loads while this one is written
            size, crc = _write_tensor(data_file, name, dtype, tuple(shape), array)
            del array
            if writeback is not None:
                writeback.written(offset + size)
            if upcoming is None and following is not None:
                upcoming = pool.submit(following[3])
            entry = encode_entry(TF_DTYPE_CODES[dtype], tuple(shape), shard_id=0, offset=offset,
                                 size=size, crc32c_value=crc)
            entries.append((name.encode("utf-8"), entry))
            offset += size

    with open(f"{prefix}{INDEX_SUFFIX}", "wb") as index_file:
        table = TableBuilder(index_file, block_size=block_size, compress=compress)
        table.add(HEADER_KEY, encode_header())
        for key, value in entries:
            table.add(key, value)
        table.finish()
