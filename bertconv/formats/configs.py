"""The config that applies to a checkpoint: `--config` if given, else the first of its format's
config file names found beside it, else none (the sizes then come from the shapes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from ..config import BertConfig
from ..families.dialects import load_config_file


def find_config(directory: Path, config_path: Path | None, names: Iterable[str]) -> Path | None:
    """`config_path` if given, else the first file of `names` in `directory`, else None."""
    if config_path is not None:
        return Path(config_path)
    return next((Path(directory) / name for name in names if (Path(directory) / name).is_file()), None)


def config_beside(directory: Path, config_path: Path | None, names: Iterable[str], *, activation: str,
                  family: str = "bert") -> BertConfig | None:
    """The config `find_config` finds, read as the checkpoint's format reads one: "gelu" in a
    Google-style file means `activation`, and `family` is the model type of a file naming none."""
    found = find_config(directory, config_path, names)
    return None if found is None else load_config_file(found, gelu_means_for_google=activation, family=family)
