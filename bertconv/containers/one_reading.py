"""What is learnt of a checkpoint file, learnt once per reading.

Finding a checkpoint's format asks every reader of its container whether a file is theirs, and
each parses it: the readers of HDF5 files (bert4keras, keras-bert, bert-for-tf2, transformers'
tf_model.h5, keras-hub) each open the file, check its global heaps and list its layers' weight
names (or parse its Keras 3 layout); those of torch pickles (fairseq, fair-esm, Megatron-LM,
transformers) each unpickle the file's records. Then one of them reads it. `formats.read` wraps
all of that in `one_reading()`, within which `remembered(path, question, learn)` gives what
`learn()` gave the first time that question was asked of that file, as long as the file is the
same one (device, inode, size, modification and change times). Outside such a block every call
learns afresh: a file rewritten in place within one clock tick keeps its size and times, and a
check skipped on it (the global heaps HDF5 would loop on) could hang the process. What is
remembered is shared by every reader that asks: none may change it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import TypeVar

    T = TypeVar("T")

#: (question, file identity) -> answer, within the current `one_reading` block; None outside one.
_answers: ContextVar[dict | None] = ContextVar("bertconv_reading_answers", default=None)


@contextmanager
def one_reading() -> Iterator[None]:
    """A block within which each question about each unchanged file is answered once."""
    token = _answers.set({})
    try:
        yield
    finally:
        _answers.reset(token)


def _identity(path: Path, question: str) -> tuple | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (question, stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def known(path: Path, question: str) -> object | None:
    """What this question about this unchanged file was answered within the current `one_reading`
    block, if it was asked; None otherwise (nothing is learnt)."""
    answers = _answers.get()
    if not answers:
        return None
    key = _identity(path, question)
    return None if key is None else answers.get(key)


def remembered(path: Path, question: str, learn: Callable[[], T]) -> T:
    """`learn()`, or within a `one_reading` block what it returned for this question and file
    before (an exception is not remembered: the next call learns again)."""
    answers = _answers.get()
    if answers is None:
        return learn()
    key = _identity(path, question)
    if key is None:
        return learn()  # let the reader report what is wrong with the path
    if key not in answers:
        answers[key] = learn()
    return answers[key]
