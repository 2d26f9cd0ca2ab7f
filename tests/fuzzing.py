"""A seeded mutator for checkpoint files, and the property every reader must keep under it.

The property: reading a mutated file (and then every tensor in it) either succeeds or raises
the tool's own `BertconvError`; never another exception, never a hang, never an allocation out
of proportion to the file.

Also here: `share_of_cases` (readers slower per case run a share of CASES), `in_child` (cases
run in a forked process, for readers on C libraries that could crash), and structure-aware
mutators for TensorFlow bundles (`index_mutations`, `entry_mutations`, `encode_table`).

Cases per reader with the default CASES = 2000 (`make fuzz`: BERTCONV_FUZZ_CASES=20000, ten
times each; the whole default `-m fuzz` run takes about 3 minutes on 2 cores):
  safetensors 2000, torch zip 2000, legacy torch 2000 (test_fuzz_hf.py);
  TF index 1200 through the whole reader (test_fuzz_tf.py) + 900 through BundleReader alone
  (test_tf_bundle.py, its own default of 300 per fixture); TF entries 800; TF data shards 500;
  HDF5 bytes 1000 and HDF5 attributes/structure 500 (test_fuzz_h5.py).
"""

from __future__ import annotations

import json
import os
import random
import signal
import tracemalloc
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from bertconv import formats
from bertconv.errors import BertconvError

#: Cases per reader in the unit suite; `make fuzz` raises it.
CASES = int(os.environ.get("BERTCONV_FUZZ_CASES", "2000"))
#: A reader may allocate this much beyond the file's own size for one case.
ALLOCATION_SLACK = 16 << 20
CASE_TIMEOUT_SECONDS = 10


def mutations(data: bytes, seed: int, count: int, boundaries: list[int] = ()) -> Iterator[tuple[str, bytes]]:
    """`count` mutants of `data`: truncations (at every given boundary first, then anywhere),
    bit flips, byte overwrites with extreme values, and spliced duplicate ranges."""
    rng = random.Random(seed)
    produced = 0
    for cut in sorted(set(boundaries)):
        if produced >= count:
            return
        if 0 <= cut < len(data):
            produced += 1
            yield f"truncate@{cut}", data[:cut]
    while produced < count:
        kind = rng.choice(("truncate", "flip", "flip", "overwrite", "splice"))
        buf = bytearray(data)
        if kind == "truncate":
            cut = rng.randrange(len(data))
            yield f"truncate@{cut}", bytes(buf[:cut])
        elif kind == "flip":
            flips = [(rng.randrange(len(buf)), rng.randrange(8)) for _ in range(rng.choice((1, 1, 2, 8)))]
            for pos, bit in flips:
                buf[pos] ^= 1 << bit
            yield f"flip@{flips}", bytes(buf)
        elif kind == "overwrite":
            pos = rng.randrange(len(buf))
            value = rng.choice((b"\xff" * 8, b"\x00" * 8, b"\x7f\xff\xff\xff", b"\x80" * 10, b"-1", b"9" * 12))
            buf[pos:pos + len(value)] = value
            yield f"overwrite@{pos}", bytes(buf[: len(data)])
        else:
            a, b = sorted(rng.randrange(len(buf)) for _ in range(2))
            at = rng.randrange(len(buf))
            yield f"splice[{a}:{b}]@{at}", bytes(buf[:at] + buf[a:b] + buf[at:])
        produced += 1


class _Timeout(Exception):
    pass


