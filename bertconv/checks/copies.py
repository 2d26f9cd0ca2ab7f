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

from ..records import record
from ..tensor import LazyTensor
from ..tree import Ignored, Parameter, ParameterTree
from .arrays import describe_difference

#: Bytes of each copy compared at a time: two such blocks are all a comparison of copies stored
#: as plain bytes holds (a 732 MiB embedding table and its copy are not both mapped in).
BLOCK_BYTES = 16 * 2**20


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
    (`copy_span`), hold the same bytes, read a block at a time. False when they differ or either
    is not stored so: the caller then compares their values."""
    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
        return False
    spans = a.copy_span(), b.copy_span()
    if spans[0] is None or spans[1] is None:
        return False
    (path_a, offset_a), (path_b, offset_b) = spans
    fd_a, fd_b = os.open(path_a, os.O_RDONLY), os.open(path_b, os.O_RDONLY)
    try:
        for start in range(0, a.nbytes, BLOCK_BYTES):
            count = min(BLOCK_BYTES, a.nbytes - start)
            block = os.pread(fd_a, count, offset_a + start)
            if len(block) != count or block != os.pread(fd_b, count, offset_b + start):
                return False
        return True
    finally:
        os.close(fd_a)
        os.close(fd_b)
