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

Writing (`convert SRC DST.h5 --to bert4keras`) produces the single file that
`build_transformer_model(config_path, with_pool=, with_nsp=, with_mlm=).save_weights(DST.h5)`
would: same layers in the same `model.layers` order, weightless ones included, same weight
names (as tf-keras 2.x names them in a fresh session). The config does not travel in the file:
pass the `bert_config.json` (`tree.config.to_google_dict()`) to `build_transformer_model`, and
the head flags the source had, then `model.load_weights(DST.h5)`. A conditional model loads
into one built with `layer_norm_cond=c, additional_input_layers=c` for
`c = Input(shape=(C,), name=CONDITION_INPUT)` (any condition sub-graph without weights works:
Keras loads HDF5 weights by layer order).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..config import BertConfig, Heads, load_config_file
from ..containers import keras_h5
from ..containers.keras_h5 import KerasLayer, LayerToWrite, Node
from ..dtypes import BFLOAT16, FLOAT32, as_float32
from ..errors import bad_input
from ..tensor import LazyTensor
from ..tree import Ignored, ParameterTree, role_of
from .assemble import Entry, assemble
from .table import Row, Table

FORMAT = "bert4keras-h5"
FORMATS = (FORMAT,)
#: bert4keras computes a config's "gelu" as the exact erf form (bert4keras/backend.py `gelu_erf`).
DEFAULT_ACTIVATION = "gelu"
CONFIG_FILE = "bert_config.json"
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

#: Every bert4keras BERT layer that has weights, with its kind, in model order.
LAYERS: tuple[tuple[str, LayerKind], ...] = (
    ("Embedding-Token", EMBEDDING),
    ("Embedding-Segment", EMBEDDING),
    ("Embedding-Position", POSITION_EMBEDDING),
    ("Embedding-Norm", LAYER_NORM),
    (_ATTENTION, ATTENTION),
    (f"{_ATTENTION}-Norm", LAYER_NORM),
    (_FEED_FORWARD, FEED_FORWARD),
    (f"{_FEED_FORWARD}-Norm", LAYER_NORM),
    ("Pooler-Dense", DENSE),
    ("NSP-Proba", DENSE),
    ("MLM-Dense", DENSE),
    ("MLM-Norm", LAYER_NORM),
    ("MLM-Bias", OUTPUT_BIAS),
)

#: Layer names bert4keras gives to parts of its other models (ALBERT's Embedding-Mapping and
#: shared Transformer-MultiHeadSelfAttention, NEZHA/RoFormer position layers, ...): a file with
#: weights in such a layer is not a BERT, and converting it as one would lose them.
RESERVED = ("Embedding-*", "Transformer-*", "MLM-*", "Pooler-*", "NSP-*")


def _norm_rows(canonical: str, layer: str) -> tuple[Row, ...]:
    return (
        Row(f"{canonical}.beta", f"{layer}/beta"),
        Row(f"{canonical}.gamma", f"{layer}/gamma"),
        Row(f"{canonical}.beta_cond", f"{layer}/beta_dense/kernel"),
        Row(f"{canonical}.gamma_cond", f"{layer}/gamma_dense/kernel"),
    )


def _dense_rows(canonical: str, name: str) -> tuple[Row, ...]:
    return (Row(f"{canonical}.kernel", f"{name}/kernel"), Row(f"{canonical}.bias", f"{name}/bias"))


TABLE = Table("bert4keras", (
    Row("embeddings.word", "Embedding-Token/embeddings"),
    Row("embeddings.token_type", "Embedding-Segment/embeddings"),
    Row("embeddings.position", "Embedding-Position/embeddings"),
    *_norm_rows("embeddings.norm", "Embedding-Norm"),
    *_dense_rows("layers.{i}.attention.query", f"{_ATTENTION}/q_dense"),
    *_dense_rows("layers.{i}.attention.key", f"{_ATTENTION}/k_dense"),
    *_dense_rows("layers.{i}.attention.value", f"{_ATTENTION}/v_dense"),
    *_dense_rows("layers.{i}.attention.output", f"{_ATTENTION}/o_dense"),
    *_norm_rows("layers.{i}.attention_norm", f"{_ATTENTION}-Norm"),
    *_dense_rows("layers.{i}.ffn.intermediate", f"{_FEED_FORWARD}/i0_dense"),
    *_dense_rows("layers.{i}.ffn.output", f"{_FEED_FORWARD}/o_dense"),
    *_norm_rows("layers.{i}.ffn_norm", f"{_FEED_FORWARD}-Norm"),
    *_dense_rows("pooler", "Pooler-Dense"),
    *_dense_rows("nsp", "NSP-Proba"),  # [H, 2], the canonical layout (Google stores [2, H])
    *_dense_rows("mlm.transform", "MLM-Dense"),
    *_norm_rows("mlm.norm", "MLM-Norm"),
    Row("mlm.output_bias", "MLM-Bias/beta"),
))

