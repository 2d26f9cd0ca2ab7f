"""The config that applies to a checkpoint: `--config` if given, else the first of its format's
config file names found beside it, else none (the sizes then come from the shapes).

A config name that is there in any form (a dangling symlink as a half-downloaded Hugging Face
cache leaves, a directory, a FIFO) is found, and refused when it cannot be read: skipping it
would fall back to defaults (the head count from H / 64) that the config may contradict.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ..config import BertConfig
from ..errors import bad_input
from ..config.dialects import load_config_file
from ..paths import why_not_a_file


def find_config(directory: Path, config_path: Path | None, names: Iterable[str]) -> Path | None:
    """`config_path` if given, else the first of `names` that is there in `directory` in any form,
    else None. Raises BadInput when the config found is there but is not a readable file."""
    if config_path is not None:
        return _readable(Path(config_path), "name a readable one")
    for name in names:
        candidate = Path(directory) / name
        if os.path.lexists(candidate):
            return _readable(candidate, "repair or remove it, or name the config to use with --config")
    return None


def _readable(config: Path, remedy: str) -> Path:
    """`config`, unless it is there and cannot be read as a file (a missing one is left to the
    reader's own message)."""
    why = why_not_a_file(config)
    if why is not None:
        raise bad_input(config, f"{why}; the config is there but cannot be read: {remedy}")
    return config


def config_beside(directory: Path, config_path: Path | None, names: Iterable[str], *, activation: str,
                  family: str = "bert") -> BertConfig | None:
    """The config `find_config` finds, read as the checkpoint's format reads one: "gelu" in a
    Google-style file means `activation`, and `family` is the model type of a file naming none."""
    found = find_config(directory, config_path, names)
    return None if found is None else load_config_file(found, gelu_means_for_google=activation, family=family)
