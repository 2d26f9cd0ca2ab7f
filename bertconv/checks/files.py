"""Are the bytes a checkpoint's header promises really on disk? A stat per file, no reads.

A TF bundle's index places each tensor at an offset of a data shard; a truncated or missing
shard is invisible to every header-only check, and a loader finds out only when it reads. This
check compares each file's size with the furthest byte any tensor needs from it.
"""

from __future__ import annotations

import os
from pathlib import Path

from .. import paths
from ..tree import ParameterTree


def data_file_problems(tree: ParameterTree) -> list[str]:
    """A sentence per data file that is absent, not a regular file, or shorter than the tensors
    placed in it need (naming the tensor that reaches furthest); empty when all are whole."""
    furthest: dict[Path, tuple[int, str]] = {}
    held: dict[Path, int] = {}
    for param in tree:
        storage = param.tensor.storage()
        if storage is None:
            continue
        file, offset, nbytes = storage
        held[file] = held.get(file, 0) + 1
        if offset + nbytes > furthest.get(file, (-1, ""))[0]:
            furthest[file] = (offset + nbytes, f"{param.source} ({param.name})")
    problems = []
    for file, (end, tensor) in furthest.items():
        kind = paths.kind_of(Path(os.path.realpath(file)))  # data files are often links (HF cache)
        count = f"{held[file]} tensor{'s' if held[file] != 1 else ''}"
        if kind is None:
            problems.append(f"{file}: data file does not exist; the header places {count} in it, so the "
                            f"checkpoint cannot be loaded")
        elif kind != "file":
            problems.append(f"{file}: data file is {kind if kind != 'directory' else 'a directory'}, not a regular file")
        elif os.path.getsize(file) < end:
            problems.append(f"{file}: data file has {os.path.getsize(file):,} bytes, but {tensor} ends at byte "
                            f"{end:,}: the file is truncated")
    return problems
