"""bert4keras BERT weights saved in the Keras 3 layout (`*.weights.h5`, detected by content).

The file names no layer: its groups are `<snake_case class>[_k]`, k counting the layers of a
class in `model.layers` order. With the config (required: it fixes L and whether there are
segments) and the heads (read off the file: one `scale_offset` group is the MLM head, each
`dense` group beyond MLM-Dense a pooler or NSP layer), `model_layers` gives that order, hence
which group is which layer; the reader refuses a file whose groups or shapes differ from it in
any way, saying what it expected and found.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from ...config import BertConfig, Heads
from ...containers.hdf5 import keras3 as keras3_h5
from ...errors import bad_input
from ...tree import Ignored, ParameterTree, role_of
from ..assemble import Entry, assemble
from .bert4keras_graph import model_layers
from .bert4keras_table import (
    DEFAULT_ACTIVATION,
    DENSE,
    LAYER_NORM,
    OUTPUT_BIAS,
    TABLE,
    LayerKind,
    kind_of,
    keras3_locations,
    read_config,
    with_condition_size,
)
from .model import keras3_group_names, snake_case

#: A `*.weights.h5` file in the Keras 3 layout.
FORMAT_KERAS3 = "bert4keras-keras3"

KERAS3_NEEDS_CONFIG = (
    "is in the Keras 3 weights layout (/layers/<class name>/vars/<n>, what save_weights writes for a "
    "path ending in .weights.h5): it stores no layer names, so bertconv tells its layers apart by the "
    "order of the model bert4keras builds, which the model's bert_config.json fixes; without it this "
    "layout is not supported: pass --config bert_config.json (the config the model was built from), "
    "or put it beside the file")


def keras3_group(kind: LayerKind) -> str:
    return snake_case(kind.keras_class)


def _count(groups: Iterable[str], kind: LayerKind) -> int:
    """How many groups are layers of `kind`'s class (`dense`, `dense_1`, ...)."""
    pattern = re.compile(re.escape(keras3_group(kind)) + r"(?:_[1-9]\d*)?")
    return sum(1 for group in groups if pattern.fullmatch(group))


def keras3_heads(path: Path, groups: Iterable[str]) -> Heads:
    """The heads of a bert4keras BERT saved in the Keras 3 layout, from its groups with weights.

    The MLM head is the one ScaleOffset layer (MLM-Bias) and brings MLM-Dense; every other Dense
    is Pooler-Dense, then NSP-Proba (bert4keras builds NSP on the pooler only).
    """
    groups = list(groups)
    mlm = _count(groups, OUTPUT_BIAS)
    dense = _count(groups, DENSE) - mlm
    if mlm > 1 or not 0 <= dense <= 2:
        raise bad_input(path, f"Keras 3 layout with {mlm} {keras3_group(OUTPUT_BIAS)} and "
                              f"{_count(groups, DENSE)} {keras3_group(DENSE)} groups: a bert4keras BERT has at "
                              f"most one of the first (MLM-Bias) and one more of the second (MLM-Dense) plus "
                              f"Pooler-Dense and NSP-Proba; this is not a plain bert4keras BERT (a task head "
                              f"on top?), whose layers cannot be told apart in this layout. Save it with "
                              f"model.save_weights('model.h5') (the Keras 2 layout, with layer names)")
    return Heads(pooler=dense >= 1, nsp=dense == 2, mlm=mlm == 1)


def keras3_layout(config: BertConfig, heads: Heads, *, conditional: bool) -> dict[str, str]:
    """Keras 3 group -> bert4keras layer, for every layer with weights of the model
    `build_transformer_model(config, with_pool=, with_nsp=, with_mlm=)` builds.

    Only layers with weights are counted: no class of theirs (Embedding, Dense, ...) is also the
    class of a weightless layer, so weightless layers (Dropout, Add, ...) do not shift their counters.
    """
    names = model_layers(config.num_hidden_layers, heads, segments=config.type_vocab_size > 0,
                         conditional=conditional)
    weighted = [(name, kind) for name in names if (kind := kind_of(name)) is not None]
    groups = keras3_group_names([kind.keras_class for _, kind in weighted])
    return {group: name for group, (name, _) in zip(groups, weighted, strict=True)}


