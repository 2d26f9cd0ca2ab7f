"""TF2 object-based checkpoints whose object paths name the BERT's variables.

`tf.train.Checkpoint(...).write()` and Keras' `save_weights('x.ckpt')` key every variable by the
path of attribute names from the saved root to it, plus `/.ATTRIBUTES/VARIABLE_VALUE`
(`encoder/_transformer_layers/0/_attention_layer/_query_dense/kernel/...`). Where a library's
attribute names spell out what each variable is (the TF2 Model Garden, bert-for-tf2), the key
alone identifies it: the path is read through the library's table, and the index is enough for
`inspect` and `audit`, as `tf.train.list_variables` needs no data file either. The object graph
(`_CHECKPOINTABLE_OBJECT_GRAPH`, stored in the data file) is not needed.

The model may sit anywhere in the saved object tree (`model/encoder_network/...`, or
`layer_with_weights-0/...` inside a user's Keras model): its scope is found from the table
(`scope.find_scope`) and reported; optimizer state and everything outside the BERT are listed as
ignored with their reasons.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from ...containers.tensorflow import prefix as tf_prefix, trackable
from ...errors import bad_input
from ...lazy import lazy_module
from ...records import record
from ...tensor import LazyTensor, ReshapedTensor
from ...tree import Ignored, ParameterTree
from ..assemble import Entry, assemble
from ..configs import config_beside
from ..scope import find_scope, find_scopes
from ..table import Table

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from ...containers.tensorflow import bundle as tf_bundle
else:  # imported on first use: a directory with no bundle in it (a Keras .h5 beside) needs none
    tf_bundle = lazy_module("bertconv.containers.tensorflow.bundle")

CONFIG_FILE = "bert_config.json"
VOCAB_FILE = "vocab.txt"
UNNAMED_REASON = "a variable the object graph does not name"
OUTSIDE_SCOPE_REASON = ("outside the scope {scope!r} the BERT was found under: another object of the saved "
                        "model (a task head on top, say)")


@record
class ObjectLayout:
    """How one library's object-based checkpoints name a BERT.

    Attributes:
      format_name: the reader's format name (its first word picks the numerics family).
      table: object paths below the scope -> canonical names.
      default_activation: what the library computes when the config does not say.
      canonical_shape: (canonical name, stored shape) -> the canonical shape, for a library that
        stores a parameter with more axes (per-head attention kernels); None keeps the shape.
      heads_from_shapes: (canonical name, stored shape) -> the head count the shape shows, or None.
      names_in_graph: the keys do not name the variables (a SavedModel keys them `variables/N`):
        their names are the object graph's `full_name`s, and the data file that holds the graph is
        needed even for `inspect`; `why_graph` says so in the message when it is absent.
    """

    format_name: str
    table: Table
    default_activation: str
    canonical_shape: Callable[[str, tuple[int, ...]], tuple[int, ...] | None] = lambda name, shape: None
    heads_from_shapes: Callable[[str, tuple[int, ...]], int | None] = lambda name, shape: None
    names_in_graph: bool = False
    why_graph: str = ""


_PER_HEAD = ("query", "key", "value")


def keras_attention_shape(name: str, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """Keras MultiHeadAttention's per-head shapes (EinsumDense, as the TF2 Model Garden stores
    them) folded into BERT's: query/key/value kernels
    [H, A, H/A] -> [H, H], their biases [A, H/A] -> [H], the output kernel [A, H/A, H] -> [H, H]."""
    parts = name.split(".")
    if len(parts) < 5 or parts[2] != "attention":
        return None
    if parts[3] in _PER_HEAD and parts[4] == "kernel" and len(shape) == 3:
        return (shape[0], shape[1] * shape[2])
    if parts[3] in _PER_HEAD and parts[4] == "bias" and len(shape) == 2:
        return (shape[0] * shape[1],)
    if parts[3] == "output" and parts[4] == "kernel" and len(shape) == 3:
        return (shape[0] * shape[1], shape[2])
    return None


def keras_attention_heads(name: str, shape: tuple[int, ...]) -> int | None:
    """A: the middle axis of a per-head query kernel [H, A, H/A]."""
    return shape[1] if name.endswith(".attention.query.kernel") and len(shape) == 3 else None


def variable_paths(reader: tf_bundle.BundleReader) -> tuple[dict[str, str], list[Ignored]]:
    """key -> object path of every variable of the bundle, and every other entry as ignored."""
    paths, ignored = {}, []
    for key, entry in reader.entries.items():
        reason = trackable.not_a_weight(key)
        path = trackable.object_path(key)
        if reason is None and (path is None or entry.dtype is None):
            reason = f"not a variable value ({tf_bundle.tf_dtype_name(entry.tf_dtype)})"
        if reason is not None:
            ignored.append(_ignored(entry, key, reason))
            continue
        paths[key] = path
    return paths, ignored


def holds(prefix: Path, table: Table) -> bool:
    """Whether the bundle at `prefix` is an object-based checkpoint whose paths name a word
    embedding and an encoder layer through `table` (read from the index alone; never raises)."""
    try:
        reader = tf_bundle.BundleReader(prefix)
        paths, _ = variable_paths(reader)
        scope = find_scope(reader.index_path, paths.values(), table)
    except Exception:  # sniffing never fails: the reader reports a broken bundle properly
        return False
    found = {m.canonical for p in paths.values() if p.startswith(scope)
             for m in [table.match(p[len(scope):])] if m is not None}
    return "embeddings.word" in found and any(name.startswith("layers.") for name in found)


def sniffer(format_name: str, table: Table):
    """`sniff(path)` for a `Format` entry: the format name if `path` names such a bundle."""
    def sniff(path: Path) -> str | None:
        prefix = tf_prefix.bundle_prefix_of(path)
        return format_name if prefix is not None and holds(prefix, table) else None
    return sniff


def candidate_finder(table: Table):
    """`candidates(directory)` for a `Format` entry."""
    def candidates(directory: Path) -> list[Path]:
        return [p for p in tf_prefix.bundle_prefixes(directory) if holds(p, table)]
    return candidates


def read(path: Path, layout: ObjectLayout, *, config_path: Path | None = None,
         num_heads: int | None = None) -> ParameterTree:
    """Read an object-based checkpoint through `layout` (headers only; the data file is opened
    only when a tensor is read)."""
    prefix = tf_prefix.resolve_prefix(path)
    reader = tf_bundle.BundleReader(prefix)
    paths, ignored = variable_paths(reader)
    if layout.names_in_graph:
        full_names = trackable.read_variable_names(reader, why=layout.why_graph)
        for key in [key for key in paths if not full_names.get(key)]:
            ignored.append(_ignored(reader.entries[key], key, UNNAMED_REASON))
            del paths[key]
        paths = {key: full_names[key] for key in paths}
        scopes = find_scopes(reader.index_path, paths.values(), layout.table)
    else:
        scopes = [find_scope(reader.index_path, paths.values(), layout.table)]
    entries, names, heads_seen = [], {}, set()
    for key, path_ in paths.items():
        entry = reader.entries[key]
        scope = next((s for s in scopes if path_.startswith(s) and layout.table.match(path_[len(s):])), None)
        if scope is None and not any(path_.startswith(s) for s in scopes):
            ignored.append(_ignored(entry, key, OUTSIDE_SCOPE_REASON.format(scope=scopes[0])))
            continue
        scope = scope if scope is not None else scopes[0]
        match = layout.table.match(path_[len(scope):])
        tensor: LazyTensor = reader.tensor(key)
        if match is not None:
            shape = layout.canonical_shape(match.canonical, tensor.shape)
            if shape is not None:
                if math.prod(shape) != tensor.numel:
                    raise bad_input(reader.index_path, f"tensor {key!r} ({match.canonical}) has shape "
                                                       f"{list(tensor.shape)}, expected one of {math.prod(shape)} values")
                tensor = ReshapedTensor(tensor, shape)
            heads = layout.heads_from_shapes(match.canonical, tuple(entry.shape))
            if heads is not None:
                heads_seen.add(heads)
        names[key] = path_[len(scope):]
        entries.append(Entry(key, tensor, reader.data_path(entry.shard_id)))
    directory = prefix.parent
    config = config_beside(directory, config_path, [CONFIG_FILE], activation=layout.default_activation)
    if len(heads_seen) > 1:
        raise bad_input(reader.index_path, f"attention kernels disagree on the number of heads "
                                           f"({', '.join(map(str, sorted(heads_seen)))})")
    if num_heads is None and config is None and heads_seen:
        num_heads = heads_seen.pop()  # the per-head kernels say it: no default needed
    vocab = next((v for v in (directory / VOCAB_FILE, directory.parent / "assets" / VOCAB_FILE) if v.is_file()), None)
    shards = sorted({entry.shard_id for entry in reader.entries.values()})
    tree = assemble(
        format_name=layout.format_name, path=prefix, entries=entries, table=layout.table, config=config,
        default_activation=layout.default_activation, num_heads=num_heads,
        files=[reader.index_path] + [reader.data_path(i) for i in shards],
        vocab=vocab, extra_ignored=ignored, rename=lambda key: names.get(key, key),
    )
    tree.scope = scopes[0]
    return tree


def _ignored(entry: tf_bundle.BundleEntry, key: str, reason: str) -> Ignored:
    return Ignored(key, reason, entry.numel if entry.dtype is not None else 0,
                   tf_bundle.tf_dtype_name(entry.tf_dtype), entry.shape)


