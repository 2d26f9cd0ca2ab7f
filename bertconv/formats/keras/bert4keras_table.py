"""bert4keras' models as data: the layers with weights each model has, the order of the weights
inside a layer, and the table of their canonical names (one per family bert4keras builds).

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

Shared by the readers of bert4keras' files (`bert4keras.py`, `bert4keras_keras3.py`,
`bert4keras_objects.py`), its model graph (`bert4keras_graph.py`) and its writer
(`bert4keras_write.py`).
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from ... import families
from ...config import BertConfig
from ...containers.hdf5 import keras as keras_h5
from ...errors import bad_input
from ...records import field, record, replace
from ...tree import ParameterTree, role_of
from ..configs import config_beside
from ..table import Row, Skip, Table

#: bert4keras computes a config's "gelu" as the exact erf form (bert4keras/backend.py `gelu_erf`).
DEFAULT_ACTIVATION = "gelu"
CONFIG_FILE = "bert_config.json"
#: The weights file bertconv writes (bert4keras itself loads any path given to it).
WEIGHTS_FILE = "bert4keras_model.h5"


# --- the layers and the order of their weights ------------------------------------------------


@record
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
        leaf = weight_name.rsplit("/", 1)[-1]
        stem, colon, number = leaf.rpartition(":")  # "kernel:0", as Keras 2 names a variable
        leaf = stem if colon and number.isdecimal() else leaf
        return leaf in (self.leaves or (self.keras_name.rsplit("/", 1)[-1],))


@record
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

ATTENTION_LAYER = "Transformer-{i}-MultiHeadSelfAttention"
FEED_FORWARD_LAYER = "Transformer-{i}-FeedForward"
#: ALBERT's one shared layer (bert4keras' `ALBERT.apply_main_layers` reuses these names).
SHARED_ATTENTION_LAYER = "Transformer-MultiHeadSelfAttention"
SHARED_FEED_FORWARD_LAYER = "Transformer-FeedForward"

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
    *_transformer_layers(ATTENTION_LAYER, FEED_FORWARD_LAYER),
    ("Pooler-Dense", DENSE),
    ("NSP-Proba", DENSE),
    *_MLM_LAYERS,
)
#: `build_transformer_model(model='albert')`: the embeddings projected E -> H by Embedding-Mapping
#: (built when embedding_size != hidden_size), one shared layer, NSP-Proba trained on sentence order.
ALBERT_LAYERS: tuple[tuple[str, LayerKind], ...] = (
    *_EMBEDDING_LAYERS,
    ("Embedding-Mapping", DENSE),
    *_transformer_layers(SHARED_ATTENTION_LAYER, SHARED_FEED_FORWARD_LAYER),
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
    *_transformer_layers(ATTENTION_LAYER, FEED_FORWARD_LAYER),
    ("Pooler-Dense", DENSE),
    ("NSP-Proba", DENSE),
    *_MLM_LAYERS,
    ("Discriminator-Dense", DENSE),
    ("Discriminator-Prediction", DENSE),
)
#: `build_transformer_model(model='roformer')`: NEZHA's embeddings (no Embedding-Position; the
#: embeddings projected E -> H by Embedding-Mapping when they differ), BERT's layers and heads. Its
#: rotary positions are `Embedding-Rotary-Position`, a layer without weights called on the
#: embeddings' output before the first attention, whose output every attention layer takes.
ROFORMER_LAYERS: tuple[tuple[str, LayerKind], ...] = tuple(
    (name, kind) for name, kind in ELECTRA_LAYERS if name not in ("Embedding-Position", "Discriminator-Dense",
                                                                   "Discriminator-Prediction"))
ROTARY_POSITION_LAYER = "Embedding-Rotary-Position"
#: `build_transformer_model(model='nezha')`: RoFormer's layers without Embedding-Mapping (transformers'
#: NEZHA has no projection), and its relative sinusoids `Embedding-Relative-Position` [2K + 1, D]
#: (RelativePositionEmbedding, trainable=False), K fixed at 64 by bert4keras, which every attention
#: layer reads: computed, they are no parameter of the tree (`NEZHA_TABLE` sets them aside).
RELATIVE_POSITION_LAYER = "Embedding-Relative-Position"
RELATIVE_POSITION = LayerKind("RelativePositionEmbedding", (Slot("embeddings", "embeddings"),))
NEZHA_LAYERS: tuple[tuple[str, LayerKind], ...] = (
    *((name, kind) for name, kind in ROFORMER_LAYERS if name != "Embedding-Mapping"),
    (RELATIVE_POSITION_LAYER, RELATIVE_POSITION),
)
NEZHA_MAX_RELATIVE_POSITION = 64
#: `build_transformer_model(model='roformer_v2')` (bert4keras' `RoFormerV2`): RoFormer's rotary layer,
#: no bias anywhere (bias-free kernels: attention q, k, v, o; feed-forward i0, o) and norms without
#: weights (`Embedding-Norm`, `*-Norm`: built, weightless); its MLM head is `Embedding-Token` called
#: again, with neither MLM-Dense, MLM-Norm nor MLM-Bias. E = H only (the family refuses
#: Embedding-Mapping and Output-Mapping by name).
ATTENTION_WITHOUT_BIAS = LayerKind("MultiHeadAttention", tuple(
    slot for slot in ATTENTION.slots if slot.role.endswith("/kernel")))
FEED_FORWARD_WITHOUT_BIAS = LayerKind("FeedForward", tuple(
    slot for slot in FEED_FORWARD.slots if slot.role.endswith("/kernel")))
ROFORMER_V2_LAYERS: tuple[tuple[str, LayerKind], ...] = (
    ("Embedding-Token", EMBEDDING),
    ("Embedding-Segment", EMBEDDING),
    (ATTENTION_LAYER, ATTENTION_WITHOUT_BIAS),
    (FEED_FORWARD_LAYER, FEED_FORWARD_WITHOUT_BIAS),
)
#: Its norms, which every bert4keras RoFormer-v2 file names and none stores a weight of.
ROFORMER_V2_WEIGHTLESS = ("Embedding-Norm",)
RELATIVE_SINUSOIDS = ("NEZHA's relative sinusoids (trainable=False), sin and cos of k / 10000^(2j / D) for k <= 2K: "
                      "computed from the config, and checked to be these, to float32 rounding")

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
    *_layer_rows(ATTENTION_LAYER, FEED_FORWARD_LAYER),
    *_dense_rows("pooler", "Pooler-Dense"),
    *_dense_rows("nsp", "NSP-Proba"),  # [H, 2], the canonical layout (Google stores [2, H])
    *_MLM_ROWS,
))
ALBERT_TABLE = Table("bert4keras albert", (
    *_EMBEDDING_ROWS,
    *_dense_rows("embeddings.projection", "Embedding-Mapping"),
    *_layer_rows(SHARED_ATTENTION_LAYER, SHARED_FEED_FORWARD_LAYER, layer="0"),
    *_dense_rows("pooler", "Pooler-Dense"),
    *_dense_rows("sop", "NSP-Proba"),  # ALBERT pre-trains it on sentence order
    *_MLM_ROWS,
))
ELECTRA_TABLE = Table("bert4keras electra", (
    *_EMBEDDING_ROWS,
    *_dense_rows("embeddings.projection", "Embedding-Mapping"),
    *_layer_rows(ATTENTION_LAYER, FEED_FORWARD_LAYER),
    *_dense_rows("pooler", "Pooler-Dense"),
    *_dense_rows("nsp", "NSP-Proba"),
    *_MLM_ROWS,
    *_dense_rows("rtd.dense", "Discriminator-Dense"),
    *_dense_rows("rtd.output", "Discriminator-Prediction"),
))

ROFORMER_TABLE = Table("bert4keras roformer", tuple(
    row for row in ELECTRA_TABLE.rows if not row.canonical.startswith(("embeddings.position", "rtd."))))

NEZHA_TABLE = Table("bert4keras nezha", tuple(row for row in ROFORMER_TABLE.rows
                                              if not row.canonical.startswith("embeddings.projection")),
                    skips=(Skip(f"{RELATIVE_POSITION_LAYER}/*", RELATIVE_SINUSOIDS),))

ROFORMER_V2_TABLE = Table("bert4keras roformer_v2", tuple(
    row for row in ROFORMER_TABLE.rows
    if row.canonical in ("embeddings.word", "embeddings.token_type")
    or row.canonical.startswith("layers.") and row.canonical.endswith(".kernel")))


def _stands_for(template: str, layer: str) -> bool:
    """Whether `layer` is a name `template` stands for: "Transformer-{i}-FeedForward" with any layer
    index, written as bert4keras writes it (no leading zero). Matched by hand: a regular
    expression per template took 1.5 ms of each command to compile."""
    before, marker, after = template.partition("{i}")
    if not marker:
        return layer == template
    index = layer[len(before):len(layer) - len(after)]
    return (len(layer) > len(before) + len(after) and layer.startswith(before) and layer.endswith(after)
            and (index == "0" or "1" <= index[0] <= "9" and index.isdecimal()))


@record
class Family:
    """A model `build_transformer_model(model=...)` builds: its layers with weights and its table.

    `marks`: layers only this family has (among those read here, weightless ones included); a file
    holding one is of it, if it also holds the `weightless` layers without weights (RoFormer-v2's
    norms, which RoFormer's hold weights in). `position_layer`: the layer that computes positions from the embeddings'
    output for every attention layer (RoFormer's rotary sinusoids), in place of `Embedding-Position`.
    """

    model_type: str
    layers: tuple[tuple[str, LayerKind], ...]
    table: Table
    marks: tuple[str, ...] = ()
    position_layer: str | None = None
    weightless: tuple[str, ...] = ()

    def kind_of(self, layer: str) -> LayerKind | None:
        for template, kind in self.layers:
            if _stands_for(template, layer):
                return kind
        return None


BERT = Family("bert", LAYERS, TABLE)
ALBERT = Family("albert", ALBERT_LAYERS, ALBERT_TABLE, marks=(SHARED_ATTENTION_LAYER, SHARED_FEED_FORWARD_LAYER))
# A file with Embedding-Mapping is of the ELECTRA family: bert4keras builds it into model='bert'
# too when embedding_size != hidden_size, the computation of ELECTRA's encoder and generator,
# which the canonical tree holds as ELECTRA's (the family whose projection is optional).
ELECTRA = Family("electra", ELECTRA_LAYERS, ELECTRA_TABLE,
                 marks=("Discriminator-Dense", "Discriminator-Prediction", "Embedding-Mapping"))
ROFORMER = Family("roformer", ROFORMER_LAYERS, ROFORMER_TABLE, marks=(ROTARY_POSITION_LAYER,),
                  position_layer=ROTARY_POSITION_LAYER)
NEZHA = Family("nezha", NEZHA_LAYERS, NEZHA_TABLE, marks=(RELATIVE_POSITION_LAYER,),
               position_layer=RELATIVE_POSITION_LAYER)
ROFORMER_V2 = Family("roformer_v2", ROFORMER_V2_LAYERS, ROFORMER_V2_TABLE, marks=(ROTARY_POSITION_LAYER,),
                     position_layer=ROTARY_POSITION_LAYER, weightless=ROFORMER_V2_WEIGHTLESS)
#: The families read and written here; a file is of the first whose marks it holds, else BERT.
FAMILIES = (ROFORMER_V2, ROFORMER, NEZHA, ALBERT, ELECTRA, BERT)
FAMILY_BY_TYPE = {family.model_type: family for family in FAMILIES}


def family_of(layer_names: Iterable[str], weighted: Iterable[str] | None = None) -> Family:
    """The family of a file naming `layer_names`, of which `weighted` hold weights (all, when not said)."""
    names = set(layer_names)
    weighted = names if weighted is None else set(weighted)
    return next((family for family in FAMILIES if names & set(family.marks)
                 and all(layer in names and layer not in weighted for layer in family.weightless)), BERT)


def kind_of(layer: str) -> LayerKind | None:
    """The kind of a bert4keras BERT layer name (`Transformer-3-FeedForward`), or None."""
    return BERT.kind_of(layer)


def _is_reserved(layer: str) -> bool:
    return any(fnmatch.fnmatchcase(layer, pattern) for pattern in RESERVED)


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
        what_model = f"bert4keras' {families.display_name(family.model_type)}"
        raise bad_input(path, f"holds bert4keras layers that {what_model} does not have: {', '.join(foreign)} "
                              f"(another bert4keras model?); bertconv reads bert4keras' "
                              f"BERT, ALBERT, ELECTRA, RoFormer, RoFormer-v2 and NEZHA")


def foreign_layer_reason(layer: str) -> str:
    return f"layer {layer!r} is not one bert4keras' BERT builds (a task head added on top?)"


def read_config(path: Path, config_path: Path | None, family: str = "bert") -> BertConfig | None:
    """The config of the bert4keras file at `path`: `--config`, else `bert_config.json` beside it."""
    return config_beside(path.parent, config_path, [CONFIG_FILE], activation=DEFAULT_ACTIVATION, family=family)


def with_condition_size(tree: ParameterTree) -> ParameterTree:
    """bert_config.json does not state the condition size of a conditional LayerNorm (it is a
    `build_transformer_model` argument): take it from the kernels' shapes."""
    if not tree.conditional or tree.config.conditional_size:
        return tree
    kernel = next(p for name, p in tree.params.items() if role_of(name).conditional)
    provenance = {**tree.config.provenance, "conditional_size": "shapes"}
    tree.config = replace(tree.config, conditional_size=int(kernel.tensor.shape[0]), provenance=provenance)
    return tree
