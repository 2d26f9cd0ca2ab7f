"""bert4keras models saved as TensorFlow object-based checkpoints: the second bert4keras reader.

`train_model.save_weights('bert_model.ckpt')` (bert4keras' pre-training script) writes a tensor
bundle whose keys are object paths (`layer_with_weights-7/q_dense/kernel/.ATTRIBUTES/
VARIABLE_VALUE`), not Google's names, plus the optimizer's state; bert4keras' own
`build_transformer_model(config, checkpoint_path)` cannot load it. The position N in
`layer_with_weights-N` does not identify a layer (Pooler-Dense and MLM-Dense have the same
shapes and interleave), so each variable's layer comes from the object graph saved beside it:
its `full_name` starts with the bert4keras layer name. The key's tail after the last
`layer_with_weights-N/` is the variable's role inside that layer. Together they spell the
bert4keras table's names (`Transformer-0-MultiHeadSelfAttention/q_dense/kernel`), so this reader
shares the bert4keras table and yields the same canonical tree; every writer works on it.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..config import load_config_file
from ..containers import tf_bundle, trackable
from ..errors import bad_input
from ..tree import Ignored, ParameterTree
from . import bert4keras
from .assemble import Entry, assemble

FORMAT = "bert4keras-tf"
VARIABLE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
#: Object paths of the layers between the root and a variable (one more per nested model).
_LAYER_PATH = re.compile(r"^(?:layer_with_weights-\d+/|layer-\d+/)+")

#: Keys that are saved state but not model weights, and why (by prefix or infix).
_NOT_WEIGHTS = (
    ("optimizer/", "optimizer state (iterations, learning rate, moment slots)"),
    ("/.OPTIMIZER_SLOT/", "optimizer slot of a weight (legacy Keras optimizer)"),
    ("save_counter/", "checkpoint bookkeeping (save counter)"),
)


def is_object_checkpoint(prefix: Path) -> bool:
    """A bundle whose keys are Keras object paths (with the object graph to name them)."""
    try:
        names = tf_bundle.BundleReader(prefix).entries
    except Exception:  # sniffing never fails: the reader reports a broken bundle properly
        return False
    return any(name.endswith(VARIABLE_SUFFIX) for name in names)


def sniff(path: Path) -> str | None:
    if path.is_dir():
        return None
    try:
        prefix = tf_bundle.resolve_prefix(path)
    except Exception:
        return None
    return FORMAT if is_object_checkpoint(prefix) else None


def candidates(directory: Path) -> list[Path]:
    try:
        prefixes = [tf_bundle.resolve_prefix(directory)]
    except Exception:
        prefixes = [p.with_name(p.name[:-len(tf_bundle.INDEX_SUFFIX)])
                    for p in sorted(directory.glob("*" + tf_bundle.INDEX_SUFFIX))]
    return [p for p in prefixes if is_object_checkpoint(p)]


def _not_a_weight(key: str) -> str | None:
    for marker, reason in _NOT_WEIGHTS:
        if key.startswith(marker) or (marker.startswith("/") and marker in key):
            return reason
    return None


def read(path: Path, *, config_path: Path | None = None, num_heads: int | None = None) -> ParameterTree:
    """Read a bert4keras model's object-based checkpoint (flat, pre-training or nested model)."""
    prefix = tf_bundle.resolve_prefix(path)
    reader = tf_bundle.BundleReader(prefix)
    if trackable.GRAPH_KEY not in reader.entries:
        raise bad_input(reader.index_path, f"object-based checkpoint without {trackable.GRAPH_KEY}: "
                                           f"its variables cannot be told apart by position alone")
    nodes = trackable.parse_object_graph(reader.read_string_scalar(trackable.GRAPH_KEY), source=reader.index_path)
    full_names = trackable.variable_names(nodes)
    entries: list[Entry] = []
    spelling: dict[str, str] = {}
    ignored: list[Ignored] = []
    for key, entry in reader.entries.items():
        reason = None
        if key == trackable.GRAPH_KEY:
            reason = "the object graph naming the saved objects (not a weight)"
        elif _not_a_weight(key):
            reason = _not_a_weight(key)
        elif not key.endswith(VARIABLE_SUFFIX) or entry.dtype is None:
            reason = f"not a variable value ({tf_bundle.tf_dtype_name(entry.tf_dtype)})"
        elif key not in full_names:
            reason = "a variable the object graph does not name"
        if reason:
            ignored.append(Ignored(key, reason, entry.numel if entry.dtype is not None else 0,
                                   tf_bundle.tf_dtype_name(entry.tf_dtype), entry.shape))
            continue
        layer = full_names[key].split("/", 1)[0]
        role = _LAYER_PATH.sub("", key[: -len(VARIABLE_SUFFIX)])
        spelling[key] = f"{layer}/{role}"
        entries.append(Entry(key, reader.tensor(key), reader.data_path(entry.shard_id)))
    directory = prefix.parent
    config_file = config_path or directory / bert4keras.CONFIG_FILE
    config = None
    if config_path is not None or config_file.is_file():
        config = load_config_file(config_file, gelu_means_for_google=bert4keras.DEFAULT_ACTIVATION)
    files = [reader.index_path] + [reader.data_path(i) for i in range(reader.num_shards)]
    return assemble(
        format_name=FORMAT, path=prefix, entries=entries, table=bert4keras.TABLE, config=config,
        default_activation=bert4keras.DEFAULT_ACTIVATION, num_heads=num_heads, files=files,
        extra_ignored=ignored, rename=lambda key: spelling.get(key, key),
    )
