"""safetensors: a JSON header of names, dtypes, shapes and offsets, then raw little-endian bytes.

Read from the header alone (no tensor data touched until asked); written by streaming one
tensor at a time after a header computed from shapes, in the same byte layout as the
`safetensors` library's own writer (same tensor order, same header, same padding).
"""

from __future__ import annotations

import errno
import json
import math
import os
import struct
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Callable, Iterable

from .. import dtypes, json_text
from ..dtypes import DType
from ..errors import bad_input
from ..lazy import lazy_module
from ..records import record
from ..tensor import LazyTensor, MappedTensor, TransposedTensor, check_span, transpose_into

if TYPE_CHECKING:
    from concurrent.futures import Future

    from .direct_output import DirectOutput

    import numpy as np
else:  # imported on first use: reading headers needs no NumPy
    np = lazy_module("numpy")

HEADER_LENGTH_BYTES = 8
#: The safetensors library refuses headers above 100 MB; so do we, before reading one.
MAX_HEADER_BYTES = 100_000_000
METADATA_KEY = "__metadata__"

_CODES = {
    "F64": dtypes.FLOAT64, "F32": dtypes.FLOAT32, "F16": dtypes.FLOAT16, "BF16": dtypes.BFLOAT16,
    "I64": dtypes.INT64, "I32": dtypes.INT32, "I16": dtypes.INT16, "I8": dtypes.INT8,
    "U8": dtypes.UINT8, "BOOL": dtypes.BOOL,
}
_CODE_OF = {d.name: code for code, d in _CODES.items()}
#: The library writes tensors by descending dtype rank, then by name; this is its enum order.
_WRITE_RANK = {"BOOL": 0, "U8": 1, "I8": 2, "I16": 3, "F16": 4, "BF16": 5, "I32": 6, "F32": 7,
               "F64": 8, "I64": 9}


@record
class SafetensorsHeader:
    path: Path
    tensors: dict[str, MappedTensor]
    metadata: dict[str, str]


