"""Stored copies a framework overwrites at load: does the overwritten one hold the same values?

A format may store a parameter twice where its framework keeps one variable and loads one copy
over the other (transformers' TF BERT: the encoder's embeddings, then the MLM head's copies). The
reader puts the copy the framework computes with in the tree and lists the other as an ignored
entry naming the parameter it copies (`Ignored.copy_of`). Where the two differ, the file holds
two models and a reader that picked the other copy would compute the other one: `inspect` and
`convert` say which copy was used, `verify` fails naming both.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..records import record
from ..tensor import LazyTensor
from ..tree import Ignored, Parameter, ParameterTree
from .arrays import describe_difference

#: Bytes of each copy compared at a time, read into buffers used again for every block: fresh
#: 16 MiB blocks cost a page fault per 4 KiB, a 1 MiB buffer stays in the CPU's caches (a
#: bert-base tf_model.h5's two 94 MB tables: 87 ms compared in fresh 16 MiB blocks, 26-32 ms in
#: one 1 MiB buffer each, 17-20 ms in two threads).
BLOCK_BYTES = 2**20

@record
class DifferingCopy:
    """A stored copy (`overwritten`) that differs from the tree's parameter (`used`), and how."""

    overwritten: Ignored
    used: Parameter
    difference: str

    def sentence(self) -> str:
        return (f"{self.overwritten.name} differs from {self.used.source}, the other stored copy of "
                f"{self.used.name}: {self.difference}. The model computes with {self.used.source}, as bertconv "
                f"reads it ({self.overwritten.reason})")


def differing_copies(tree: ParameterTree) -> list[DifferingCopy]:
    """Every overwritten copy in `tree.ignored` that is not bit-equal to the parameter it copies
    (reads both tensors)."""
    found = []
    for entry in tree.ignored:
        if entry.copy_of is None or entry.tensor is None or entry.copy_of not in tree:
            continue
        used = tree[entry.copy_of]
        if same_stored_bytes(entry.tensor, used.tensor):
            continue
        difference = describe_difference(entry.tensor.read(), entry.tensor.dtype, used.tensor.read(), used.tensor.dtype)
        if difference is not None:
            found.append(DifferingCopy(entry, used, difference))
    return found


def same_stored_bytes(a: LazyTensor, b: LazyTensor) -> bool:
    """Whether two tensors of one dtype and shape, each stored as its plain bytes in a file
    (`copy_span`), hold the same bytes. False when they differ or either is not stored so (or
    cannot be read): the caller then compares their values. Each half is compared on a thread
    of its own (`preadv` lets go of the GIL), a block at a time."""
    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
        return False
    spans = a.copy_span(), b.copy_span()
    if spans[0] is None or spans[1] is None:
        return False
    (path_a, offset_a), (path_b, offset_b) = spans

    def halves_equal(start: int, end: int) -> bool:
        return _same_bytes(path_a, offset_a + start, path_b, offset_b + start, end - start)

    middle = a.nbytes // 2 // BLOCK_BYTES * BLOCK_BYTES
    if middle == 0:
        return halves_equal(0, a.nbytes)
    import threading  # noqa: PLC0415 (a header command starts no thread but for a table this size)

    second: list[bool] = []
    worker = threading.Thread(target=lambda: second.append(halves_equal(middle, a.nbytes)), daemon=True)
    worker.start()
    first = halves_equal(0, middle)
    worker.join()
    return first and second == [True]


def _same_bytes(path_a: Path, offset_a: int, path_b: Path, offset_b: int, count: int) -> bool:
    """Whether `count` bytes at `offset_a` of `path_a` equal those at `offset_b` of `path_b`;
    False too when they cannot be read."""
    try:
        with open(path_a, "rb", buffering=0) as file_a, open(path_b, "rb", buffering=0) as file_b:
            return _equal_blocks(file_a.fileno(), offset_a, file_b.fileno(), offset_b, count)
    except OSError:
        return False


def _equal_blocks(fd_a: int, offset_a: int, fd_b: int, offset_b: int, count: int) -> bool:
    block_a, block_b = bytearray(min(BLOCK_BYTES, count)), bytearray(min(BLOCK_BYTES, count))
    for start in range(0, count, BLOCK_BYTES):
        size = min(BLOCK_BYTES, count - start)
        if size < len(block_a):  # the last, partial block
            block_a, block_b = bytearray(size), bytearray(size)
        if (os.preadv(fd_a, [block_a], offset_a + start) != size
                or os.preadv(fd_b, [block_b], offset_b + start) != size or block_a != block_b):
            return False
    return True
