"""bert4keras BERT weights: the Keras HDF5 files `model.save_weights('x.h5')` writes, the format.

Its layers and tables are data (`bert4keras_table.py`); this module finds the files and reads the
Keras 2 layout, whose layers carry bert4keras' names, by those names and the order of each
layer's weights. A `*.weights.h5` file (the Keras 3 layout, detected by content) names no layer:
`bert4keras_keras3.py` reads it with the layer order of the model bert4keras builds
(`bert4keras_graph.py`). Writing is `bert4keras_write.py`.

The file holds no config: a `bert_config.json` beside it (or `--config`) gives one, read as
bert4keras reads it ("gelu" is the exact erf form); without one the sizes come from the shapes
and the head count is the stated default (hidden_size / 64) unless `--heads` says otherwise.

`convert SRC DST --to bert4keras` writes DST with `bert_config.json` and `bert4keras_model.h5`:
build the model from DST's `bert_config.json` with the head flags the source had, then
`model.load_weights(...)`. A conditional model loads into one built with
`layer_norm_cond=c, additional_input_layers=c` for `c = Input(shape=(C,), name=CONDITION_INPUT)`
(`bert4keras_graph.CONDITION_INPUT`; any condition sub-graph without weights works: Keras loads
HDF5 weights by layer order).
"""

from __future__ import annotations

from pathlib import Path

from ...containers.hdf5 import keras as keras_h5, keras_listing
from ...containers.hdf5 import keras3 as keras3_h5
from ...containers.hdf5.keras import KerasLayer
from ...errors import BadInput, bad_input
from ...records import replace
from ...tree import Ignored, ParameterTree
from ..assemble import Entry, assemble
from .bert4keras_keras3 import FORMAT_KERAS3, keras3_group, read_keras3
from .bert4keras_table import (
    ATTENTION,
    CONFIG_FILE,
    DEFAULT_ACTIVATION,
    FEED_FORWARD,
    LAYER_NORM,
    RELATIVE_SINUSOIDS,
    WEIGHTS_FILE,
    LayerKind,
    Slot,
    family_of,
    foreign_layer_reason,
    kind_of,
    read_config,
    refuse_non_bert,
    with_condition_size,
)

FORMAT = "bert4keras-h5"
FORMATS = (FORMAT, FORMAT_KERAS3)
#: The families bert4keras builds and this module writes (`build_transformer_model(model=...)`).
WRITES_FAMILIES = ("bert", "albert", "electra", "roformer", "roformer_v2", "nezha")
#: The files of the checkpoint directory this module writes (what `convert --force` may replace).
OWNED_FILES = (WEIGHTS_FILE, CONFIG_FILE)


def write(tree: ParameterTree, directory: Path, *, options) -> list[Path]:
    """The registry's writer (`bert4keras_write.write`), imported with HDF5's writing machinery
    when a conversion writes, not when a file is read."""
    from .bert4keras_write import write as write_directory  # noqa: PLC0415

    return write_directory(tree, directory, options=options)


# --- finding the files ----------------------------------------------------------------------


def sniff(path: Path) -> str | None:
    """The format of a Keras HDF5 weights file (by content: HDF5 signature and Keras' layer_names,
    or the Keras 3 layout, whatever the suffix); None otherwise. `read` refuses files that are
    Keras but not a bert4keras BERT, with a message saying what they hold."""
    return {"keras2": FORMAT, "keras3": FORMAT_KERAS3}.get(keras_listing.layout(Path(path)))


def candidates(directory: Path) -> list[Path]:
    """The Keras weights files in `directory` that hold bert4keras BERT layers (Keras 2 layout:
    by layer name; Keras 3 layout: by its attention and feed-forward groups)."""
    return [path for path in sorted(Path(directory).iterdir()) if path.is_file() and _holds_bert(path)]


def _holds_bert(path: Path) -> bool:
    kind = keras_listing.layout(path)
    if kind == "keras2":
        return any(kind_of(name) is not None for name in keras_listing.layer_names(path))
    if kind == "keras3":
        try:
            groups = {layer.group for layer in keras3_h5.read_keras3_file(path).layers}
        except BadInput:
            return False
        return {keras3_group(ATTENTION), keras3_group(FEED_FORWARD)} <= groups
    return False


# --- reading --------------------------------------------------------------------------------


