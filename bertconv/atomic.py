"""Outputs appear whole or not at all.

Writers write into a temporary sibling of the destination, `.<name>.bertconv-partial-<pid>`,
which is renamed over the destination only once everything is written and synced. A run killed
midway leaves only such a temporary; the next run towards the same destination removes those
whose process is gone.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path
from typing import Iterator

from .errors import bad_input

PARTIAL_MARK = ".bertconv-partial-"
_RETIRED_MARK = ".bertconv-replaced-"


def _partial_pattern(name: str) -> re.Pattern:
    return re.compile(rf"^\.{re.escape(name)}({re.escape(PARTIAL_MARK)}|{re.escape(_RETIRED_MARK)})(\d+)$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(destination: Path) -> list[Path]:
    """Remove temporaries left beside `destination` by runs that are no longer alive."""
    pattern = _partial_pattern(destination.name)
    removed = []
    for sibling in destination.parent.iterdir() if destination.parent.is_dir() else ():
        match = pattern.match(sibling.name)
        if match and not _alive(int(match.group(2))):
            _remove(sibling)
            removed.append(sibling)
    return removed


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _fsync_tree(path: Path) -> None:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    for file in files:
        with open(file, "rb") as f:
            os.fsync(f.fileno())


@contextlib.contextmanager
def atomic_output(destination: Path, *, directory: bool, force: bool = False) -> Iterator[Path]:
    """Yield a temporary path to write into; on success it becomes `destination`.

    `directory` says whether the output is a directory (created empty) or a single file.
    An existing destination is replaced only with `force`. On any failure the temporary is
    removed and the destination is left as it was.
    """
    destination = Path(os.path.abspath(destination))
    if destination.exists() and not force:
        raise bad_input(destination, "already exists; pass --force to replace it")
    if not destination.parent.is_dir():
        raise bad_input(destination, f"parent directory {destination.parent} does not exist")
    clean_stale(destination)
    partial = destination.parent / f".{destination.name}{PARTIAL_MARK}{os.getpid()}"
    _remove(partial)
    if directory:
        partial.mkdir()
    try:
        yield partial
        _fsync_tree(partial)
        _replace(partial, destination)
    except BaseException:
        _remove(partial)
        raise


def _replace(partial: Path, destination: Path) -> None:
    if not destination.exists() or (destination.is_file() and partial.is_file()):
        os.replace(partial, destination)
        return
    retired = destination.parent / f".{destination.name}{_RETIRED_MARK}{os.getpid()}"
    os.replace(destination, retired)
    try:
        os.replace(partial, destination)
    except BaseException:
        os.replace(retired, destination)
        raise
    _remove(retired)
