"""A seeded mutator for checkpoint files, and the property every reader must keep under it.

The property: reading a mutated file (and then every tensor in it) either succeeds or raises
the tool's own `BertconvError`; never another exception, never a hang, never an allocation out
of proportion to the file.
"""

from __future__ import annotations

import os
import random
import signal
import tracemalloc
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
