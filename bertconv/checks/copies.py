"""Stored copies a framework overwrites at load: does the overwritten one hold the same values?

A format may store a parameter twice where its framework keeps one variable and loads one copy
over the other (transformers' TF BERT: the encoder's embeddings, then the MLM head's copies). The
reader puts the copy the framework computes with in the tree and lists the other as an ignored
entry naming the parameter it copies (`Ignored.copy_of`). Where the two differ, the file holds
two models and a reader that picked the other copy would compute the other one: `convert` says
which copy was used, `verify` fails naming both. `inspect` reads headers only and says that the
copies were not compared: reading them was most of its time (a BERT-large `tf_model.h5`'s two
125 MB word-embedding tables), and on a file not in the page cache, a read of the disk.
"""

from __future__ import annotations

from ..records import record
from ..tree import Ignored, Parameter, ParameterTree
from .arrays import describe_difference


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


def overwritten_copies(tree: ParameterTree) -> list[Ignored]:
    """The stored copies in `tree.ignored` that the framework overwrites with a parameter of the tree."""
    return [entry for entry in tree.ignored
            if entry.copy_of is not None and entry.tensor is not None and entry.copy_of in tree]


def copies_not_compared(tree: ParameterTree) -> list[str]:
    """A note for a header-only look (`inspect`) at a tree that stores copies: they were not
    compared, and which commands compare them."""
    copies = overwritten_copies(tree)
    if not copies:
        return []
    one = len(copies) == 1
    return [f"the {'overwritten copy' if one else f'{len(copies)} overwritten copies'} listed as ignored "
            f"{'was' if one else 'were'} not compared with the {'copy' if one else 'copies'} read: inspect reads "
            f"headers only; bertconv verify compares their values (so does convert)"]


def differing_copies(tree: ParameterTree) -> list[DifferingCopy]:
    """Every overwritten copy in `tree.ignored` that is not bit-equal to the parameter it copies
    (reads both tensors)."""
    found = []
    for entry in overwritten_copies(tree):
        used = tree[entry.copy_of]
        from .same_bytes import same_stored_bits  # here: ctypes and the maps (5 ms) for a tree that stores copies only

        if same_stored_bits(entry.tensor, used.tensor, two_threads=True):  # one table at a time: both cores on it
            continue
        difference = describe_difference(entry.tensor.read(), entry.tensor.dtype, used.tensor.read(), used.tensor.dtype)
        if difference is not None:
            found.append(DifferingCopy(entry, used, difference))
    return found
