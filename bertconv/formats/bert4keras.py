"""bert4keras BERT weights: the Keras HDF5 files `model.save_weights('x.h5')` writes.

bert4keras (`bert4keras/models.py`, class BERT) builds a Keras model whose layers carry fixed
names (`Embedding-Token`, `Transformer-3-FeedForward`, `MLM-Bias`, ...). Inside a layer, the
weights come in a fixed order, and that order, never Keras' generated names of nested dense
layers (`dense`, `dense_1`, ... which differ between Keras versions and runs), says which is
which:

    Embedding-Token / -Segment / -Position   embeddings [V|T|P, H]
    *-Norm (LayerNormalization)              beta [H], gamma [H]; with conditional LayerNorm
                                             (`layer_norm_cond`) also beta_dense, gamma_dense
                                             kernels [C, H], bias-free
    Transformer-i-MultiHeadSelfAttention     q, k, v, o dense: kernel [H, H], bias [H] each
    Transformer-i-FeedForward                i0 dense [H, I] + [I], o dense [I, H] + [H]
    Pooler-Dense, MLM-Dense                  kernel [H, H], bias [H]
    NSP-Proba                                kernel [H, 2], bias [2]
    MLM-Bias (ScaleOffset, scale=False)      beta [V]: the MLM output bias

Every kernel is `[in, out]` as in the canonical tree, so no row transposes. The MLM decoder is
`Embedding-Token` called again in "dense" mode: tied by construction, never stored. The table
spells each parameter `<layer>/<local role>`, with the roles TensorFlow's object-based
checkpoints use (`q_dense/kernel`, `i0_dense/bias`, ...), so those can share it.

The file holds no config: a `bert_config.json` beside it (or `--config`) gives one, read as
bert4keras reads it ("gelu" is the exact erf form); without one the sizes come from the shapes
and the head count is the stated default (hidden_size / 64) unless `--heads` says otherwise.

A `*.weights.h5` file (the Keras 3 layout, detected by content) names no layer: its groups are
`<snake_case class>[_k]`, k counting the layers of a class in `model.layers` order. With the
config (required: it fixes L and whether there are segments) and the heads (read off the file:
one `scale_offset` group is the MLM head, each `dense` group beyond MLM-Dense a pooler or NSP
layer), `model_layers` gives that order, hence which group is which layer; the reader refuses a
file whose groups or shapes differ from it in any way, saying what it expected and found.

Writing (`convert SRC DST --to bert4keras`) produces the directory DST with `bert_config.json`
and `bert4keras_model.h5`, the file that
`build_transformer_model(config_path, with_pool=, with_nsp=, with_mlm=).save_weights(...)`
would write: same layers in the same `model.layers` order, weightless ones included, same weight
names (as tf-keras 2.x names them in a fresh session). Build the model from DST's
`bert_config.json` with the head flags the source had, then `model.load_weights(...)`. A conditional model loads
into one built with `layer_norm_cond=c, additional_input_layers=c` for
`c = Input(shape=(C,), name=CONDITION_INPUT)` (any condition sub-graph without weights works:
Keras loads HDF5 weights by layer order).
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable

from ..config import BertConfig, Heads, load_config_file
from ..containers import keras_h5
from ..containers.keras_h5 import KerasLayer, LayerToWrite
from ..dtypes import BFLOAT16
from ..errors import BadInput, bad_input
from ..tensor import Bfloat16Widened
from ..tree import Ignored, ParameterTree, role_of
from .assemble import Entry, assemble
from .keras_model import Node, functional_layer_order, keras3_group_names, snake_case
from .table import Row, Table

FORMAT = "bert4keras-h5"
#: A `*.weights.h5` file in the Keras 3 layout.
FORMAT_KERAS3 = "bert4keras-keras3"
FORMATS = (FORMAT, FORMAT_KERAS3)
#: bert4keras computes a config's "gelu" as the exact erf form (bert4keras/backend.py `gelu_erf`).
DEFAULT_ACTIVATION = "gelu"
CONFIG_FILE = "bert_config.json"
#: The families bert4keras builds and this module writes (`build_transformer_model(model=...)`).
WRITES_FAMILIES = ("bert", "albert", "electra")
WEIGHTS_FILE = "bert4keras_model.h5"
#: The files of the checkpoint directory this module writes (what `convert --force` may replace).
OWNED_FILES = (WEIGHTS_FILE, CONFIG_FILE)
#: What the writer records as the file's producer: the layout is tf-keras 2.21's.
BACKEND = "tensorflow"
KERAS_VERSION = "2.21.0"
#: The name the writer gives the condition input of a conditional-LayerNorm model.
CONDITION_INPUT = "Input-Condition"


# --- the layers and the order of their weights ------------------------------------------------


@dataclass(frozen=True)
class Slot:
    """One weight of a bert4keras layer, by position.

    Attributes:
      role: the local role (as in object-based checkpoints), e.g. `q_dense/kernel`.
      keras_name: the weight's name under its layer as tf-keras 2.x writes it, e.g.
        `dense/kernel` (nested dense layers are named `dense`, `dense_1`, ... in build order).
      leaves: the last name component a file may give it (checked on reading, to catch
        files whose order differs from bert4keras'); defaults to `keras_name`'s.
    """

    role: str
    keras_name: str
    leaves: tuple[str, ...] = ()

    def accepts(self, weight_name: str) -> bool:
        leaf = re.sub(r":\d+$", "", weight_name).rsplit("/", 1)[-1]
        return leaf in (self.leaves or (self.keras_name.rsplit("/", 1)[-1],))


@dataclass(frozen=True)
class LayerKind:
    """A bert4keras layer class and its weights in the order `layer.weights` lists them.

    `conditional` are the extra weights of a conditional LayerNorm, after the others.
    """

    keras_class: str
    slots: tuple[Slot, ...]
    conditional: tuple[Slot, ...] = field(default=())

    def expected(self) -> str:
        """The weight counts and roles a layer of this kind may hold, for messages."""
        options = (self.slots, self.slots + self.conditional) if self.conditional else (self.slots,)
        return " or ".join(f"{len(o)} ({', '.join(slot.role for slot in o)})" for o in options)

    def slots_for(self, count: int) -> tuple[Slot, ...] | None:
        if count == len(self.slots):
            return self.slots
        if self.conditional and count == len(self.slots) + len(self.conditional):
            return self.slots + self.conditional
        return None

    def options(self) -> tuple[tuple[Slot, ...], ...]:
        """The weight lists a layer of this kind may hold: plain, and conditional if it can be."""
        return (self.slots, self.slots + self.conditional) if self.conditional else (self.slots,)


def keras3_locations(slots: tuple[Slot, ...]) -> tuple[str, ...]:
    """Where each slot of a layer sits in the Keras 3 layout, under the layer's group.

    A layer saves its own variables as `vars/<n>` and each sub-layer under the attribute holding
    it (`q_dense/vars/<n>`), n counting in creation order, which is the order `slots` lists them
    (the order `layer.weights` gives): `q_dense/kernel` -> `q_dense/vars/0`, `beta` -> `vars/0`.
    """
    counts: Counter[str] = Counter()
    locations = []
    for slot in slots:
        owner = slot.role.rpartition("/")[0]
        locations.append(f"{owner}/{keras_h5.KERAS3_VARS}/{counts[owner]}".lstrip("/"))
        counts[owner] += 1
    return tuple(locations)


def _dense(attribute: str, keras_name: str) -> tuple[Slot, Slot]:
    return (Slot(f"{attribute}/kernel", f"{keras_name}/kernel"),
            Slot(f"{attribute}/bias", f"{keras_name}/bias"))


EMBEDDING = LayerKind("Embedding", (Slot("embeddings", "embeddings"),))
POSITION_EMBEDDING = LayerKind("PositionEmbedding", (Slot("embeddings", "embeddings"),))
LAYER_NORM = LayerKind(
    "LayerNormalization",
    (Slot("beta", "beta"), Slot("gamma", "gamma")),
    # ScaleOffset.build creates beta_dense before gamma_dense (both zero-initialized, no bias).
    conditional=(Slot("beta_dense/kernel", "dense/kernel"), Slot("gamma_dense/kernel", "dense_1/kernel")),
)
ATTENTION = LayerKind("MultiHeadAttention", (*_dense("q_dense", "dense"), *_dense("k_dense", "dense_1"),
                                             *_dense("v_dense", "dense_2"), *_dense("o_dense", "dense_3")))
FEED_FORWARD = LayerKind("FeedForward", (*_dense("i0_dense", "dense"), *_dense("o_dense", "dense_1")))
DENSE = LayerKind("Dense", (Slot("kernel", "kernel"), Slot("bias", "bias")))
# Older bert4keras built MLM-Bias as a BiasAdd layer whose one weight is named `bias`.
OUTPUT_BIAS = LayerKind("ScaleOffset", (Slot("beta", "beta", leaves=("beta", "bias")),))

_ATTENTION = "Transformer-{i}-MultiHeadSelfAttention"
_FEED_FORWARD = "Transformer-{i}-FeedForward"
#: ALBERT's one shared layer (bert4keras' `ALBERT.apply_main_layers` reuses these names).
_SHARED_ATTENTION = "Transformer-MultiHeadSelfAttention"
_SHARED_FEED_FORWARD = "Transformer-FeedForward"

_EMBEDDING_LAYERS = (
    ("Embedding-Token", EMBEDDING),
    ("Embedding-Segment", EMBEDDING),
    ("Embedding-Position", POSITION_EMBEDDING),
    ("Embedding-Norm", LAYER_NORM),
)


def _transformer_layers(attention: str, feed_forward: str) -> tuple[tuple[str, LayerKind], ...]:
    return ((attention, ATTENTION), (f"{attention}-Norm", LAYER_NORM),
            (feed_forward, FEED_FORWARD), (f"{feed_forward}-Norm", LAYER_NORM))


_MLM_LAYERS = (("MLM-Dense", DENSE), ("MLM-Norm", LAYER_NORM), ("MLM-Bias", OUTPUT_BIAS))

#: Every bert4keras BERT layer that has weights, with its kind, in model order.
LAYERS: tuple[tuple[str, LayerKind], ...] = (
    *_EMBEDDING_LAYERS,
    *_transformer_layers(_ATTENTION, _FEED_FORWARD),
    ("Pooler-Dense", DENSE),
    ("NSP-Proba", DENSE),
    *_MLM_LAYERS,
)
#: `build_transformer_model(model='albert')`: the embeddings projected E -> H by Embedding-Mapping
#: (built when embedding_size != hidden_size), one shared layer, NSP-Proba trained on sentence order.
ALBERT_LAYERS: tuple[tuple[str, LayerKind], ...] = (
    *_EMBEDDING_LAYERS,
    ("Embedding-Mapping", DENSE),
    *_transformer_layers(_SHARED_ATTENTION, _SHARED_FEED_FORWARD),
    ("Pooler-Dense", DENSE),
    ("NSP-Proba", DENSE),
    *_MLM_LAYERS,
)
#: `build_transformer_model(model='electra', with_discriminator=True)`: the discriminator, with
#: Embedding-Mapping when embedding_size != hidden_size. `model='bert'` with that embedding_size
#: builds the same embeddings and, with_mlm, the generator's head (MLM-Dense H -> E, the tied
#: [V, E] table): the ELECTRA family's other model.
ELECTRA_LAYERS: tuple[tuple[str, LayerKind], ...] = (
    *_EMBEDDING_LAYERS,
    ("Embedding-Mapping", DENSE),
    *_transformer_layers(_ATTENTION, _FEED_FORWARD),
    ("Pooler-Dense", DENSE),
    ("NSP-Proba", DENSE),
    *_MLM_LAYERS,
    ("Discriminator-Dense", DENSE),
    ("Discriminator-Prediction", DENSE),
)

#: Layer names bert4keras gives to parts of its models: a file with weights in such a layer that
#: its family's table does not know (NEZHA/RoFormer position layers, ...) is another model, and
#: converting it as this one would lose them.
RESERVED = ("Embedding-*", "Transformer-*", "MLM-*", "Pooler-*", "NSP-*", "Discriminator-*")


def _norm_rows(canonical: str, layer: str) -> tuple[Row, ...]:
    return (
        Row(f"{canonical}.beta", f"{layer}/beta"),
        Row(f"{canonical}.gamma", f"{layer}/gamma"),
        Row(f"{canonical}.beta_cond", f"{layer}/beta_dense/kernel"),
        Row(f"{canonical}.gamma_cond", f"{layer}/gamma_dense/kernel"),
    )


def _dense_rows(canonical: str, name: str) -> tuple[Row, ...]:
    return (Row(f"{canonical}.kernel", f"{name}/kernel"), Row(f"{canonical}.bias", f"{name}/bias"))


_EMBEDDING_ROWS = (
    Row("embeddings.word", "Embedding-Token/embeddings"),
    Row("embeddings.token_type", "Embedding-Segment/embeddings"),
    Row("embeddings.position", "Embedding-Position/embeddings"),
    *_norm_rows("embeddings.norm", "Embedding-Norm"),
)
_MLM_ROWS = (
    *_dense_rows("mlm.transform", "MLM-Dense"),
    *_norm_rows("mlm.norm", "MLM-Norm"),
    Row("mlm.output_bias", "MLM-Bias/beta"),
)


def _layer_rows(attention: str, feed_forward: str, layer: str = "{i}") -> tuple[Row, ...]:
    """The rows of a transformer layer; `layer` is the canonical index ("{i}", or "0" for
    ALBERT's shared layer, whose names hold none)."""
    return (
        *_dense_rows(f"layers.{layer}.attention.query", f"{attention}/q_dense"),
        *_dense_rows(f"layers.{layer}.attention.key", f"{attention}/k_dense"),
        *_dense_rows(f"layers.{layer}.attention.value", f"{attention}/v_dense"),
        *_dense_rows(f"layers.{layer}.attention.output", f"{attention}/o_dense"),
        *_norm_rows(f"layers.{layer}.attention_norm", f"{attention}-Norm"),
        *_dense_rows(f"layers.{layer}.ffn.intermediate", f"{feed_forward}/i0_dense"),
        *_dense_rows(f"layers.{layer}.ffn.output", f"{feed_forward}/o_dense"),
        *_norm_rows(f"layers.{layer}.ffn_norm", f"{feed_forward}-Norm"),
    )


TABLE = Table("bert4keras", (
    *_EMBEDDING_ROWS,
    *_layer_rows(_ATTENTION, _FEED_FORWARD),
    *_dense_rows("pooler", "Pooler-Dense"),
    *_dense_rows("nsp", "NSP-Proba"),  # [H, 2], the canonical layout (Google stores [2, H])
    *_MLM_ROWS,
))
ALBERT_TABLE = Table("bert4keras albert", (
    *_EMBEDDING_ROWS,
    *_dense_rows("embeddings.projection", "Embedding-Mapping"),
    *_layer_rows(_SHARED_ATTENTION, _SHARED_FEED_FORWARD, layer="0"),
    *_dense_rows("pooler", "Pooler-Dense"),
    *_dense_rows("sop", "NSP-Proba"),  # ALBERT pre-trains it on sentence order
    *_MLM_ROWS,
))
ELECTRA_TABLE = Table("bert4keras electra", (
    *_EMBEDDING_ROWS,
    *_dense_rows("embeddings.projection", "Embedding-Mapping"),
    *_layer_rows(_ATTENTION, _FEED_FORWARD),
    *_dense_rows("pooler", "Pooler-Dense"),
    *_dense_rows("nsp", "NSP-Proba"),
    *_MLM_ROWS,
    *_dense_rows("rtd.dense", "Discriminator-Dense"),
    *_dense_rows("rtd.output", "Discriminator-Prediction"),
))


def _patterns(layers: tuple[tuple[str, LayerKind], ...]) -> tuple[tuple[re.Pattern, LayerKind], ...]:
    return tuple((re.compile(re.escape(template).replace(re.escape("{i}"), r"(?:0|[1-9]\d*)") + r"\Z"), kind)
                 for template, kind in layers)


@dataclass(frozen=True)
class Family:
    """A model `build_transformer_model(model=...)` builds: its layers with weights and its table.

    `marks`: layers only this family has (among those read here); a file holding one is of it.
    """

    model_type: str
    layers: tuple[tuple[str, LayerKind], ...]
    table: Table
    marks: tuple[str, ...] = ()

    def kind_of(self, layer: str) -> LayerKind | None:
        for pattern, kind in _patterns(self.layers):
            if pattern.match(layer):
                return kind
        return None


BERT = Family("bert", LAYERS, TABLE)
ALBERT = Family("albert", ALBERT_LAYERS, ALBERT_TABLE, marks=(_SHARED_ATTENTION, _SHARED_FEED_FORWARD))
# A file with Embedding-Mapping is of the ELECTRA family: bert4keras builds it into model='bert'
# too when embedding_size != hidden_size, the computation of ELECTRA's encoder and generator,
# which the canonical tree holds as ELECTRA's (the family whose projection is optional).
ELECTRA = Family("electra", ELECTRA_LAYERS, ELECTRA_TABLE,
                 marks=("Discriminator-Dense", "Discriminator-Prediction", "Embedding-Mapping"))
#: The families read and written here; a file is of the first whose marks it holds, else BERT.
FAMILIES = (ALBERT, ELECTRA, BERT)
FAMILY_BY_TYPE = {family.model_type: family for family in FAMILIES}


def family_of(layer_names: Iterable[str]) -> Family:
    names = set(layer_names)
    return next((family for family in FAMILIES if names & set(family.marks)), BERT)


def kind_of(layer: str) -> LayerKind | None:
    """The kind of a bert4keras BERT layer name (`Transformer-3-FeedForward`), or None."""
    return BERT.kind_of(layer)


def _is_reserved(layer: str) -> bool:
    return any(fnmatch.fnmatchcase(layer, pattern) for pattern in RESERVED)


# --- finding the files ----------------------------------------------------------------------


def sniff(path: Path) -> str | None:
    """The format of a Keras HDF5 weights file (by content: HDF5 signature and Keras' layer_names,
    or the Keras 3 layout, whatever the suffix); None otherwise. `read` refuses files that are
    Keras but not a bert4keras BERT, with a message saying what they hold."""
    return {"keras2": FORMAT, "keras3": FORMAT_KERAS3}.get(keras_h5.layout(Path(path)))


def candidates(directory: Path) -> list[Path]:
    """The Keras weights files in `directory` that hold bert4keras BERT layers (Keras 2 layout:
    by layer name; Keras 3 layout: by its attention and feed-forward groups)."""
    return [path for path in sorted(Path(directory).iterdir()) if path.is_file() and _holds_bert(path)]


def _holds_bert(path: Path) -> bool:
    kind = keras_h5.layout(path)
    if kind == "keras2":
        return any(kind_of(name) is not None for name in keras_h5.layer_names(path))
    if kind == "keras3":
        try:
            groups = {layer.group for layer in keras_h5.read_keras3_file(path).layers}
        except BadInput:
            return False
        return {_keras3_group(ATTENTION), _keras3_group(FEED_FORWARD)} <= groups
    return False


# --- reading --------------------------------------------------------------------------------


def read(path: Path, *, config_path: Path | None = None, num_heads: int | None = None) -> ParameterTree:
    """Read a bert4keras HDF5 weights file into a canonical tree (no tensor data is read): the
    Keras 2 layout by layer names, the Keras 3 layout (`*.weights.h5`) with `read_keras3`."""
    path = Path(path)
    if keras_h5.layout(path) == "keras3":
        return read_keras3(path, config_path=config_path, num_heads=num_heads)
    weights_file = keras_h5.read_weights_file(path)
    weighted = [layer for layer in weights_file.layers if layer.weights]
    family = family_of(layer.name for layer in weighted)
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
    config = _config(path, config_path, family.model_type)
    vocab = path.parent / "vocab.txt"
    tree = assemble(
        format_name=FORMAT, path=path, entries=entries, table=family.table, config=config,
        default_activation=DEFAULT_ACTIVATION, num_heads=num_heads, files=[path],
        vocab=vocab if vocab.is_file() else None, extra_ignored=ignored,
        rename=lambda name: spelling.get(name, name), family=family.model_type,
    )
    return _with_condition_size(tree)


def refuse_non_bert(path: Path, names: list[str], *, what: str, saved_by: str, family: Family = BERT) -> None:
    """Refuse a Keras file whose layers with weights (`names`) include no layer of the bert4keras
    `family`, or include layers of another bert4keras model; `what` the file is, `saved_by` how a
    BERT's is written (for the message)."""
    if not any(family.kind_of(name) for name in names):
        shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
        expected = ", ".join(template.replace("{i}", "0") for template, _ in LAYERS[:5])
        raise bad_input(path, f"{what}, but not a bert4keras BERT: its layers with weights are "
                              f"{shown or 'none'}; a bert4keras BERT ({saved_by}) "
                              f"has layers {expected}, ..., MLM-Bias")
    foreign = sorted(name for name in names if family.kind_of(name) is None and _is_reserved(name))
    if foreign:
        what_model = "a BERT" if family is BERT else f"an {family.model_type.upper()}"
        raise bad_input(path, f"holds bert4keras layers that {what_model} does not have: {', '.join(foreign)} "
                              f"(NEZHA, RoFormer or another bert4keras model?); bertconv reads bert4keras' "
                              f"BERT, ALBERT and ELECTRA")


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


def foreign_layer_reason(layer: str) -> str:
    return f"layer {layer!r} is not one bert4keras' BERT builds (a task head added on top?)"


def _foreign_layer(layer: KerasLayer) -> list[Ignored]:
    reason = foreign_layer_reason(layer.name)
    return [Ignored(w.name, reason, w.tensor.numel, str(w.tensor.dtype), tuple(w.tensor.shape))
            for w in layer.weights]


def _extra_reason(name: str) -> str:
    if name.startswith(keras_h5.OPTIMIZER_WEIGHTS + "/"):
        return "optimizer state (model.save), not a model parameter"
    return "a weight of the Keras model itself, outside every bert4keras layer"


def _config(path: Path, config_path: Path | None, family: str = "bert") -> BertConfig | None:
    candidate = config_path or path.parent / CONFIG_FILE
    if config_path is None and not candidate.is_file():
        return None
    return load_config_file(candidate, gelu_means_for_google=DEFAULT_ACTIVATION, family=family)


# --- reading the Keras 3 layout (*.weights.h5) -------------------------------------------------

KERAS3_NEEDS_CONFIG = (
    "is in the Keras 3 weights layout (/layers/<class name>/vars/<n>, what save_weights writes for a "
    "path ending in .weights.h5): it stores no layer names, so bertconv tells its layers apart by the "
    "order of the model bert4keras builds, which the model's bert_config.json fixes; without it this "
    "layout is not supported: pass --config bert_config.json (the config the model was built from), "
    "or put it beside the file")


def _keras3_group(kind: LayerKind) -> str:
    return snake_case(kind.keras_class)


def _count(groups: Iterable[str], kind: LayerKind) -> int:
    """How many groups are layers of `kind`'s class (`dense`, `dense_1`, ...)."""
    pattern = re.compile(re.escape(_keras3_group(kind)) + r"(?:_[1-9]\d*)?")
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
        raise bad_input(path, f"Keras 3 layout with {mlm} {_keras3_group(OUTPUT_BIAS)} and "
                              f"{_count(groups, DENSE)} {_keras3_group(DENSE)} groups: a bert4keras BERT has at "
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
    config = _config(path, config_path)
    if config is None:
        raise bad_input(path, KERAS3_NEEDS_CONFIG)
    weights_file = keras_h5.read_keras3_file(path)
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
    tree = _with_condition_size(assemble(
        format_name=FORMAT_KERAS3, path=path, entries=entries, table=TABLE, config=config,
        default_activation=DEFAULT_ACTIVATION, num_heads=num_heads, files=[path], extra_ignored=ignored,
        rename=lambda name: spelling.get(name, name),
    ))
    _check_keras3_shapes(path, tree, heads)
    return tree


def _keras3_conditional(path: Path, found: dict[str, keras_h5.Keras3Layer]) -> bool:
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


def _check_keras3_groups(path: Path, weights_file: keras_h5.Keras3WeightsFile, found: set[str],
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


def _keras3_weights(path: Path, weights_file: keras_h5.Keras3WeightsFile, layer: keras_h5.Keras3Layer,
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


def _with_condition_size(tree: ParameterTree) -> ParameterTree:
    """bert_config.json does not state the condition size of a conditional LayerNorm (it is a
    `build_transformer_model` argument): take it from the kernels' shapes."""
    if not tree.conditional or tree.config.conditional_size:
        return tree
    kernel = next(p for name, p in tree.params.items() if role_of(name).conditional)
    provenance = {**tree.config.provenance, "conditional_size": "shapes"}
    tree.config = replace(tree.config, conditional_size=int(kernel.tensor.shape[0]), provenance=provenance)
    return tree


# --- the model bert4keras builds: its layers in `model.layers` order ------------------------------


@dataclass
class _Graph:
    nodes: list[Node] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)

    def call(self, layer: str, *parents: int) -> int:
        self.nodes.append(Node(layer, parents))
        return len(self.nodes) - 1

    def input(self, layer: str) -> int:
        self.inputs.append(self.call(layer))
        return self.inputs[-1]


def model_layers(num_layers: int, heads: Heads, *, segments: bool = True, conditional: bool = False,
                 dropout: bool = True, family: Family = BERT, projection: bool = False) -> list[str]:
    """The `model.layers` names of `build_transformer_model(config, model=, with_pool=, with_nsp=,
    with_mlm=)` (ELECTRA: `with_discriminator=`), in order: the calls of bert4keras'
    `apply_embeddings`, `apply_main_layers` and `apply_final_layers` as a graph, ordered as Keras
    orders a functional model.

    `dropout`: the config has a non-zero hidden_dropout_prob (bert4keras adds Dropout layers only
    then; they hold no weights). `segments`: type_vocab_size > 0. `projection`: embedding_size
    differs from hidden_size (Embedding-Mapping). ALBERT calls one set of layers L times.
    """
    g = _Graph()
    x = g.call("Embedding-Token", g.input("Input-Token"))
    if segments:
        segment = g.call("Embedding-Segment", g.input("Input-Segment"))
        x = g.call("Embedding-Token-Segment", x, segment)
    x = g.call("Embedding-Position", x)
    condition = (g.input(CONDITION_INPUT),) if conditional else ()

    def maybe_dropout(name: str, x: int) -> int:
        return g.call(name, x) if dropout else x

    def add_and_norm(block: str, y: int, residual: int) -> int:
        y = g.call(f"{block}-Add", residual, maybe_dropout(f"{block}-Dropout", y))
        return g.call(f"{block}-Norm", y, *condition)

    x = maybe_dropout("Embedding-Dropout", g.call("Embedding-Norm", x, *condition))
    if projection:
        x = g.call("Embedding-Mapping", x)
    shared = family is ALBERT
    for i in range(num_layers):
        attention = _SHARED_ATTENTION if shared else _ATTENTION.format(i=i)
        feed_forward = _SHARED_FEED_FORWARD if shared else _FEED_FORWARD.format(i=i)
        x = add_and_norm(attention, g.call(attention, x, x, x), x)  # query, key, value
        x = add_and_norm(feed_forward, g.call(feed_forward, x), x)
    outputs = [x]
    if heads.rtd:  # ELECTRA's discriminator: its head alone (model='electra' builds no other)
        y = g.call("Discriminator-Prediction", g.call("Discriminator-Dense", x))
        return functional_layer_order(g.nodes, [y], g.inputs)
    sentence_head = heads.sop if shared else heads.nsp
    if heads.pooler:
        y = g.call("Pooler-Dense", g.call("Pooler", x))
        outputs.append(g.call("NSP-Proba", y) if sentence_head else y)
    if heads.mlm:
        y = g.call("MLM-Norm", g.call("MLM-Dense", x), *condition)
        y = g.call("Embedding-Token", y)  # the tied decoder: the token embedding in "dense" mode
        outputs.append(g.call("MLM-Activation", g.call("MLM-Bias", y)))
    # apply_final_layers returns the encoder output alone only when there is no head.
    return functional_layer_order(g.nodes, outputs[1:] or outputs, g.inputs)


# --- writing --------------------------------------------------------------------------------


def layers_to_write(tree: ParameterTree, *, drop_untied_decoder: bool = False) -> list[LayerToWrite]:
    """Every layer of the bert4keras model for `tree`'s heads, in `model.layers` order, each with
    its weights named as `save_weights` names them. Refuses a tree bert4keras cannot hold."""
    heads = tree.heads
    family = FAMILY_BY_TYPE.get(tree.config.model_type)
    if family is None:
        raise bad_input(tree.path, f"is a {tree.config.model_type} model; bert4keras builds BERT, ALBERT and ELECTRA "
                                   f"here (model='bert', 'albert', 'electra'): convert it --to hf")
    _refuse_what_family_cannot_hold(tree, family)
    if (heads.nsp or heads.sop) and not heads.pooler:
        raise bad_input(tree.path, "has an NSP head but no pooler; bert4keras' NSP-Proba sits on Pooler-Dense "
                                   "(with_nsp implies with_pool), so it cannot be written --to bert4keras")
    if tree.has_untied_decoder and not drop_untied_decoder:
        raise bad_input(tree.path, f"{tree['mlm.decoder'].source} is an MLM decoder of its own (not tied to the "
                                   f"word embeddings); bert4keras ties the decoder to Embedding-Token by "
                                   f"construction. Pass --drop-untied-decoder to write without it (the word "
                                   f"embeddings then serve as the decoder; its values are lost)")
    names = model_layers(tree.config.num_hidden_layers, heads, segments="embeddings.token_type" in tree,
                         conditional=tree.conditional, family=family,
                         projection="embeddings.projection.kernel" in tree)
    layers, written, missing = [], set(), []
    for name in names:
        kind = family.kind_of(name)
        slots = () if kind is None else kind.slots + (kind.conditional if tree.conditional else ())
        weights = []
        for slot in slots:
            canonical = family.table.match(f"{name}/{slot.role}").canonical
            if canonical not in tree:
                missing.append(canonical)
                continue
            tensor = tree[canonical].tensor
            weights.append((f"{name}/{slot.keras_name}:0", Bfloat16Widened(tensor) if tensor.dtype is BFLOAT16 else tensor))
            written.add(canonical)
        layers.append(LayerToWrite(name, tuple(weights)))
    if missing:
        raise bad_input(tree.path, f"cannot write --to bert4keras: missing {', '.join(sorted(missing))}")
    # A dropped decoder goes with its own bias; MLM-Bias holds the output bias.
    dropped = {"mlm.decoder", "mlm.decoder_bias"} if drop_untied_decoder else set()
    unwritten = sorted(n for n in tree.params if tree.is_counted(n) and n not in written | dropped)
    if unwritten:
        raise bad_input(tree.path, f"bert4keras' {family.model_type.upper()} has no place for {', '.join(unwritten)}")
    return layers


def _refuse_what_family_cannot_hold(tree: ParameterTree, family: Family) -> None:
    """What bert4keras' model of the family cannot build: ALBERT with more than one shared layer
    or without a projection, a projection where E = H, the replaced-token head beside others.

    ELECTRA's discriminator is written as `model='electra', with_discriminator=True` builds it;
    its generator (and any projected model with pooler, NSP or MLM heads) as `model='bert'` with
    the config's embedding_size builds it: the same layers, the same computation."""
    config, path = tree.config, tree.path
    projected = "embeddings.projection.kernel" in tree
    if family is ALBERT and config.stored_layers != 1:
        raise bad_input(path, f"is an ALBERT with {config.num_hidden_groups} group(s) of {config.inner_group_num} "
                              f"inner layer(s); bert4keras' ALBERT shares one layer (num_hidden_groups = "
                              f"inner_group_num = 1): convert it --to tf or hf")
    if projected and config.embedding_width == config.hidden_size:
        raise bad_input(path, f"projects its embeddings with embedding_size = hidden_size = {config.hidden_size}; "
                              f"bert4keras builds Embedding-Mapping only when they differ, so it cannot hold "
                              f"this projection: convert it --to tf or hf")
    heads = tree.heads
    if heads.rtd and (heads.mlm or heads.pooler or heads.nsp):
        raise bad_input(path, "has ELECTRA's replaced-token head beside a pooler, NSP or MLM head; bert4keras' "
                              "ELECTRA (with_discriminator) builds the discriminator's head alone")


def write(tree: ParameterTree, directory: Path, *, options) -> list[Path]:
    """Write `tree` into the (new, empty) `directory` as `bert4keras_model.h5` and the
    `bert_config.json` that `build_transformer_model` takes (the weights file holds no config:
    sizes, heads, activation and LayerNorm epsilon travel in it).

    `options` is a `convert.WriteOptions` (drop_untied_decoder, on_tensor).
    """
    layers = layers_to_write(tree, drop_untied_decoder=options.drop_untied_decoder)
    weights = directory / WEIGHTS_FILE
    keras_h5.write_weights_file(weights, layers, backend=BACKEND, keras_version=KERAS_VERSION,
                                on_tensor=options.on_tensor)
    config = directory / CONFIG_FILE
    config.write_text(json.dumps(tree.config.to_bert4keras_dict(), indent=2, sort_keys=True) + "\n")
    return [weights, config]
