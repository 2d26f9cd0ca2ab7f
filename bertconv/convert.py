"""Conversion: reader -> canonical tree -> writer, with the output written atomically."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import formats
from .atomic import atomic_output
from .checks.shapes import shape_problems
from .checks.verify import vocab_problem
from .errors import bad_input
from .tree import ParameterTree


@dataclass(frozen=True)
class WriteOptions:
    """What a writer may be told beyond the tree. Each writer reads the fields it knows.

    Attributes:
      max_shard_bytes: Hugging Face shard size limit.
      drop_untied_decoder: write a format without a decoder matrix even when the source's
        decoder differs from the embeddings (that decoder is lost).
      on_tensor: called with each tensor's byte count as it is written (progress).
    """

    max_shard_bytes: int | None = None
    drop_untied_decoder: bool = False
    on_tensor: Callable[[int], None] | None = None


def warnings_for(tree: ParameterTree) -> list[str]:
    """What a conversion goes ahead with but its user should hear about: a vocab.txt beside the
    source that does not match the word embeddings (writers that carry vocab.txt copy it as is)."""
    problem = vocab_problem(tree)
    return [problem] if problem else []


def convert(tree: ParameterTree, destination: Path, target: str, *, force: bool = False,
            options: WriteOptions = WriteOptions()) -> list[Path]:
    """Write `tree` to `destination` in the `target` family ("hf", ...); returns the files.

    Refuses a tree whose tensors disagree with its config, and a destination that would replace
    one of the inputs. Nothing is left at `destination` unless the whole write succeeded.
    """
    if target not in formats.TARGETS:
        raise bad_input(destination, f"unknown target {target!r}; choose one of {', '.join(formats.TARGETS)}")
    problems = shape_problems(tree)
    if problems:
        raise bad_input(tree.path, "tensors disagree with the config: " + "; ".join(problems[:5]))
    fmt = formats.TARGETS[target]
    destination = Path(os.path.abspath(destination))
    for source in tree.files:
        source = Path(os.path.abspath(source))
        if source == destination or destination in source.parents:
            raise bad_input(destination, f"writing here would replace the input {source}")
    try:
        with atomic_output(destination, directory=fmt.writes_directory, force=force) as partial:
            written = fmt.write(tree, partial, options=options)
    except OSError as exc:
        reason = "no space left on device" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
        raise bad_input(destination, f"cannot write: {reason}; nothing was left at the destination") from None
    return [destination / p.relative_to(partial) if fmt.writes_directory else destination for p in written]
