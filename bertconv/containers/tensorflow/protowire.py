"""The protobuf wire format, just enough of it to read and write small messages by hand.

bertconv parses TensorFlow's `BundleHeaderProto` / `BundleEntryProto` (and later Keras'
`TrackableObjectGraph`) without the protobuf package. A message is a sequence of fields, each a
varint tag `(field_number << 3) | wire_type` followed by a value whose encoding the wire type
names:

    wire type 0  varint              int32, int64, uint32, uint64, bool, enum
    wire type 1  fixed64             8 bytes little-endian
    wire type 2  length-delimited    varint length, then that many bytes (string, bytes,
                                     embedded message, packed repeated field)
    wire type 5  fixed32             4 bytes little-endian
    wire types 3, 4                  start/end group (deprecated proto2 groups): refused here

Decoding is strict and bounded: a varint has at most 10 bytes and must fit in 64 bits, a length
must fit in what is left of the message, and every problem is a `BadInput` naming the file and
the entry being decoded. This module knows nothing about any particular message.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterator
from pathlib import Path

from ...errors import BadInput, bad_input

WIRE_VARINT = 0
WIRE_FIXED64 = 1
WIRE_LEN = 2
WIRE_START_GROUP = 3
WIRE_END_GROUP = 4
WIRE_FIXED32 = 5

WIRE_TYPE_NAMES = {
    WIRE_VARINT: "varint",
    WIRE_FIXED64: "fixed64",
    WIRE_LEN: "length-delimited",
    WIRE_START_GROUP: "start-group",
    WIRE_END_GROUP: "end-group",
    WIRE_FIXED32: "fixed32",
}

MAX_VARINT_BYTES = 10  # ceil(64 / 7): the longest encoding of a 64-bit value
MAX_VARINT32_BYTES = 5  # ceil(32 / 7)
UINT64_LIMIT = 1 << 64
INT64_SIGN_BIT = 1 << 63
UINT32_LIMIT = 1 << 32
FIELD_NUMBER_LIMIT = 1 << 29  # field numbers are 1 .. 2**29 - 1
FIXED32_BYTES = 4
FIXED64_BYTES = 8


class Field(namedtuple("Field", ("number", "wire_type", "value"))):
    """One decoded field: its `number` and `wire_type` (ints), and its `value`, an int for
    varint, fixed32 and fixed64 fields (unsigned, as on the wire; see `as_int64`) and a
    memoryview of the payload for length-delimited fields. (`collections.namedtuple`, not
    `typing.NamedTuple`: `typing` is not imported at run time.)
    """

    __slots__ = ()


def _fail(source: str | Path, entry: str, what: str) -> BadInput:
    return bad_input(source, f"{entry}: {what}")


def decode_varint(
    data: bytes | memoryview,
    pos: int,
    *,
    source: str | Path,
    entry: str,
    max_bytes: int = MAX_VARINT_BYTES,
    end: int | None = None,
) -> tuple[int, int]:
    """Decode the varint starting at `data[pos]`; return (value, position after it).

    The varint must end before `end` (default: the end of `data`), use at most `max_bytes`
    bytes, and fit in `7 * max_bytes` bits capped at 64 (32 bits for `MAX_VARINT32_BYTES`).
    """
    stop = len(data) if end is None else end
    if pos < stop and data[pos] < 0x80:  # one byte: most tags, dtypes, dimensions and lengths
        return data[pos], pos + 1
    limit = UINT32_LIMIT if max_bytes <= MAX_VARINT32_BYTES else UINT64_LIMIT
    value = 0
    shift = 0
    start = pos
    for count in range(max_bytes):
        if pos >= stop:
            raise _fail(source, entry, f"truncated varint at byte {start} ({stop - start} bytes left)")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if value >= limit:
                raise _fail(source, entry, f"varint at byte {start} overflows {limit.bit_length() - 1} bits")
            return value, pos
        shift += 7
    raise _fail(source, entry, f"varint at byte {start} is longer than {max_bytes} bytes")


def _read_fixed(data: memoryview, pos: int, size: int, *, source: str | Path, entry: str) -> tuple[int, int]:
    if len(data) - pos < size:
        raise _fail(source, entry, f"truncated fixed{size * 8} field at byte {pos}: "
                                   f"needs {size} bytes, {len(data) - pos} left")
    return int.from_bytes(data[pos:pos + size], "little"), pos + size


def iter_fields(data: bytes | memoryview, *, source: str | Path, entry: str) -> Iterator[Field]:
    """Yield the fields of one serialized message, in wire order.

    Raises `BadInput` (naming `source` and `entry`) on a truncated or overlong field, field
    number 0, or a group wire type (3, 4) or unknown wire type (6, 7).
    """
    view = memoryview(data).cast("B") if not isinstance(data, memoryview) else data
    size = len(view)
    pos = 0
    while pos < size:
        tag_pos = pos
        # A one-byte varint is taken here, not by a call: a BERT-large index decodes 70,000 of them.
        if view[pos] < 0x80:
            tag, pos = view[pos], pos + 1
        else:
            tag, pos = decode_varint(view, pos, source=source, entry=entry, max_bytes=MAX_VARINT32_BYTES)
        number, wire_type = tag >> 3, tag & 0x7
        if number == 0:
            raise _fail(source, entry, f"field number 0 at byte {tag_pos} (not a protobuf message?)")
        if wire_type == WIRE_VARINT:
            if pos < size and view[pos] < 0x80:
                value, pos = view[pos], pos + 1
            else:
                value, pos = decode_varint(view, pos, source=source, entry=entry)
        elif wire_type == WIRE_FIXED64:
            value, pos = _read_fixed(view, pos, FIXED64_BYTES, source=source, entry=entry)
        elif wire_type == WIRE_FIXED32:
            value, pos = _read_fixed(view, pos, FIXED32_BYTES, source=source, entry=entry)
        elif wire_type == WIRE_LEN:
            if pos < size and view[pos] < 0x80:
                length, pos = view[pos], pos + 1
            else:
                length, pos = decode_varint(view, pos, source=source, entry=entry)
            if length > size - pos:
                raise _fail(source, entry, f"field {number} at byte {tag_pos} claims {length} bytes, "
                                           f"only {size - pos} left in the message")
            value = view[pos:pos + length]
            pos += length
        else:
            name = WIRE_TYPE_NAMES.get(wire_type, "unknown")
            raise _fail(source, entry, f"field {number} at byte {tag_pos} has wire type {wire_type} "
                                       f"({name}), which this reader does not accept")
        yield Field(number, wire_type, value)


def require_wire_type(field: Field, expected: int, field_name: str, *, source: str | Path,
                      entry: str) -> None:
    """Raise `BadInput` unless `field` was encoded with wire type `expected`."""
    if field.wire_type != expected:
        raise _fail(source, entry, f"field {field_name} ({field.number}) has wire type "
                                   f"{WIRE_TYPE_NAMES.get(field.wire_type, field.wire_type)}, "
                                   f"expected {WIRE_TYPE_NAMES[expected]}")


def as_int64(value: int) -> int:
    """A varint's unsigned 64-bit value read as a two's-complement int64 (int64, int32, enum)."""
    return value - UINT64_LIMIT if value >= INT64_SIGN_BIT else value


# Encoders --------------------------------------------------------------------------------------

def encode_varint(value: int) -> bytes:
    """The varint encoding of `value`, 0 <= value < 2**64 (negative int64: add 2**64 first)."""
    if not 0 <= value < UINT64_LIMIT:
        raise ValueError(f"varint value {value} is outside 0 .. 2**64 - 1")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_tag(number: int, wire_type: int) -> bytes:
    """The tag of field `number` with `wire_type`."""
    if not 0 < number < FIELD_NUMBER_LIMIT or wire_type not in WIRE_TYPE_NAMES:
        raise ValueError(f"bad field number {number} or wire type {wire_type}")
    return encode_varint((number << 3) | wire_type)


def encode_varint_field(number: int, value: int) -> bytes:
    """Field `number` holding a varint (negative values are encoded as int64, 10 bytes)."""
    return encode_tag(number, WIRE_VARINT) + encode_varint(value % UINT64_LIMIT)


def encode_len_field(number: int, payload: bytes) -> bytes:
    """Field `number` holding `payload` (bytes, string or embedded message)."""
    return encode_tag(number, WIRE_LEN) + encode_varint(len(payload)) + bytes(payload)


def encode_fixed32(value: int) -> bytes:
    """`value` as 4 little-endian bytes."""
    if not 0 <= value < UINT32_LIMIT:
        raise ValueError(f"fixed32 value {value} is outside 0 .. 2**32 - 1")
    return value.to_bytes(FIXED32_BYTES, "little")


def encode_fixed32_field(number: int, value: int) -> bytes:
    """Field `number` holding a fixed32."""
    return encode_tag(number, WIRE_FIXED32) + encode_fixed32(value)
