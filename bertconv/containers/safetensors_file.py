"""safetensors: a JSON header of names, dtypes, shapes and offsets, then raw little-endian bytes.

Read from the header alone (no tensor data touched until asked); written by streaming one
tensor at a time after a header computed from shapes, in the same byte layout as the
`safetensors` library's own writer (same tensor order, same header, same padding).
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Callable, Iterable
from pathlib import Path

from .. import dtypes, json_text
from ..dtypes import DType
from ..errors import bad_input
from ..lazy import lazy_module
from ..records import record
from ..tensor import MappedTensor, check_span

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    import numpy as np

    from .stream import TensorSource
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


def write_file(path: Path, tensors: Iterable[TensorSource], metadata: dict[str, str] | None = None,
               *, on_tensor: Callable[[int], None] | None = None) -> None:
    """Write a safetensors file: its header, then each tensor in the library's order, streamed
    (`stream.append`: copied file to file where its bytes are kept verbatim, else loaded ahead
    of the writing and transposed straight into the output). `on_tensor(nbytes)` is called
    after each tensor."""
    from . import stream
    from .direct_output import open_output

    ordered = plan(tensors)
    header = encode_header(ordered, metadata)
    with open_output(path, len(header) + sum(stream.nbytes_of(t) for t in ordered)) as out:
        stream.append(out, [header, *ordered], on_tensor=on_tensor)
