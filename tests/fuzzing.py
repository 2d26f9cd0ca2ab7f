"""A seeded mutator for checkpoint files, and the property every reader must keep under it.

The property: reading a mutated file (and then every tensor in it) either succeeds or raises
the tool's own `BertconvError`; never another exception, never a hang, never an allocation out
of proportion to the file.

Every mutator yields `Mutant`s whose `kind` names the mutation, and takes its kinds in turn
(round robin, the details of each case drawn from a seeded generator), so that a short run
exercises every kind; `run_mutants` fails a test whose run left a kind without a case.

Also here: `cases_for` (how many cases a test runs: a share of CASES, never fewer than one
round of its kinds), `in_child` (cases run in a forked process, for readers on C libraries that
could crash), and structure-aware mutators for TensorFlow bundles (`index_mutations`,
`entry_mutations`, `encode_table`).

CASES is 100 in the unit suite (`make test`: a short run that still takes every kind of every
mutator) and 20000 with `make fuzz` (BERTCONV_FUZZ_CASES=20000, or `make fuzz FUZZ_CASES=N`).
Each test runs its share of CASES, never fewer than one round of its mutator's kinds (the four
HDF5 structure runs of test_fuzz_h5.py share its 58 kinds between them). At CASES = 300 the
HDF5 fuzzer alone took 148 s of `make test` on 2 cores.
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
from typing import Callable, Iterable, Iterator, NamedTuple, Sequence

import numpy as np

from bertconv import formats
from bertconv.errors import BertconvError

#: Cases per reader in the unit suite; `make fuzz` raises it.
CASES = int(os.environ.get("BERTCONV_FUZZ_CASES", "100"))
#: Whether a case count was asked for (`make fuzz`); else this is the unit suite's short run.
ASKED = "BERTCONV_FUZZ_CASES" in os.environ
#: A reader may allocate this much beyond the file's own size for one case.
ALLOCATION_SLACK = 16 << 20
CASE_TIMEOUT_SECONDS = 10


class Mutant(NamedTuple):
    """One mutated input: `kind` is the mutation (what coverage is counted by), `label` says
    exactly what was done (for a failure message), `data` is what the reader is given."""

    kind: str
    label: str
    data: object


#: The byte-level kinds in the order they are taken: flips twice a round (the cheapest way past
#: the outer parsers), truncations at the given boundaries first, then anywhere.
BYTE_SCHEDULE = ("truncate", "flip", "overwrite", "flip", "splice")
BYTE_KINDS = tuple(dict.fromkeys(BYTE_SCHEDULE))


def mutations(data: bytes, seed: int, count: int, boundaries: Sequence[int] = ()) -> Iterator[Mutant]:
    """`count` mutants of `data`, their kinds taken in turn from BYTE_SCHEDULE: truncations (at
    each given boundary first, then anywhere), bit flips, byte overwrites with extreme values,
    and spliced duplicate ranges."""
    rng = random.Random(seed)
    cuts = iter(sorted({cut for cut in boundaries if 0 <= cut < len(data)}))
    for number in range(count):
        kind = BYTE_SCHEDULE[number % len(BYTE_SCHEDULE)]
        buf = bytearray(data)
        if kind == "truncate":
            cut = next(cuts, None)
            cut = rng.randrange(len(data)) if cut is None else cut
            yield Mutant(kind, f"truncate@{cut}", bytes(buf[:cut]))
        elif kind == "flip":
            flips = [(rng.randrange(len(buf)), rng.randrange(8)) for _ in range(rng.choice((1, 1, 2, 8)))]
            for pos, bit in flips:
                buf[pos] ^= 1 << bit
            yield Mutant(kind, f"flip@{flips}", bytes(buf))
        elif kind == "overwrite":
            pos = rng.randrange(len(buf))
            value = rng.choice((b"\xff" * 8, b"\x00" * 8, b"\x7f\xff\xff\xff", b"\x80" * 10, b"-1", b"9" * 12))
            buf[pos:pos + len(value)] = value
            yield Mutant(kind, f"overwrite@{pos}", bytes(buf[: len(data)]))
        else:
            a, b = sorted(rng.randrange(len(buf)) for _ in range(2))
            at = rng.randrange(len(buf))
            yield Mutant(kind, f"splice[{a}:{b}]@{at}", bytes(buf[:at] + buf[a:b] + buf[at:]))


def run_mutants(mutants: Iterable[Mutant], kinds: Iterable[str], case: Callable[[Mutant], str]) -> Counter:
    """The outcomes ("ok", "refused") of `case` on every mutant, counted. Fails (AssertionError)
    when one of `kinds` got no case: a run too short to exercise every mutation is no pass."""
    outcomes, seen = Counter(), Counter()
    for mutant in mutants:
        seen[mutant.kind] += 1
        outcomes[case(mutant)] += 1
    missing = [kind for kind in kinds if not seen[kind]]
    if missing:
        raise AssertionError(f"mutation kinds with no case in {sum(seen.values())} cases: {missing}")
    return outcomes


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


def share_of_cases(fraction: float, at_least: int = 1, *, short: int | None = None) -> int:
    """`fraction` of CASES, and never fewer than `at_least` (one round of a mutator's kinds):
    readers slower per case run a smaller share, and `make fuzz` scales them all alike. A reader
    slow per case gives `short`, what the unit suite's short run takes of it instead (`make test`
    keeps to a few seconds a file; `make fuzz` runs the whole share)."""
    if short is not None and not ASKED:
        return max(at_least, short)
    return max(at_least, int(CASES * fraction))


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


def dataset_boundaries(path: Path) -> list[int]:
    """Byte positions of an HDF5 file worth truncating at: the superblock, and each dataset's
    start and end."""
    import h5py  # only the HDF5 fuzz tests need it

    spots = {0, 8, 96, 512}
    with h5py.File(path, "r") as f:
        def visit(_, obj):
            if isinstance(obj, h5py.Dataset) and obj.id.get_offset() is not None:
                spots.update({obj.id.get_offset(), obj.id.get_offset() + obj.id.get_storage_size()})
        f.visititems(visit)
    return sorted(spots)


def fuzz_bytes_in_child(original: bytes, target: Path, *, seed: int, count: int, boundaries: list[int],
                        what: str) -> Counter:
    """`count` byte-level mutants of `original` (`mutations`, every kind at least once), each
    written to `target` and read there through `check_case`, all in a forked child (`in_child`):
    the Counter of outcomes."""
    def run(note: Callable[[str], None]) -> Counter:
        def case(mutant: Mutant) -> str:
            note(mutant.label)
            target.write_bytes(mutant.data)
            return check_case(target, f"{what} {mutant.label}")

        return run_mutants(mutations(original, seed, count, boundaries), BYTE_KINDS, case)
    return in_child(run, f"{what} byte mutations")


# --- TensorFlow tensor bundles: structure-aware mutations ------------------------------------

def sstable_blocks(data: bytes) -> list:
    """Every block of an SSTable (data blocks, metaindex, index) as BlockHandles."""
    from bertconv.containers.tensorflow import sstable

    where = Path("fuzz")
    metaindex, index = sstable._read_footer(data, where)
    block = sstable._read_block(data, index, path=where, what="index")
    data_blocks = [sstable._decode_handle(h, 0, path=where, what="handle")[0]
                   for _, h in sstable._iter_block(block, path=where, what="index")]
    return [*data_blocks, metaindex, index]


def refresh_block_crcs(data: bytearray, handles: list) -> None:
    """Recompute each block's trailer crc32c so that damage inside it reaches the parsers."""
    from bertconv.containers.tensorflow import sstable

    for handle in handles:
        end = handle.offset + handle.size
        if end + sstable.BLOCK_TRAILER_SIZE > len(data):
            continue
        crc = sstable.crc32c.extend(sstable.crc32c.value(bytes(data[handle.offset:end])), bytes(data[end:end + 1]))
        data[end + 1:end + sstable.BLOCK_TRAILER_SIZE] = sstable.mask_crc(crc).to_bytes(4, "little")