def read(path: Path, *, config_path: Path | None = None, num_heads: int | None = None) -> ParameterTree:
    """Read a bert4keras HDF5 weights file into a canonical tree (no tensor data is read): the
    Keras 2 layout by layer names, the Keras 3 layout (`*.weights.h5`) with `read_keras3`."""
    path = Path(path)
    if keras_listing.layout(path) == "keras3":
        return read_keras3(path, config_path=config_path, num_heads=num_heads)
    weights_file = keras_h5.read_weights_file(path)
    weighted = [layer for layer in weights_file.layers if layer.weights]
    # RoFormer's mark has no weights; RoFormer-v2's norms hold none.
    family = family_of([layer.name for layer in weights_file.layers], [layer.name for layer in weighted])
    refuse_non_bert(path, [layer.name for layer in weighted], what="a Keras weights file",
                    saved_by="build_transformer_model(...).save_weights", family=family)
    entries: list[Entry] = []
    spelling: dict[str, str] = {}
    ignored = [Ignored(w.name, _extra_reason(w.name), w.tensor.numel, str(w.tensor.dtype), tuple(w.tensor.shape))
               for w in weights_file.extra]
    for layer in weighted:
        kind = family.kind_of(layer.name)
        if kind is None:
            ignored.extend(_foreign_layer(layer))
            continue
        for slot, weight in zip(_slots(path, layer, kind), layer.weights, strict=True):
            spelling[weight.name] = f"{layer.name}/{slot.role}"
            entries.append(Entry(weight.name, weight.tensor, path))
    config = read_config(path, config_path, family.model_type)
    vocab = path.parent / "vocab.txt"
    tree = assemble(
        format_name=FORMAT, path=path, entries=entries, table=family.table, config=config,
        default_activation=DEFAULT_ACTIVATION, num_heads=num_heads, files=[path],
        vocab=vocab if vocab.is_file() else None, extra_ignored=ignored,
        rename=lambda name: spelling.get(name, name), family=family.model_type,
    )
    stored = {entry.name: entry.tensor for entry in entries}
    tree.ignored = [_check_relative_sinusoids(tree, item, stored) for item in tree.ignored]
    return with_condition_size(tree)


#: How far a stored sinusoid may be from bertconv's replica of bert4keras' float32 computation:
#: the angles k * 10000^(-2j / D) reach 128 rad, where one float32 rounding of the frequency (the
#: backends' power functions may differ in the last bit) moves a sine by up to 128 * 2^-24 = 7.6e-6.
SINUSOID_ATOL = 1e-5


def _check_relative_sinusoids(tree: ParameterTree, item: Ignored, stored: dict) -> Ignored:
    """NEZHA's stored sinusoids as set aside, or, where they are not the config's ([2K + 1, D] for
    its max_relative_position K, within SINUSOID_ATOL), unread: bert4keras computes with them."""
    if item.reason != RELATIVE_SINUSOIDS:
        return item
    import numpy as np  # noqa: PLC0415 (a NEZHA's only)

    from ...runtime.sinusoids import keras_relative_table  # noqa: PLC0415

    config = tree.config
    computed = keras_relative_table(config.max_relative_position, config.head_size)
    values = np.asarray(stored[item.name].read(), dtype=np.float64)
    if values.shape == computed.shape and np.abs(values - computed).max() <= SINUSOID_ATOL:
        return item
    return replace(item, reason=f"relative sinusoids {list(values.shape)} that are not the config's (max_relative_position "
                                f"{config.max_relative_position}, head width {config.head_size}): bert4keras computes "
                                f"with the stored ones, bertconv would not", unread=True)


def _slots(path: Path, layer: KerasLayer, kind: LayerKind) -> tuple[Slot, ...]:
    """The slot of each of the layer's weights, by position; refuses counts or names that do not
    fit the layer's kind."""
    names = [w.name for w in layer.weights]
    slots = kind.slots_for(len(names))
    if slots is None:
        hint = (" (a conditional LayerNorm with a hidden layer, layer_norm_cond_hidden_size, has no BERT "
                "equivalent)" if kind is LAYER_NORM and len(names) == 5 else "")
        raise bad_input(path, f"layer {layer.name!r} ({kind.keras_class}) holds {len(names)} weights "
                              f"({', '.join(names)}), expected {kind.expected()}{hint}")
    for slot, name in zip(slots, names, strict=True):
        if not slot.accepts(name):
            raise bad_input(path, f"layer {layer.name!r} weight {name!r} is in the place of {slot.role} "
                                  f"({kind.keras_class} lists {', '.join(s.role for s in slots)} in this order), "
                                  f"but its name says otherwise; not a layout bertconv knows")
    return slots


def _foreign_layer(layer: KerasLayer) -> list[Ignored]:
    reason = foreign_layer_reason(layer.name)
    return [Ignored(w.name, reason, w.tensor.numel, str(w.tensor.dtype), tuple(w.tensor.shape))
            for w in layer.weights]


def _extra_reason(name: str) -> str:
    if name.startswith(keras_h5.OPTIMIZER_WEIGHTS + "/"):
        return "optimizer state (model.save), not a model parameter"
    return "a weight of the Keras model itself, outside every bert4keras layer"
