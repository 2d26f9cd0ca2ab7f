"""A Hugging Face cache laid out as huggingface_hub lays it out, for tests (no network, and no
huggingface_hub needed: tests/test_hub_cache.py checks with huggingface_hub's own `scan_cache_dir`,
`try_to_load_from_cache` and `snapshot_download` that it reads this layout as its own).

huggingface_hub (`file_download._hf_hub_download_to_cache_dir`, `_create_symlink`,
`_cache_commit_hash_for_specific_revision`) stores each file once as `blobs/<etag>` (an LFS
file's etag is its sha256, a git file's the git blob sha1), links it from
`snapshots/<commit>/<filename>` by a relative symlink, and writes each ref's commit hash to
`refs/<ref>` with no newline.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

#: Files huggingface_hub stores through LFS (their etag is their sha256); the others are git blobs.
LFS_SUFFIXES = (".safetensors", ".bin", ".h5", ".msgpack", ".model")


def etag(name: str, data: bytes) -> str:
    if name.endswith(LFS_SUFFIXES):
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def folder_of(cache: Path, repo_id: str) -> Path:
    return Path(cache) / ("models--" + repo_id.replace("/", "--"))


def add_snapshot(cache: Path, repo_id: str, commit: str, files: dict[str, Path | bytes],
                 refs: tuple[str, ...] = ()) -> Path:
    """Lay out `files` (name in the repo -> a file to copy, or bytes) as `repo_id`'s snapshot at
    `commit`, with `refs` (branches, tags) pointing to it; the snapshot directory."""
    folder = folder_of(cache, repo_id)
    snapshot = folder / "snapshots" / commit
    for name, source in files.items():
        data = source if isinstance(source, bytes) else Path(source).read_bytes()
        blob = folder / "blobs" / etag(name, data)
        if not blob.exists():
            blob.parent.mkdir(parents=True, exist_ok=True)
            blob.write_bytes(data)
        pointer = snapshot / name
        pointer.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(blob, pointer.parent), pointer)
    snapshot.mkdir(parents=True, exist_ok=True)
    for ref in refs:
        (folder / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (folder / "refs" / ref).write_text(commit)
    return snapshot


def files_of(directory: Path, names: tuple[str, ...] | None = None) -> dict[str, Path]:
    """A fixture directory's files (or those of `names` present), by name."""
    return {p.name: p for p in sorted(Path(directory).iterdir())
            if p.is_file() and (names is None or p.name in names)}


def state(folder: Path) -> dict[str, str]:
    """Every entry under a cache folder: a symlink's target, a file's sha256 (to show nothing changed)."""
    out = {}
    for path in sorted(Path(folder).rglob("*")):
        if path.is_symlink():
            out[str(path)] = "-> " + os.readlink(path)
        elif path.is_file():
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out