def read_keras3(path: Path, *, config_path: Path | None = None, num_heads: int | None = None) -> ParameterTree:
    """Read a bert4keras BERT saved as `*.weights.h5` (Keras 3 layout); needs its config."""
    path = Path(path)
    config = read_config(path, config_path)
    if config is None:
        raise bad_input(path, KERAS3_NEEDS_CONFIG)
    weights_file = keras3_h5.read_keras3_file(path)
    found = {layer.group: layer for layer in weights_file.layers if layer.weights}
    heads = keras3_heads(path, found)
    conditional = _keras3_conditional(path, found)
    layout = keras3_layout(config, heads, conditional=conditional)
    _check_keras3_groups(path, weights_file, set(found), layout, config, heads)
    entries: list[Entry] = []
    spelling: dict[str, str] = {}
    for group, layer in layout.items():
        for location, slot, weight in _keras3_weights(path, weights_file, found[group], kind_of(layer)):
            name = f"{weights_file.container}/{group}/{location}"
            spelling[name] = f"{layer}/{slot.role}"
            entries.append(Entry(name, weight.tensor, path))
    ignored = [Ignored(w.name, _keras3_extra_reason(w.name), w.tensor.numel, str(w.tensor.dtype),
                       tuple(w.tensor.shape)) for w in weights_file.extra]
    tree = with_condition_size(assemble(
        format_name=FORMAT_KERAS3, path=path, entries=entries, table=TABLE, config=config,
        default_activation=DEFAULT_ACTIVATION, num_heads=num_heads, files=[path], extra_ignored=ignored,
        rename=lambda name: spelling.get(name, name),
    ))
    _check_keras3_shapes(path, tree, heads)
    return tree


def _keras3_conditional(path: Path, found: dict[str, keras3_h5.Keras3Layer]) -> bool:
    """Whether the LayerNorms are conditional (they hold the extra kernels); all or none."""
    norms = [layer for group, layer in found.items() if _count([group], LAYER_NORM)]
    extra = set(keras3_locations(LAYER_NORM.conditional))
    conditional = [layer.group for layer in norms if extra & {w.name for w in layer.weights}]
    if conditional and len(conditional) != len(norms):
        plain = sorted(set(layer.group for layer in norms) - set(conditional))
        raise bad_input(path, f"Keras 3 layout: LayerNorm groups {', '.join(conditional)} are conditional but "
                              f"{', '.join(plain)} are not; bert4keras conditions all of them or none")
    return bool(conditional)


def _describe_heads(heads: Heads) -> str:
    return "+".join(name for name, present in (("pool", heads.pooler), ("nsp", heads.nsp), ("mlm", heads.mlm))
                    if present) or "no heads"


def _check_keras3_groups(path: Path, weights_file: keras3_h5.Keras3WeightsFile, found: set[str],
                         layout: dict[str, str], config: BertConfig, heads: Heads) -> None:
    """The groups with weights must be exactly those of the model the config and heads imply."""
    missing, unexpected = sorted(set(layout) - found), sorted(found - set(layout))
    if not missing and not unexpected:
        return
    where = f" (inside the nested model {weights_file.nested!r})" if weights_file.nested else ""
    raise bad_input(path, (
        f"Keras 3 layout{where}: its groups with weights are not those of a bert4keras BERT with "
        f"num_hidden_layers={config.num_hidden_layers}, type_vocab_size={config.type_vocab_size} (from the "
        f"config) and heads {_describe_heads(heads)} (from its dense and scale_offset groups): "
        f"missing {', '.join(missing) or 'none'}; unexpected {', '.join(unexpected) or 'none'}. Pass --config "
        f"with the bert_config.json the model was built from; a model with other layers (a task head, "
        f"another bert4keras model) cannot be read from this layout: save it with "
        f"model.save_weights('model.h5') (Keras 2 layout, with layer names)"))


def _keras3_weights(path: Path, weights_file: keras3_h5.Keras3WeightsFile, layer: keras3_h5.Keras3Layer,
                    kind: LayerKind):
    """(location, slot, weight) for each weight of a group, refusing anything but an exact fit."""
    by_location = {w.name: w for w in layer.weights}
    for slots in kind.options():
        locations = keras3_locations(slots)
        if set(locations) == set(by_location):
            return [(location, slot, by_location[location]) for location, slot in zip(locations, slots, strict=True)]
    expected = " or ".join(", ".join(keras3_locations(slots)) for slots in kind.options())
    raise bad_input(path, f"Keras 3 layout: group {weights_file.container}/{layer.group} ({kind.keras_class}) "
                          f"holds {', '.join(sorted(by_location))}; expected {expected}")


def _check_keras3_shapes(path: Path, tree: ParameterTree, heads: Heads) -> None:
    """Every tensor has the shape the config gives its role: the mapping came from layer order,
    so a file that only resembles the implied model is refused, not misread."""
    wrong = [f"{p.source} read as {p.name}: shape {list(p.tensor.shape)}, expected "
             f"{list(role_of(p.name).expected_shape(tree.config))}"
             for p in tree if tuple(p.tensor.shape) != role_of(p.name).expected_shape(tree.config)]
    if wrong:
        raise bad_input(path, f"Keras 3 layout read as a bert4keras BERT with heads {_describe_heads(heads)}, "
                              f"but {len(wrong)} tensor(s) do not fit the config: {'; '.join(wrong[:4])}"
                              f"{' ...' if len(wrong) > 4 else ''}. Pass --config with the bert_config.json "
                              f"the model was built from")


def _keras3_extra_reason(name: str) -> str:
    if name.split("/", 1)[0] == "optimizer":
        return "optimizer state (the compiled model's optimizer), not a model parameter"
    return "a variable outside the model's layers (the model's own), not a bert4keras BERT weight"
