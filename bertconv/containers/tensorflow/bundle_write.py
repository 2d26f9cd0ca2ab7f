"""Writing TensorFlow's tensor bundle (`write_bundle`), byte for byte as TensorFlow 2.21 does:
see `tf_bundle`'s docstring for what that is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from .. import stream
from ..direct_output import open_output
from ..stream import TensorSource
from . import protowire as pw
from .sstable import TF_BLOCK_SIZE, TableBuilder, mask_crc
from .bundle import (
    BUNDLE_VERSION,
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


def write_bundle(prefix: str | Path, tensors: Iterable[TensorSource], *, compress: bool = False,
                 block_size: int = TF_BLOCK_SIZE, on_tensor: Callable[[int], None] | None = None) -> None:
    """Write a one-shard bundle at `prefix`, byte-identical to TensorFlow 2.21's for the same
    tensors added in name order (TF1 `Saver`; `SaveV2` given sorted names).

    `tensors` yields `stream.TensorSource`s: (name, dtype, shape, a `LazyTensor` or a callable
    returning the values in `dtype.storage`, bfloat16 as uint16 bits, any strides). Names are
    sorted first, then the data streamed (`stream.append`: bytes kept verbatim are copied,
    transposes computed straight into the output, the next tensors loaded while one is written),
    each tensor's CRC32C computed as its bytes are staged. Writes "<prefix>.data-00000-of-00001",
    then "<prefix>.index". `on_tensor(nbytes)` is called after each tensor is written.
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

    total = sum(stream.nbytes_of(source) for source in sources)
    with open_output(Path(f"{prefix}.data-00000-of-00001"), total) as data_file:
        crcs = stream.append(data_file, sources, checksums=True, on_tensor=on_tensor)
    entries: list[tuple[bytes, bytes]] = []
    offset = 0
    for (name, dtype, shape, _), crc in zip(sources, crcs):
        size = stream.nbytes_of((name, dtype, shape, None))
        entries.append((name.encode("utf-8"), encode_entry(TF_DTYPE_CODES[dtype], tuple(shape), shard_id=0,
                                                           offset=offset, size=size, crc32c_value=crc)))
        offset += size

    with open(f"{prefix}{INDEX_SUFFIX}", "wb") as index_file:
        table = TableBuilder(index_file, block_size=block_size, compress=compress)
        table.add(HEADER_KEY, encode_header())
        for key, value in entries:
            table.add(key, value)
        table.finish()