_LAYER_PATTERNS = tuple(
    (re.compile(re.escape(template).replace(re.escape("{i}"), r"(?:0|[1-9]\d*)") + r"\Z"), kind)
    for template, kind in LAYERS
)


def kind_of(layer: str) -> LayerKind | None:
    """The kind of a bert4keras BERT layer name (`Transformer-3-FeedForward`), or None."""
    for pattern, kind in _LAYER_PATTERNS:
        if pattern.match(layer):
            return kind
    return None


def _is_reserved(layer: str) -> bool:
    return any(fnmatch.fnmatchcase(layer, pattern) for pattern in RESERVED)


# --- finding the files ----------------------------------------------------------------------


def sniff(path: Path) -> str | None:
    """FORMAT for a Keras HDF5 weights file (by content: HDF5 signature and Keras' layer_names,
    or the Keras 3 layout, whatever the suffix); None otherwise. `read` refuses files that are
    Keras but not a bert4keras BERT, with a message saying what they hold."""
    return FORMAT if keras_h5.layout(Path(path)) else None


def candidates(directory: Path) -> list[Path]:
    """The Keras 2 weights files in `directory` that hold bert4keras BERT layers."""
    found = []
    for path in sorted(Path(directory).iterdir()):
        if path.is_file() and keras_h5.layout(path) == "keras2" and any(
                kind_of(name) is not None for name in keras_h5.layer_names(path)):
            found.append(path)
    return found


# --- reading --------------------------------------------------------------------------------


def read(path: Path, *, config_path: Path | None = None, num_heads: int | None = None) -> ParameterTree:
    """Read a bert4keras HDF5 weights file into a canonical tree (no tensor data is read)."""
    path = Path(path)
    weights_file = keras_h5.read_weights_file(path)
    weighted = [layer for layer in weights_file.layers if layer.weights]
    _refuse_non_bert(path, weighted)
    entries: list[Entry] = []
    spelling: dict[str, str] = {}
    ignored = [Ignored(w.name, _extra_reason(w.name), w.tensor.numel, str(w.tensor.dtype), tuple(w.tensor.shape))
               for w in weights_file.extra]
    for layer in weighted:
        kind = kind_of(layer.name)
        if kind is None:
            ignored.extend(_foreign_layer(layer))
            continue
        for slot, weight in zip(_slots(path, layer, kind), layer.weights, strict=True):
            spelling[weight.name] = f"{layer.name}/{slot.role}"
            entries.append(Entry(weight.name, weight.tensor, path))
    config = _config(path, config_path)
    vocab = path.parent / "vocab.txt"
    tree = assemble(
        format_name=FORMAT, path=path, entries=entries, table=TABLE, config=config,
        default_activation=DEFAULT_ACTIVATION, num_heads=num_heads, files=[path],
        vocab=vocab if vocab.is_file() else None, extra_ignored=ignored,
        rename=lambda name: spelling.get(name, name),
    )
    return _with_condition_size(tree)


def _refuse_non_bert(path: Path, weighted: list[KerasLayer]) -> None:
    """A Keras file without bert4keras BERT layers, or with layers of another bert4keras model."""
    names = [layer.name for layer in weighted]
    if not any(kind_of(name) for name in names):
        shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
        expected = ", ".join(template.replace("{i}", "0") for template, _ in LAYERS[:5])
        raise bad_input(path, f"a Keras weights file, but not a bert4keras BERT: its layers with weights are "
                              f"{shown or 'none'}; a bert4keras BERT (build_transformer_model(...).save_weights) "
                              f"has layers {expected}, ..., MLM-Bias")
    foreign = sorted(name for name in names if kind_of(name) is None and _is_reserved(name))
    if foreign:
        raise bad_input(path, f"holds bert4keras layers that a BERT does not have: {', '.join(foreign)} "
                              f"(ALBERT, NEZHA, RoFormer or another bert4keras model?); bertconv converts BERT only")


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
    reason = f"layer {layer.name!r} is not one bert4keras' BERT builds (a task head added on top?)"
    return [Ignored(w.name, reason, w.tensor.numel, str(w.tensor.dtype), tuple(w.tensor.shape))
            for w in layer.weights]


def _extra_reason(name: str) -> str:
    if name.startswith(keras_h5.OPTIMIZER_WEIGHTS + "/"):
        return "optimizer state (model.save), not a model parameter"
    return "a weight of the Keras model itself, outside every bert4keras layer"