def looks_like_safetensors(path: Path) -> bool:
    """True when the first bytes are a plausible header length followed by a JSON object."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER_LENGTH_BYTES + 1)
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return False
    if len(head) < HEADER_LENGTH_BYTES + 1:
        return False
    (length,) = struct.unpack("<Q", head[:HEADER_LENGTH_BYTES])
    return head[HEADER_LENGTH_BYTES:] == b"{" and length <= size - HEADER_LENGTH_BYTES


def read_header(path: Path) -> SafetensorsHeader:
    """Parse and validate the header of a safetensors file; no tensor data is read."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            prefix = f.read(HEADER_LENGTH_BYTES)
            if len(prefix) < HEADER_LENGTH_BYTES:
                raise bad_input(path, f"safetensors file is {size} bytes, too short for its 8-byte header length")
            (length,) = struct.unpack("<Q", prefix)
            if length > MAX_HEADER_BYTES or length > size - HEADER_LENGTH_BYTES:
                raise bad_input(path, f"safetensors header claims {length} bytes, but the file has "
                                      f"{size - HEADER_LENGTH_BYTES} after the length field")
            raw = f.read(length)
    except OSError as exc:
        raise bad_input(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        header = json_text.loads(raw.decode("utf-8"), object_pairs_hook=_refuse_duplicate_keys)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad_input(path, f"safetensors header is not valid JSON: {exc}") from None
    except _DuplicateKey as exc:
        raise bad_input(path, f"tensor {exc.args[0]!r} appears twice in the safetensors header") from None
    if not isinstance(header, dict):
        raise bad_input(path, "safetensors header is not a JSON object")
    metadata = header.pop(METADATA_KEY, None) or {}
    if not isinstance(metadata, dict):
        raise bad_input(path, f"safetensors {METADATA_KEY} is not an object")
    data_start = HEADER_LENGTH_BYTES + length
    data_size = size - data_start
    tensors: dict[str, MappedTensor] = {}
    spans = []
    for name, info in header.items():
        dtype, shape, begin, end = _entry(path, name, info)
        nbytes = math.prod(shape) * dtype.itemsize
        if end - begin != nbytes:
            raise bad_input(path, f"tensor {name!r}: data_offsets [{begin}, {end}] hold {end - begin} bytes, "
                                  f"but {dtype} {list(shape)} needs {nbytes}")
        check_span(path, data_start + begin, nbytes, size, f"tensor {name!r}")
        spans.append((begin, end, name))
        tensors[name] = MappedTensor(path, data_start + begin, dtype, shape, name=name)
    _check_spans_tile(path, spans, data_size)
    return SafetensorsHeader(path, tensors, {str(k): str(v) for k, v in metadata.items()})


class _DuplicateKey(Exception):
    pass


def _refuse_duplicate_keys(pairs: list[tuple[str, object]]) -> dict:
    out = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _entry(path: Path, name: str, info) -> tuple[DType, tuple[int, ...], int, int]:
    if not isinstance(info, dict):
        raise bad_input(path, f"tensor {name!r}: header entry is not an object")
    code = info.get("dtype")
    if code not in _CODES:
        raise bad_input(path, f"tensor {name!r}: dtype {code!r} is not one bertconv reads "
                              f"({', '.join(sorted(_CODES))})")
    shape = info.get("shape")
    offsets = info.get("data_offsets")
    if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
        raise bad_input(path, f"tensor {name!r}: shape {shape!r} is not a list of non-negative integers")
    if not (isinstance(offsets, list) and len(offsets) == 2
            and all(type(o) is int and o >= 0 for o in offsets) and offsets[0] <= offsets[1]):
        raise bad_input(path, f"tensor {name!r}: data_offsets {offsets!r} is not [begin, end] with begin <= end")
    return _CODES[code], tuple(shape), offsets[0], offsets[1]


def _check_spans_tile(path: Path, spans: list[tuple[int, int, str]], data_size: int) -> None:
    """Tensors must tile the data area exactly: no overlap, no gap (as the library requires)."""
    position = 0
    for begin, end, name in sorted(spans):
        if begin != position:
            what = "overlaps the previous tensor" if begin < position else f"leaves a gap at byte {position}"
            raise bad_input(path, f"tensor {name!r}: data starts at byte {begin} and {what}")
        position = end
    if position != data_size:
        raise bad_input(path, f"tensor data ends at byte {position} but the data area has {data_size} bytes")


# --- writing ------------------------------------------------------------------------------

#: (name, dtype, shape, source): the source is a `LazyTensor` (whose bytes may then be copied
#: file to file, see `copy_span`) or a callable returning the array.
TensorSource = tuple[str, DType, tuple[int, ...], "LazyTensor | Callable[[], np.ndarray]"]


def plan(tensors: Iterable[TensorSource]) -> list[TensorSource]:
    """Tensors in the order the safetensors library writes them: by dtype rank, then name."""
    return sorted(tensors, key=lambda t: (-_WRITE_RANK[_CODE_OF[t[1].name]], t[0]))


def encode_header(ordered: list[TensorSource], metadata: dict[str, str] | None) -> bytes:
    """The length-prefixed, space-padded JSON header for tensors written in `ordered` order."""
    header: dict[str, object] = {}
    if metadata:
        header[METADATA_KEY] = metadata
    offset = 0
    for name, dtype, shape, _ in ordered:
        nbytes = math.prod(shape) * dtype.itemsize
        header[name] = {"dtype": _CODE_OF[dtype.name], "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


#: While one tensor is written, the tensors after it are loaded (read, checked, transposed) by a
#: helper thread, as many as fit in this many bytes together: the two overlap on a second core,
#: and resident memory grows by at most this much over one tensor at a time. More than one:
#: BERT's names sort a large kernel between small biases and norms, and a loader that held
#: only the next small tensor would sit idle while the large one is written, then the writer
#: idle while the next kernel is transposed. 32 MiB holds BERT-large's next FFN kernel (16 MiB)
#: with the small tensors around it.
PREFETCH_MAX_BYTES = 32 << 20


def write_file(path: Path, tensors: Iterable[TensorSource], metadata: dict[str, str] | None = None,
               *, on_tensor: Callable[[int], None] | None = None) -> None:
    """Write a safetensors file, loading one tensor at a time.

    A source that is a `LazyTensor` with a `copy_span()` of the planned dtype and shape is copied
    from its file by the kernel (`os.copy_file_range`: no page of it enters this process);
    anything else is loaded (a memory map or a transposed copy is fine) and its bytes written
    row-major, the following such tensors being loaded meanwhile (see `PREFETCH_MAX_BYTES`); a
    transpose written past the page cache is loaded as the matrix it transposes and computed
    straight into the output's staging block (`write_transposed`). What
    is written goes to the disk as it accumulates, not all at the final fsync: a large file past the
    page cache (`DirectOutput`, where a span is read straight into its staging block instead of
    copied by the kernel), a small one through it (`EarlyWriteback`).
    `on_tensor(nbytes)` is called after each one.
    """
    ordered = plan(tensors)
    spans = [_copy_span(dtype, shape, source) for _, dtype, shape, source in ordered]
    pending = [i for i, span in enumerate(spans) if span is None]  # tensors to load, in order
    cursor = 0  # pending[cursor] is the next one to start loading
    from concurrent.futures import ThreadPoolExecutor  # here: reading headers needs no thread pool

    from .direct_output import DirectOutput, open_output
    from .writeback import EarlyWriteback

    header = encode_header(ordered, metadata)
    size = len(header) + sum(_planned_nbytes(t) for t in ordered)
    with open_output(path, size) as out, ThreadPoolExecutor(max_workers=1, thread_name_prefix="bertconv-load") as pool:
        loading: dict[int, Future] = {}  # submitted, not yet taken; loaded in this order
        ahead = 0  # their bytes
        writeback = None if isinstance(out, DirectOutput) else EarlyWriteback(out)
        loads = [_to_load(source, direct=writeback is None) for *_, source in ordered]

        def load_ahead(holding: int) -> None:
            """Submit the next tensors while they fit in PREFETCH_MAX_BYTES beside those already
            submitted; with no array in hand (`holding` 0 bytes) and none submitted, the next one
            whatever its size."""
            nonlocal cursor, ahead
            while cursor < len(pending):
                nbytes = _planned_nbytes(ordered[pending[cursor]])
                if ahead + nbytes > PREFETCH_MAX_BYTES and (loading or holding):
                    return
                loading[pending[cursor]] = pool.submit(_load, loads[pending[cursor]])
                ahead += nbytes
                cursor += 1

        load_ahead(holding=0)
        out.write(header)
        for i, (name, dtype, shape, source) in enumerate(ordered):
            if spans[i] is not None and copy_bytes(out, spans[i], _planned_nbytes(ordered[i])):
                if writeback:
                    writeback.written(out.tell())
                if on_tensor:
                    on_tensor(_planned_nbytes(ordered[i]))
                continue
            if i in loading:
                ahead -= _planned_nbytes(ordered[i])
                array = loading.pop(i).result()
            else:  # not submitted (a kernel copy that failed, or too large to load ahead)
                if cursor < len(pending) and pending[cursor] == i:
                    cursor += 1
                array = _load(loads[i])
            load_ahead(holding=array.nbytes)  # the next ones load while this one is written
            in_place = loads[i] is not source
            given = tuple(reversed(array.shape)) if in_place else tuple(array.shape)
            if given != tuple(shape) or array.dtype != dtype.numpy:
                raise ValueError(f"{name}: source gave {array.dtype} {list(given)}, "
                                 f"planned {dtype} {list(shape)}")
            if in_place:
                write_transposed(out, array)
            else:
                write_array(out, array)
            if writeback:
                writeback.written(out.tell())
            if on_tensor:
                on_tensor(array.nbytes)
            del array
            load_ahead(holding=0)


def _planned_nbytes(source: TensorSource) -> int:
    _, dtype, shape, _ = source
    return math.prod(shape) * dtype.itemsize


def _copy_span(dtype: DType, shape: tuple[int, ...], source) -> tuple[Path, int] | None:
    """Where the planned tensor's bytes can be copied from verbatim, if they can."""
    if not isinstance(source, LazyTensor) or not math.prod(shape):
        return None
    if source.dtype != dtype or tuple(source.shape) != tuple(shape):
        return None
    return source.copy_span()


def _to_load(source, *, direct: bool):
    """What the loader reads for `source`: to a `DirectOutput` (`direct`), a computed transpose's
    base, whose transpose `write_transposed` computes straight into the staging block, with no
    array of it made and copied; else `source` itself (a transpose of a transpose is its
    original's bytes)."""
    if direct and isinstance(source, TransposedTensor) and not isinstance(source.base, TransposedTensor):
        return source.base
    return source


def _load(source) -> np.ndarray:
    return source.read() if isinstance(source, LazyTensor) else source()


#: Errors after which a kernel copy is not possible here and the bytes are written through
#: Python instead (old kernels, file systems or file kinds without copy_file_range support).
_NO_KERNEL_COPY = {errno.ENOSYS, errno.EXDEV, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF, errno.EPERM}


def copy_bytes(out: BinaryIO | DirectOutput, span: tuple[Path, int], nbytes: int) -> bool:
    """Append `nbytes` of file `span[0]` from offset `span[1]` to `out` with `os.copy_file_range`
    (to a `DirectOutput`: read into its staging block, which a kernel copy would bypass).

    Returns False, with `out` where it was, when the kernel cannot copy between these files (the
    caller writes the bytes itself). A source shorter than the reader found it is `BadInput`.
    """
    from .direct_output import DirectOutput

    source_path, offset = span
    if isinstance(out, DirectOutput):
        out.copy_from(source_path, offset, nbytes)
        return True
    out.flush()
    start = out.tell()
    copied = 0
    try:
        with open(source_path, "rb") as source:
            while copied < nbytes:
                n = os.copy_file_range(source.fileno(), out.fileno(), nbytes - copied,
                                       offset + copied, start + copied)
                if n == 0:
                    raise bad_input(Path(source_path), f"ends before byte {offset + nbytes}: the file "
                                                       f"changed or was truncated while being read")
                copied += n
    except OSError as exc:
        if exc.errno not in _NO_KERNEL_COPY:
            raise
        out.seek(start)
        return False
    out.seek(start + nbytes)
    return True


#: Copy granularity: large enough to be fast, small enough to keep transposes' scratch bounded.
CHUNK_BYTES = 16 << 20


def write_array(out: BinaryIO, array: np.ndarray) -> None:
    """Write `array`'s values row-major, in chunks of rows, without a whole extra copy when the
    array is already contiguous (a memory map is written straight from the page cache)."""
    if array.ndim == 0 or array.size == 0:
        out.write(np.ascontiguousarray(array).tobytes())
        return
    if array.flags.c_contiguous:
        flat = array.reshape(-1).view(np.uint8)
        for start in range(0, flat.size, CHUNK_BYTES):
            out.write(flat[start:start + CHUNK_BYTES].data)
        return
    row_bytes = max(1, array[0].nbytes)
    rows_per_chunk = max(1, CHUNK_BYTES // row_bytes)
    for start in range(0, array.shape[0], rows_per_chunk):
        out.write(np.ascontiguousarray(array[start:start + rows_per_chunk]).data)


def write_transposed(out: DirectOutput, array: np.ndarray) -> None:
    """Write the transpose of 2-D `array` ([R, C]: C rows of R values) row-major, computed straight
    into `out`'s staging block, as many whole rows at a time as the block has room for; a row
    that would cross the block's end goes through `write`."""
    array = np.asarray(array)
    rows, columns = array.shape
    row_bytes = rows * array.dtype.itemsize
    done = 0  # rows of the transpose written
    while done < columns:
        room = out.staging()
        fit = min(columns - done, len(room) // row_bytes) if row_bytes else columns - done
        if fit == 0:
            out.write(np.ascontiguousarray(array[:, done]).data)
            done += 1
            continue
        target = np.frombuffer(room, dtype=array.dtype, count=fit * rows).reshape(fit, rows)
        transpose_into(array[:, done:done + fit], target)
        del target  # no view of the block may outlive its hand-over
        out.staged(fit * row_bytes)
        done += fit
