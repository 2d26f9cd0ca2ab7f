"""The files around a Hugging Face checkpoint that transformers' TF and Flax saves share with its
PyTorch ones: `config.json`, `vocab.txt`, and a shard index `<file>.index.json` whose
`weight_map` names each tensor's shard. Not a format: helpers for `hf`, `hf_tf` and `hf_flax`.
"""

from __future__ import annotations

import json
from pathlib import Path

from ... import json_text, paths
from ...config import BertConfig
from ...errors import bad_input
from ...config.dialects import hf_config_dict
from ...tree import ParameterTree
from ..configs import config_beside as _config_beside
from .classes import architecture

CONFIG_FILE = "config.json"
VOCAB_FILE = "vocab.txt"
INDEX_SUFFIX = ".index.json"
#: transformers computes a config's "gelu" as the exact erf form, in TF and Flax as in PyTorch.
DEFAULT_ACTIVATION = "gelu"


def config_beside(path: Path, config_path: Path | None) -> BertConfig | None:
    """The config given, else `config.json` beside the checkpoint, else None (sizes from shapes)."""
    return _config_beside(Path(path).parent, config_path, [CONFIG_FILE], activation=DEFAULT_ACTIVATION)


def vocab_beside(path: Path) -> Path | None:
    vocab = Path(path).parent / VOCAB_FILE
    return vocab if vocab.is_file() else None


def index_shards_end_with(index_path: Path, suffix: str) -> bool:
    """Whether a shard index's first shard file ends with `suffix` (for sniffing); never raises."""
    try:
        weight_map = json_text.loads(Path(index_path).read_text(encoding="utf-8")).get("weight_map", {})
        return str(next(iter(weight_map.values()), "")).endswith(suffix)
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return False


def weight_map(index_path: Path) -> dict[str, Path]:
    """A shard index's `weight_map`: tensor name -> shard file, every shard checked to exist
    inside the index's directory."""
    index_path = Path(index_path)
    try:
        mapping = json_text.loads(index_path.read_text(encoding="utf-8"))["weight_map"]
        if not isinstance(mapping, dict):
            raise TypeError("weight_map is not an object")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise bad_input(index_path, f"not a shard index with a weight_map: {exc}") from None
    shards: dict[str, Path] = {}
    for name, shard in mapping.items():
        shard = str(shard)
        if shard not in shards:
            if Path(shard).is_absolute() or ".." in Path(shard).parts:
                raise bad_input(index_path, f"shard {shard!r} lies outside the checkpoint's directory")
            if (problem := paths.file_problem(index_path.parent / shard)) is not None:
                raise bad_input(index_path, f"shard {shard!r} listed in the weight_map {problem}")
            shards[shard] = index_path.parent / shard
    return {str(name): shards[str(shard)] for name, shard in mapping.items()}


def write_config(tree: ParameterTree, directory: Path, *, dtype: str) -> list[Path]:
    """`config.json` for `tree`; the files written. (`convert` carries vocab.txt and the other
    tokenizer files along for every format.)"""
    config = hf_config_dict(tree.config, architectures=[architecture(tree)], dtype=dtype)
    config["tie_word_embeddings"] = not tree.has_untied_decoder
    (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return [directory / CONFIG_FILE]
