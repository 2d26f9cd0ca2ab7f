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

Read-only: bertconv writes Google's names (`--to tf`), which bert4keras loads directly.
"""

from __future__ import annotations

import re
from pathlib import Path

from ...containers.tensorflow import bundle as tf_bundle, prefix as tf_prefix, trackable
from ...errors import bad_input
from ...records import record
from ...tree import Ignored, ParameterTree
from . import bert4keras_table
from ..tensorflow import object_bundle
from ..assemble import Entry, assemble

FORMAT = "bert4keras-tf"
VARIABLE_SUFFIX = trackable.VARIABLE_SUFFIX
#: Object paths of the layers between the root and a variable (one more per nested model).
_LAYER_PATH = re.compile(r"^(?:layer_with_weights-\d+/|layer-\d+/)+")
GRAPH_REASON = trackable.GRAPH_REASON
UNNAMED_REASON = "a variable the object graph does not name"
WHY_GRAPH = ("its keys are `layer_with_weights-N/<role>`, and N does not identify a bert4keras layer "
             "(Pooler-Dense and MLM-Dense have the same shapes): its variables cannot be told apart by "
             "position alone")


@record
class Variable:
    """A model variable of the checkpoint: its bundle key, its Keras layer (first component of
    its `full_name`) and its role in that layer (the key's object path below the layer)."""

    key: str
    layer: str
    role: str


#: The most object-path components a bert4keras layer's variable has below its layer
#: (`q_dense/kernel`); other Keras libraries' layers nest deeper and have readers of their own.
MAX_ROLE_DEPTH = 2


def is_object_checkpoint(prefix: Path) -> bool:
    """A bundle whose keys are Keras object paths of layers in a Keras model (with the object
    graph to name them), as bert4keras' layers save them: `layer_with_weights-N/<role>`."""
    try:
        names = tf_bundle.BundleReader(prefix).entries
    except Exception:  # sniffing never fails: the reader reports a broken bundle properly
        return False
    paths = [trackable.object_path(name) for name in names if trackable.not_a_weight(name) is None]
    paths = [path for path in paths if path is not None]
    return bool(paths) and all(_LAYER_PATH.match(path) and _LAYER_PATH.sub("", path).count("/") < MAX_ROLE_DEPTH
                               for path in paths)


def sniff(path: Path) -> str | None:
    prefix = tf_prefix.bundle_prefix_of(path)
    return FORMAT if prefix is not None and is_object_checkpoint(prefix) else None


def candidates(directory: Path) -> list[Path]:
    return [p for p in tf_prefix.bundle_prefixes(directory) if is_object_checkpoint(p)]


def read(path: Path, *, config_path: Path | None = None, num_heads: int | None = None) -> ParameterTree:
    """Read a bert4keras model's object-based checkpoint (flat, pre-training or nested model)."""
    prefix = tf_prefix.resolve_prefix(path)
    reader = tf_bundle.BundleReader(prefix)
    variables, ignored = _classify(reader)
    layers = list(dict.fromkeys(v.layer for v in variables))
    bert4keras_table.refuse_non_bert(reader.index_path, layers, what="a Keras object-based checkpoint",
                               saved_by="build_transformer_model(...) saved with save_weights('bert_model.ckpt')")
    entries, spelling = [], {}
    for layer in layers:
        mine = [v for v in variables if v.layer == layer]
        kind = bert4keras_table.kind_of(layer)
        if kind is None:
            ignored.extend(_ignored(reader, v.key, bert4keras_table.foreign_layer_reason(layer)) for v in mine)
            continue
        _check_roles(reader.index_path, layer, kind, [v.role for v in mine])
        for v in mine:
            spelling[v.key] = f"{layer}/{v.role}"
            entries.append(Entry(v.key, reader.tensor(v.key), reader.data_path(reader.entries[v.key].shard_id)))
    directory = prefix.parent
    vocab = directory / "vocab.txt"
    # The data files its entries name (a header may claim any number of shards; only these are read).
    shards = sorted({entry.shard_id for entry in reader.entries.values()})
    config = bert4keras_table.read_config(prefix, config_path)
    return assemble(
        format_name=FORMAT, path=prefix, entries=entries, table=bert4keras_table.TABLE,
        config=config, default_activation=bert4keras_table.DEFAULT_ACTIVATION,
        num_heads=num_heads, files=[reader.index_path] + [reader.data_path(i) for i in shards],
        vocab=vocab if vocab.is_file() else None, extra_ignored=ignored,
        rename=lambda key: spelling.get(key, key),
    )


def _classify(reader: tf_bundle.BundleReader) -> tuple[list[Variable], list[Ignored]]:
    """The model variables of the bundle, each named by the object graph, and the rest, each
    with the reason it is not a model weight."""
    full_names = trackable.read_variable_names(reader, why=WHY_GRAPH)
    variables, ignored = [], []
    for key, entry in reader.entries.items():
        reason = trackable.not_a_weight(key)
        if reason is None and (not key.endswith(VARIABLE_SUFFIX) or entry.dtype is None):
            reason = f"not a variable value ({tf_bundle.tf_dtype_name(entry.tf_dtype)})"
        if reason is None and not full_names.get(key):
            reason = UNNAMED_REASON
        if reason is not None:
            ignored.append(_ignored(reader, key, reason))
            continue
        role = _LAYER_PATH.sub("", key[: -len(VARIABLE_SUFFIX)])
        variables.append(Variable(key, full_names[key].split("/", 1)[0], role))
    return variables, ignored


def _ignored(reader: tf_bundle.BundleReader, key: str, reason: str) -> Ignored:
    entry = reader.entries[key]
    return Ignored(key, reason, entry.numel if entry.dtype is not None else 0,
                   tf_bundle.tf_dtype_name(entry.tf_dtype), entry.shape)


def _check_roles(path: Path, layer: str, kind: bert4keras_table.LayerKind, roles: list[str]) -> None:
    """A bert4keras layer holds exactly the roles of its kind: no weight is dropped unseen."""
    if any(sorted(roles) == sorted(slot.role for slot in option) for option in kind.options()):
        return
    raise bad_input(path, f"layer {layer!r} ({kind.keras_class}) holds {len(roles)} variables "
                          f"({', '.join(sorted(roles))}), expected {kind.expected()}; not a layout bertconv knows")