@contextmanager
def _deadline(seconds: int):
    def expire(signum, frame):
        raise _Timeout(f"no result after {seconds}s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def read_everything(path: Path) -> None:
    """Read a checkpoint and every tensor in it, as `verify --deep` would."""
    tree = formats.read(path)
    for param in tree:
        np.asarray(param.tensor.read()).sum()


def check_case(path: Path, label: str, reader: Callable[[Path], None] = read_everything) -> str:
    """Run `reader` on one mutant; return "ok" or "refused", or raise AssertionError naming it."""
    size = path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    tracemalloc.start()
    try:
        with _deadline(CASE_TIMEOUT_SECONDS):
            reader(path)
        outcome = "ok"
    except BertconvError as error:
        message = str(error)
        if not message:
            raise AssertionError(f"{label}: error without a message")
        outcome = "refused"
    except _Timeout as error:
        raise AssertionError(f"{label}: reader hung ({error})") from None
    except Exception as error:  # the property under test: nothing else may escape
        raise AssertionError(f"{label}: uncaught {type(error).__name__}: {error}") from error
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    if peak > size + ALLOCATION_SLACK:
        raise AssertionError(f"{label}: allocated {peak} bytes for a {size}-byte input")
    return outcome


def share_of_cases(fraction: float) -> int:
    """`fraction` of CASES (at least 1): readers slower per case than the rest run fewer, and
    `make fuzz` (BERTCONV_FUZZ_CASES=20000) scales them all alike."""
    return max(1, int(CASES * fraction))


# --- running cases in a child process -------------------------------------------------------


def in_child(run: Callable[[Callable[[str], None]], Counter], what: str) -> Counter:
    """`run(note)` in a forked child process; its Counter of outcomes, or AssertionError.

    For readers built on C libraries (HDF5): a crash (a signal) in the child fails the test
    naming the case `run` last passed to `note`, instead of taking the test session down.
    """
    read_end, write_end = os.pipe()
    progress_read, progress_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run, report, and leave without running the parent's cleanup
        os.close(read_end)
        os.close(progress_read)
        try:
            def note(label: str) -> None:
                os.write(progress_write, (label.replace("\n", " ") + "\n").encode())
            result = {"outcomes": dict(run(note))}
        except BaseException as error:  # noqa: BLE001 - everything is reported to the parent
            result = {"error": f"{type(error).__name__}: {error}"}
        with os.fdopen(write_end, "w") as out:
            json.dump(result, out)
        os._exit(0)
    os.close(write_end)
    os.close(progress_write)
    with os.fdopen(progress_read, "rb") as progress_file:
        with os.fdopen(read_end) as result_file:
            labels = progress_file.read().splitlines()
            text = result_file.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        last = labels[-1].decode(errors="replace") if labels else "before the first case"
        raise AssertionError(f"{what}: the process died of signal {os.WTERMSIG(status)} on case {last}")
    result = json.loads(text)
    if "error" in result:
        raise AssertionError(f"{what}: {result['error']}")
    return Counter(result["outcomes"])


def fuzz_bytes_in_child(original: bytes, target: Path, *, seed: int, count: int, boundaries: list[int],
                        what: str) -> Counter:
    """`count` byte-level mutants of `original` (`mutations`), each written to `target` and read
    there through `check_case`, all in a forked child (`in_child`): the Counter of outcomes."""
    def run(note: Callable[[str], None]) -> Counter:
        outcomes = Counter()
        for label, mutant in mutations(original, seed, count, boundaries):
            note(label)
            target.write_bytes(mutant)
            outcomes[check_case(target, f"{what} {label}")] += 1
        return outcomes
    return in_child(run, f"{what} byte mutations")


# --- TensorFlow tensor bundles: structure-aware mutations ------------------------------------

def sstable_blocks(data: bytes) -> list:
    """Every block of an SSTable (data blocks, metaindex, index) as BlockHandles."""
    from bertconv.containers import tf_bundle as tb

    where = Path("fuzz")
    metaindex, index = tb._read_footer(data, where)
    block = tb._read_block(data, index, path=where, what="index")
    data_blocks = [tb._decode_handle(h, 0, path=where, what="handle")[0]
                   for _, h in tb._iter_block(block, path=where, what="index")]
    return [*data_blocks, metaindex, index]


def refresh_block_crcs(data: bytearray, handles: list) -> None:
    """Recompute each block's trailer crc32c so that damage inside it reaches the parsers."""
    from bertconv.containers import tf_bundle as tb

    for handle in handles:
        end = handle.offset + handle.size
        if end + tb.BLOCK_TRAILER_SIZE > len(data):
            continue
        crc = tb.crc32c.extend(tb.crc32c.value(bytes(data[handle.offset:end])), bytes(data[end:end + 1]))
        data[end + 1:end + tb.BLOCK_TRAILER_SIZE] = tb.mask_crc(crc).to_bytes(4, "little")


def index_mutations(data: bytes, seed: int, count: int) -> Iterator[tuple[str, bytes]]:
    """Byte-level mutants of a .index file (truncation at every block boundary first); the
    same-length ones alternately with their block crcs recomputed, so that half the damage gets
    past the checksums into the block, varint and protobuf parsers."""
    handles = sstable_blocks(data)
    boundaries = sorted({0, len(data) - 48, len(data) - 8} | {h.offset for h in handles}
                        | {h.offset + h.size for h in handles} | {h.offset + h.size + 5 for h in handles})
    for number, (label, mutant) in enumerate(mutations(data, seed, count, boundaries)):
        if len(mutant) == len(data) and number % 2:
            repaired = bytearray(mutant)
            refresh_block_crcs(repaired, handles)
            yield label + " crc-repaired", bytes(repaired)
        else:
            yield label, mutant


def encode_table(rows: list[tuple[bytes, bytes]], *, restart_interval: int = 16) -> bytes:
    """An SSTable of `rows` in the given order, duplicates and disorder included (TensorFlow's
    builder would refuse them; a hostile file need not): one data block, an index, a footer."""
    from bertconv.containers import protowire as pw
    from bertconv.containers import tf_bundle as tb

    def block_bytes(entries, interval):
        builder = tb._BlockBuilder(interval)
        for key, value in entries:
            builder.add(key, value)
        return builder.finish()

    def with_trailer(contents: bytes) -> bytes:
        crc = tb.crc32c.extend(tb.crc32c.value(contents), b"\0")
        return contents + b"\0" + tb.mask_crc(crc).to_bytes(4, "little")

    out = bytearray()
    data_block = block_bytes(rows, restart_interval)
    data_handle = (0, len(data_block))
    out += with_trailer(data_block)
    metaindex_handle = (len(out), len(block_bytes([], restart_interval)))
    out += with_trailer(block_bytes([], restart_interval))
    last = max((key for key, _ in rows), default=b"")
    index_block = block_bytes([(tb.short_successor(last) + b"\xff", pw.encode_varint(data_handle[0])
                                + pw.encode_varint(data_handle[1]))], 1)
    index_handle = (len(out), len(index_block))
    out += with_trailer(index_block)
    handles = b"".join(pw.encode_varint(v) for v in (*metaindex_handle, *index_handle))
    out += handles.ljust(tb.FOOTER_HANDLES_SIZE, b"\0") + tb.TABLE_MAGIC.to_bytes(8, "little")
    return bytes(out)


def _fields(message: bytes) -> list[tuple[int, int, object]]:
    from bertconv.containers import protowire as pw

    return [(f.number, f.wire_type, bytes(f.value) if isinstance(f.value, memoryview) else f.value)
            for f in pw.iter_fields(message, source="fuzz", entry="fuzz")]


def _encode_fields(fields: list[tuple[int, int, object]]) -> bytes:
    from bertconv.containers import protowire as pw

    out = bytearray()
    for number, wire_type, value in fields:
        out += pw.encode_tag(number, wire_type)
        if wire_type == pw.WIRE_VARINT:
            out += pw.encode_varint(value % (1 << 64))
        elif wire_type == pw.WIRE_LEN:
            out += pw.encode_varint(len(value)) + value
        elif wire_type == pw.WIRE_FIXED32:
            out += (value % (1 << 32)).to_bytes(4, "little")
        elif wire_type == pw.WIRE_FIXED64:
            out += (value % (1 << 64)).to_bytes(8, "little")
    return bytes(out)


def _dims(shape_message: bytes) -> list[int]:
    return [next((v for n, _, v in _fields(dim) if n == 1), 0) for n, _, dim in _fields(shape_message) if n == 2]


def _shape(dims: list[int]) -> bytes:
    from bertconv.containers import protowire as pw

    return b"".join(pw.encode_len_field(2, pw.encode_varint_field(1, d % (1 << 64)) if d else b"") for d in dims)


#: Values a hostile entry may claim for an integer field.
EXTREMES = (0, 1, 2, 3, 7, 255, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40, 2**62, 2**63 - 1, -1, -2, -(2**63))


def entry_mutations(rows: list[tuple[bytes, bytes]], data_sizes: list[int], seed: int,
                    count: int) -> Iterator[tuple[str, list[tuple[bytes, bytes]]]]:
    """Mutants of a bundle's (key, value) rows, each re-encoded as a well-formed SSTable so that
    the damage is in the BundleEntryProto / BundleHeaderProto themselves: offsets and sizes past
    the data file or overflowing, size and crc mismatches, absurd, negative and many-dimensional
    shapes, unknown dtypes, shard ids out of range, wrong wire types, truncated messages,
    duplicate, missing, disordered and non-UTF-8 keys, and header damage."""
    rng = random.Random(seed)
    names = [i for i, (key, _) in enumerate(rows) if key]
    for _ in range(count):
        mutant = list(rows)
        i = rng.choice(names)
        key, value = mutant[i]
        fields = _fields(value)
        kind = rng.choice(("offset", "offset", "size", "size", "crc", "shape", "shape", "dtype", "shard",
                           "wire", "truncate", "repeat", "key", "rows", "header"))
        label = f"{kind} of {key.decode(errors='replace')!r}"
        if kind in ("offset", "size", "shard"):
            number = {"shard": 3, "offset": 4, "size": 5}[kind]
            current = next((v for n, _, v in fields if n == number), 0)
            choices = list(EXTREMES) + [s + d for s in data_sizes for d in (-1, 0, 1)] + [current + 1, current - 1]
            new = rng.choice(choices)
            fields = [f for f in fields if f[0] != number] + [(number, 0, new)]
            label += f" = {new}"
        elif kind == "crc":
            fields = [f for f in fields if f[0] != 6] + [(6, 5, rng.randrange(1 << 32))]
        elif kind == "shape":
            dims = next((_dims(v) for n, _, v in fields if n == 2), [])
            how = rng.choice(("huge", "negative", "zero", "rank", "extra", "drop"))
            if how == "huge":
                dims = [rng.choice((2**31, 2**40, 2**62, 2**63 - 1))] + dims[1:]
            elif how == "negative":
                dims = [-rng.choice((1, 2, 2**40))] + dims[1:]
            elif how == "zero":
                dims = [0] + dims[1:]
            elif how == "rank":
                dims = [1] * rng.choice((8, 64, 1000))
            elif how == "extra":
                dims = dims + [rng.choice((1, 2, 99))]
            else:
                dims = dims[:-1]
            fields = [f for f in fields if f[0] != 2] + [(2, 2, _shape(dims))]
            label += f" shape {how}"
        elif kind == "dtype":
            new = rng.choice((0, 2, 3, 7, 9, 14, 19, 20, 23, 24, 999, 2**32, -1))
            fields = [f for f in fields if f[0] != 1] + [(1, 0, new)]
            label += f" = {new}"
        elif kind == "wire":
            number, wire_type = rng.choice((1, 2, 3, 4, 5, 6, 7)), rng.choice((0, 1, 2, 5))
            value = {0: 1, 1: 5, 2: b"\x08\x01", 5: 5}[wire_type]
            fields = [f for f in fields if f[0] != number] + [(number, wire_type, value)]
            label += f" field {number} as wire type {wire_type}"
        if kind in ("offset", "size", "shard", "crc", "shape", "dtype", "wire", "repeat"):
            if kind == "repeat":
                fields = fields + [rng.choice(fields)] if fields else fields
            mutant[i] = (key, _encode_fields(fields))
        elif kind == "truncate":
            mutant[i] = (key, value[:rng.randrange(max(1, len(value)))])
        elif kind == "key":
            how = rng.choice(("not utf-8", "slice", "long", "empty", "duplicate"))
            new_key = {"not utf-8": key + b"\xff\xfe", "slice": b"\x00" + key + b"\x00\x01",
                       "long": key * 200, "empty": b"", "duplicate": key}[how]
            mutant.insert(i + 1, (new_key, value))
            label += f" key {how}"
        elif kind == "rows":
            how = rng.choice(("drop header", "drop entry", "shuffle", "reverse"))
            if how == "drop header":
                mutant = [r for r in mutant if r[0]]
            elif how == "drop entry":
                del mutant[i]
            elif how == "shuffle":
                rng.shuffle(mutant)
            else:
                mutant.reverse()
            label = f"rows {how}"
        elif kind == "header":
            header = [r for r in mutant if not r[0]]
            field = rng.choice(((1, 0, rng.choice((0, 2, 3, 2**31, 2**63 - 1, -1))), (2, 0, rng.choice((1, 2, -1))),
                                (3, 2, _encode_fields([(2, 0, rng.choice((2, 99)))])),
                                (3, 2, _encode_fields([(3, 0, 1)]))))
            if header:
                mutant[mutant.index(header[0])] = (b"", header[0][1] + _encode_fields([field]))
            label = f"header field {field[0]} = {field[2]!r}"
        yield label, mutant