#: Index mutants: the byte kinds, and every other round the same-length ones (flips, overwrites)
#: with their block crcs recomputed, so that the damage gets past the checksums into the block,
#: varint and protobuf parsers. INDEX_ROUND cases exercise every kind.
INDEX_KINDS = BYTE_KINDS + ("flip crc-repaired", "overwrite crc-repaired")
INDEX_ROUND = 2 * len(BYTE_SCHEDULE)


def index_mutations(data: bytes, seed: int, count: int) -> Iterator[Mutant]:
    """Byte-level mutants of a .index file (truncations at the block boundaries first)."""
    handles = sstable_blocks(data)
    boundaries = sorted({0, len(data) - 48, len(data) - 8} | {h.offset for h in handles}
                        | {h.offset + h.size for h in handles} | {h.offset + h.size + 5 for h in handles})
    for number, mutant in enumerate(mutations(data, seed, count, boundaries)):
        if mutant.kind in ("flip", "overwrite") and (number // len(BYTE_SCHEDULE)) % 2:
            repaired = bytearray(mutant.data)
            refresh_block_crcs(repaired, handles)
            yield Mutant(f"{mutant.kind} crc-repaired", f"{mutant.label} crc-repaired", bytes(repaired))
        else:
            yield mutant


def encode_table(rows: list[tuple[bytes, bytes]], *, restart_interval: int = 16) -> bytes:
    """An SSTable of `rows` in the given order, duplicates and disorder included (TensorFlow's
    builder would refuse them; a hostile file need not): one data block, an index, a footer."""
    from bertconv.containers.tensorflow import protowire as pw
    from bertconv.containers.tensorflow import sstable

    def block_bytes(entries, interval):
        builder = sstable._BlockBuilder(interval)
        for key, value in entries:
            builder.add(key, value)
        return builder.finish()

    def with_trailer(contents: bytes) -> bytes:
        crc = sstable.crc32c.extend(sstable.crc32c.value(contents), b"\0")
        return contents + b"\0" + sstable.mask_crc(crc).to_bytes(4, "little")

    out = bytearray()
    data_block = block_bytes(rows, restart_interval)
    data_handle = (0, len(data_block))
    out += with_trailer(data_block)
    metaindex_handle = (len(out), len(block_bytes([], restart_interval)))
    out += with_trailer(block_bytes([], restart_interval))
    last = max((key for key, _ in rows), default=b"")
    index_block = block_bytes([(sstable.short_successor(last) + b"\xff", pw.encode_varint(data_handle[0])
                                + pw.encode_varint(data_handle[1]))], 1)
    index_handle = (len(out), len(index_block))
    out += with_trailer(index_block)
    handles = b"".join(pw.encode_varint(v) for v in (*metaindex_handle, *index_handle))
    out += handles.ljust(sstable.FOOTER_HANDLES_SIZE, b"\0") + sstable.TABLE_MAGIC.to_bytes(8, "little")
    return bytes(out)


def _fields(message: bytes) -> list[tuple[int, int, object]]:
    from bertconv.containers.tensorflow import protowire as pw

    return [(f.number, f.wire_type, bytes(f.value) if isinstance(f.value, memoryview) else f.value)
            for f in pw.iter_fields(message, source="fuzz", entry="fuzz")]


def _encode_fields(fields: list[tuple[int, int, object]]) -> bytes:
    from bertconv.containers.tensorflow import protowire as pw

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
    from bertconv.containers.tensorflow import protowire as pw

    return b"".join(pw.encode_len_field(2, pw.encode_varint_field(1, d % (1 << 64)) if d else b"") for d in dims)


#: Values a hostile entry may claim for an integer field.
EXTREMES = (0, 1, 2, 3, 7, 255, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40, 2**62, 2**63 - 1, -1, -2, -(2**63))


#: Entry mutation kinds in the order they are taken (offsets and sizes twice a round: most of
#: the reader's arithmetic is about them); ENTRY_KINDS the distinct ones.
ENTRY_SCHEDULE = ("offset", "size", "shard", "crc", "shape huge", "offset", "shape negative", "shape zero",
                  "shape rank", "shape extra", "shape drop", "size", "dtype", "wire", "truncate", "repeat",
                  "key not utf-8", "key slice", "key long", "key empty", "key duplicate", "rows drop header",
                  "rows drop entry", "rows shuffle", "rows reverse", "header")
ENTRY_KINDS = tuple(dict.fromkeys(ENTRY_SCHEDULE))


def entry_mutations(rows: list[tuple[bytes, bytes]], data_sizes: list[int], seed: int,
                    count: int) -> Iterator[Mutant]:
    """Mutants of a bundle's (key, value) rows (`Mutant.data`: the rows), to be re-encoded as a
    well-formed SSTable so that the damage is in the BundleEntryProto / BundleHeaderProto
    themselves: offsets and sizes past the data file or overflowing, size and crc mismatches,
    absurd, negative and many-dimensional shapes, unknown dtypes, shard ids out of range, wrong
    wire types, truncated messages, duplicate, missing, disordered and non-UTF-8 keys, and
    header damage. Kinds are taken in turn from ENTRY_SCHEDULE."""
    rng = random.Random(seed)
    names = [i for i, (key, _) in enumerate(rows) if key]
    for number in range(count):
        kind = ENTRY_SCHEDULE[number % len(ENTRY_SCHEDULE)]
        family, _, how = kind.partition(" ")
        mutant = list(rows)
        i = rng.choice(names)
        key, value = mutant[i]
        fields = _fields(value)
        label = f"{kind} of {key.decode(errors='replace')!r}"
        if family in ("offset", "size", "shard"):
            number_of_field = {"shard": 3, "offset": 4, "size": 5}[family]
            current = next((v for n, _, v in fields if n == number_of_field), 0)
            choices = list(EXTREMES) + [s + d for s in data_sizes for d in (-1, 0, 1)] + [current + 1, current - 1]
            new = rng.choice(choices)
            fields = [f for f in fields if f[0] != number_of_field] + [(number_of_field, 0, new)]
            label += f" = {new}"
        elif family == "crc":
            fields = [f for f in fields if f[0] != 6] + [(6, 5, rng.randrange(1 << 32))]
        elif family == "shape":
            dims = next((_dims(v) for n, _, v in fields if n == 2), [])
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
        elif family == "dtype":
            new = rng.choice((0, 2, 3, 7, 9, 14, 19, 20, 23, 24, 999, 2**32, -1))
            fields = [f for f in fields if f[0] != 1] + [(1, 0, new)]
            label += f" = {new}"
        elif family == "wire":
            field_number, wire_type = rng.choice((1, 2, 3, 4, 5, 6, 7)), rng.choice((0, 1, 2, 5))
            wire_value = {0: 1, 1: 5, 2: b"\x08\x01", 5: 5}[wire_type]
            fields = [f for f in fields if f[0] != field_number] + [(field_number, wire_type, wire_value)]
            label += f" field {field_number} as wire type {wire_type}"
        if family in ("offset", "size", "shard", "crc", "shape", "dtype", "wire", "repeat"):
            if family == "repeat":
                fields = fields + [rng.choice(fields)] if fields else fields
            mutant[i] = (key, _encode_fields(fields))
        elif family == "truncate":
            mutant[i] = (key, value[:rng.randrange(max(1, len(value)))])
        elif family == "key":
            new_key = {"not utf-8": key + b"\xff\xfe", "slice": b"\x00" + key + b"\x00\x01",
                       "long": key * 200, "empty": b"", "duplicate": key}[how]
            mutant.insert(i + 1, (new_key, value))
        elif family == "rows":
            if how == "drop header":
                mutant = [r for r in mutant if r[0]]
            elif how == "drop entry":
                del mutant[i]
            elif how == "shuffle":
                rng.shuffle(mutant)
            else:
                mutant.reverse()
            label = kind
        elif family == "header":
            header = [r for r in mutant if not r[0]]
            field = rng.choice(((1, 0, rng.choice((0, 2, 3, 2**31, 2**63 - 1, -1))), (2, 0, rng.choice((1, 2, -1))),
                                (3, 2, _encode_fields([(2, 0, rng.choice((2, 99)))])),
                                (3, 2, _encode_fields([(3, 0, 1)]))))
            if header:
                mutant[mutant.index(header[0])] = (b"", header[0][1] + _encode_fields([field]))
            label = f"header field {field[0]} = {field[2]!r}"
        yield Mutant(kind, label, mutant)
