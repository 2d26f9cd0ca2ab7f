"""Which TensorFlow bundle a path names: a prefix (`x/bert_model.ckpt`), its `.index`, one of
its data files, or a directory holding one bundle or a `checkpoint` state file naming one.

The state file is the text proto `tf.train.CheckpointManager` (and TF1's `Saver`) keeps beside
its bundles; its `model_checkpoint_path` names the latest.
"""

from __future__ import annotations

import re
from pathlib import Path

from ...errors import bad_input

INDEX_SUFFIX = ".index"
#: Patterns compiled on first use (by `re`'s cache): listing a directory's bundles needs neither.
DATA_FILE_PATTERN = r"^(?P<prefix>.+)\.data-(?P<shard>\d{5})-of-(?P<shards>\d{5})$"
CHECKPOINT_STATE_FILE = "checkpoint"
CHECKPOINT_STATE_LINE = r'^\s*model_checkpoint_path\s*:\s*"(?P<path>(?:[^"\\]|\\.)*)"\s*$'


def _index_exists(prefix: Path) -> bool:
    return Path(f"{prefix}{INDEX_SUFFIX}").is_file()


def _prefix_from_state_file(directory: Path) -> Path | None:
    """The bundle named by `<directory>/checkpoint` if it exists here, else None.

    The state file is a text proto; its path may be relative to the directory, or absolute from
    another machine (then the bundle of the same name in `directory` is used).
    """
    state = directory / CHECKPOINT_STATE_FILE
    if not state.is_file():
        return None
    try:
        text = state.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        match = re.match(CHECKPOINT_STATE_LINE, line)
        if match:
            named = Path(re.sub(r"\\(.)", r"\1", match.group("path")))  # undo text-proto escapes
            for candidate in (directory / named, directory / named.name):
                if _index_exists(candidate):
                    return candidate
    return None


def _prefix_in_directory(directory: Path) -> Path:
    from_state = _prefix_from_state_file(directory)
    if from_state is not None:
        return from_state
    indexes = sorted(directory.glob(f"*{INDEX_SUFFIX}"))
    if len(indexes) == 1:
        return indexes[0].with_name(indexes[0].name[:-len(INDEX_SUFFIX)])
    if not indexes:
        raise bad_input(directory, "no TensorFlow checkpoint here (no *.index file, and no "
                                   "'checkpoint' file naming one)")
    names = ", ".join(index.name for index in indexes)
    raise bad_input(directory, f"holds {len(indexes)} checkpoints ({names}); pass the prefix of the "
                               f"one you mean, e.g. {indexes[0].with_suffix('')}")


def bundle_prefixes(directory: Path) -> list[Path]:
    """The bundles in `directory`: the one its `checkpoint` file names, else each `*.index` (each
    then judged by its reader); none, without raising, where there is neither."""
    try:
        return [resolve_prefix(directory)]
    except Exception:  # noqa: BLE001 - no usable checkpoint file: list the indexes
        indexes = sorted(directory.glob(f"*{INDEX_SUFFIX}"))
        return [index.with_name(index.name[:-len(INDEX_SUFFIX)]) for index in indexes]


def bundle_prefix_of(path: str | Path) -> Path | None:
    """The bundle prefix a file path (a prefix, its `.index` or a data file) names, or None when
    it names no bundle; never raises (for sniffing; `resolve_prefix` explains failures)."""
    path = Path(path)
    if path.is_dir():
        return None
    try:
        return resolve_prefix(path)
    except Exception:  # noqa: BLE001 - a sniff answers "no", the reader reports errors properly
        return None


def resolve_prefix(path: str | Path) -> Path:
    """The bundle prefix meant by `path`.

    Accepts a prefix ("x/bert_model.ckpt"), its ".index", one of its data files
    (".data-00000-of-00001"), or a directory holding a `checkpoint` state file or exactly one
    "*.index". Raises `BadInput` saying what was looked for when there is no such bundle.
    """
    path = Path(path)
    if path.is_dir():
        return _prefix_in_directory(path)
    prefix = path
    data_match = re.match(DATA_FILE_PATTERN, path.name)
    if data_match:
        prefix = path.with_name(data_match.group("prefix"))
    elif path.name.endswith(INDEX_SUFFIX):
        prefix = path.with_name(path.name[:-len(INDEX_SUFFIX)])
    if _index_exists(prefix):
        return prefix
    if not path.exists():
        raise bad_input(path, f"does not exist (looked for the checkpoint index {prefix}{INDEX_SUFFIX})")
    raise bad_input(path, f"is not a TensorFlow checkpoint: {prefix}{INDEX_SUFFIX} does not exist")