def _config(path: Path, config_path: Path | None) -> BertConfig | None:
    candidate = config_path or path.parent / CONFIG_FILE
    if config_path is None and not candidate.is_file():
        return None
    return load_config_file(candidate, gelu_means_for_google=DEFAULT_ACTIVATION)


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
                 dropout: bool = True) -> list[str]:
    """The `model.layers` names of `build_transformer_model(config, with_pool=, with_nsp=,
    with_mlm=)`, in order: the calls of bert4keras' `BERT.apply_embeddings`, `apply_main_layers`
    and `apply_final_layers` as a graph, ordered as Keras orders a functional model.

    `dropout`: the config has a non-zero hidden_dropout_prob (bert4keras adds Dropout layers only
    then; they hold no weights). `segments`: type_vocab_size > 0.
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
    for i in range(num_layers):
        attention, feed_forward = _ATTENTION.format(i=i), _FEED_FORWARD.format(i=i)
        x = add_and_norm(attention, g.call(attention, x, x, x), x)  # query, key, value
        x = add_and_norm(feed_forward, g.call(feed_forward, x), x)
    outputs = [x]
    if heads.pooler:
        y = g.call("Pooler-Dense", g.call("Pooler", x))
        outputs.append(g.call("NSP-Proba", y) if heads.nsp else y)
    if heads.mlm:
        y = g.call("MLM-Norm", g.call("MLM-Dense", x), *condition)
        y = g.call("Embedding-Token", y)  # the tied decoder: the token embedding in "dense" mode
        outputs.append(g.call("MLM-Activation", g.call("MLM-Bias", y)))
    # apply_final_layers returns the encoder output alone only when there is no head.
    return keras_h5.functional_layer_order(g.nodes, outputs[1:] or outputs, g.inputs)


# --- writing --------------------------------------------------------------------------------


class _Float32(LazyTensor):
    """A bfloat16 tensor widened to float32 (exact): Keras HDF5 has no bfloat16."""

    def __init__(self, base: LazyTensor):
        self.base = base
        self.dtype = FLOAT32
        self.shape = tuple(base.shape)

    def read(self):
        return as_float32(self.base.read(), BFLOAT16)


def layers_to_write(tree: ParameterTree, *, drop_untied_decoder: bool = False) -> list[LayerToWrite]:
    """Every layer of the bert4keras model for `tree`'s heads, in `model.layers` order, each with
    its weights named as `save_weights` names them. Refuses a tree bert4keras cannot hold."""
    heads = tree.heads
    if heads.nsp and not heads.pooler:
        raise bad_input(tree.path, "has an NSP head but no pooler; bert4keras' NSP-Proba sits on Pooler-Dense "
                                   "(with_nsp implies with_pool), so it cannot be written --to bert4keras")
    if tree.has_untied_decoder and not drop_untied_decoder:
        raise bad_input(tree.path, f"{tree['mlm.decoder'].source} is an MLM decoder of its own (not tied to the "
                                   f"word embeddings); bert4keras ties the decoder to Embedding-Token by "
                                   f"construction. Pass --drop-untied-decoder to write without it (the word "
                                   f"embeddings then serve as the decoder; its values are lost)")
    names = model_layers(tree.config.num_hidden_layers, heads, segments="embeddings.token_type" in tree,
                         conditional=tree.conditional)
    layers, written, missing = [], set(), []
    for name in names:
        kind = kind_of(name)
        slots = () if kind is None else kind.slots + (kind.conditional if tree.conditional else ())
        weights = []
        for slot in slots:
            canonical = TABLE.match(f"{name}/{slot.role}").canonical
            if canonical not in tree:
                missing.append(canonical)
                continue
            tensor = tree[canonical].tensor
            weights.append((f"{name}/{slot.keras_name}:0", _Float32(tensor) if tensor.dtype is BFLOAT16 else tensor))
            written.add(canonical)
        layers.append(LayerToWrite(name, tuple(weights)))
    if missing:
        raise bad_input(tree.path, f"cannot write --to bert4keras: missing {', '.join(sorted(missing))}")
    # A dropped decoder goes with its own bias; MLM-Bias holds the output bias.
    dropped = {"mlm.decoder", "mlm.decoder_bias"} if drop_untied_decoder else set()
    unwritten = sorted(n for n in tree.params if tree.is_counted(n) and n not in written | dropped)
    if unwritten:
        raise bad_input(tree.path, f"bert4keras' BERT has no place for {', '.join(unwritten)}")
    return layers


def write(tree: ParameterTree, destination: Path, *, options) -> list[Path]:
    """Write `tree` as the one bert4keras HDF5 weights file `destination`.

    `options` is a `convert.WriteOptions` (drop_untied_decoder, on_tensor). The config is not
    in the file: build the bert4keras model from the source's `bert_config.json`.
    """
    layers = layers_to_write(tree, drop_untied_decoder=options.drop_untied_decoder)
    keras_h5.write_weights_file(destination, layers, backend=BACKEND, keras_version=KERAS_VERSION,
                                on_tensor=options.on_tensor)
    return [Path(destination)]
