"""bert-for-tf2 (kpe/bert-for-tf2, `import bert`): a TF2 Keras BERT layer, `BertModelLayer`,
saved inside the user's Keras model with `model.save_weights('x.ckpt')` (an object-based
checkpoint) or `model.save_weights('x.h5')` (Keras 2 HDF5).

Object paths below the layer, from the library's sources (bert/model.py, embeddings.py,
transformer.py, attention.py; params-flow's LayerNormalization): `embeddings_layer/`
{`word_embeddings_layer`, `token_type_embeddings_layer`, `position_embeddings_layer`}`/embeddings`
and `layer_norm_layer/{gamma,beta}`; per layer `encoders_layer/encoder_layers/{i}/` with
`self_attention_layer/attention_layer/{query,key,value}_layer/{kernel,bias}`,
`self_attention_layer/attention_projector/{dense,layer_norm}`, `intermediate_layer`,
`output_projector/{dense,layer_norm}`. These are what its loader (bert/loader.py,
`map_to_stock_variable_name`) pairs with Google's names. Kernels are [in, out] as Google's.

An HDF5 save stores the same variables under their Keras names, the layer's scope (its name,
`bert`) first: `bert/embeddings/word_embeddings/embeddings:0`, `bert/embeddings/LayerNorm/gamma:0`,
`bert/encoder/layer_{i}/attention/self/query/kernel:0`, `.../attention/output/{dense,LayerNorm}`,
`.../intermediate/kernel:0`, `.../output/{dense,LayerNorm}`: the table reads them as each row's
second spelling; the layer holding them is found, the user's other layers ignored.

The layer sits in the user's model (`layer_with_weights-0/...`): that scope is found and
reported; the user's own layers (a classifier on top) and optimizer state are listed as ignored.
bert-for-tf2 has no pooler and no masked-LM head: its checkpoints hold the encoder only.

Numerics: params-flow's `gelu` is the tanh approximation, LayerNorm epsilon 1e-12, the attention
mask adds -10000.0: google-research/bert's own, hence a name in the Google TF family ("tf-...").
Read-only.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from ...containers.hdf5 import keras as keras_h5, keras_listing
from ...errors import bad_input
from ...lazy import lazy_module
from ...tree import Ignored, ParameterTree
from ..assemble import Entry, assemble
from ..configs import config_beside
from ..table import Row, Table

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from . import object_bundle
else:  # imported on first use: an HDF5 save needs none of TensorFlow's checkpoint container
    object_bundle = lazy_module("bertconv.formats.tensorflow.object_bundle")

FORMAT = "tf-bert-for-tf2"
#: params_flow.activations.gelu: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
DEFAULT_ACTIVATION = "gelu_tanh"

_LAYER = "encoders_layer/encoder_layers/{i}"
_H5_LAYER = "encoder/layer_{i}"


def _rows(kind: str, canonical: str, path: str, h5_name: str) -> tuple[Row, ...]:
    """A dense layer's or LayerNorm's rows: spelled by object path, and (read as `legacy`) by the
    Keras variable name an HDF5 save stores below the layer's scope."""
    leaves = ("kernel", "bias") if kind == "dense" else ("gamma", "beta")
    return tuple(Row(f"{canonical}.{leaf}", f"{path}/{leaf}", legacy=(f"{h5_name}/{leaf}",)) for leaf in leaves)


def _embedding(canonical: str, layer: str, h5_name: str) -> Row:
    return Row(canonical, f"embeddings_layer/{layer}/embeddings", legacy=(f"embeddings/{h5_name}/embeddings",))


TABLE = Table(FORMAT, (
    _embedding("embeddings.word", "word_embeddings_layer", "word_embeddings"),
    _embedding("embeddings.token_type", "token_type_embeddings_layer", "token_type_embeddings"),
    _embedding("embeddings.position", "position_embeddings_layer", "position_embeddings"),
    *_rows("norm", "embeddings.norm", "embeddings_layer/layer_norm_layer", "embeddings/LayerNorm"),
    *_rows("dense", "layers.{i}.attention.query", f"{_LAYER}/self_attention_layer/attention_layer/query_layer",
           f"{_H5_LAYER}/attention/self/query"),
    *_rows("dense", "layers.{i}.attention.key", f"{_LAYER}/self_attention_layer/attention_layer/key_layer",
           f"{_H5_LAYER}/attention/self/key"),
    *_rows("dense", "layers.{i}.attention.value", f"{_LAYER}/self_attention_layer/attention_layer/value_layer",
           f"{_H5_LAYER}/attention/self/value"),
    *_rows("dense", "layers.{i}.attention.output", f"{_LAYER}/self_attention_layer/attention_projector/dense",
           f"{_H5_LAYER}/attention/output/dense"),
    *_rows("norm", "layers.{i}.attention_norm", f"{_LAYER}/self_attention_layer/attention_projector/layer_norm",
           f"{_H5_LAYER}/attention/output/LayerNorm"),
    *_rows("dense", "layers.{i}.ffn.intermediate", f"{_LAYER}/intermediate_layer", f"{_H5_LAYER}/intermediate"),
    *_rows("dense", "layers.{i}.ffn.output", f"{_LAYER}/output_projector/dense", f"{_H5_LAYER}/output/dense"),
    *_rows("norm", "layers.{i}.ffn_norm", f"{_LAYER}/output_projector/layer_norm",
           f"{_H5_LAYER}/output/LayerNorm"),
))

#: Why the weights of the user's other layers (a classifier on top) are set aside.
OTHER_LAYER_REASON = "a layer of the user's Keras model outside the BertModelLayer (layer {layer!r})"


def sniff(path: Path) -> str | None:
    path = Path(path)
    if path.is_file() and keras_h5.is_hdf5(path):
        return FORMAT if _bert_layer_of(path) is not None else None
    return object_bundle.sniffer(FORMAT, TABLE)(path)


def candidates(directory: Path) -> list[Path]:
    files = [p for p in sorted(Path(directory).glob("*.h5")) if p.is_file() and _bert_layer_of(p) is not None]
    return files + object_bundle.candidate_finder(TABLE)(directory)


def read(path: Path, *, config_path: Path | None = None, num_heads: int | None = None) -> ParameterTree:
    """Read a Keras model holding a bert-for-tf2 `BertModelLayer`: an object-based checkpoint
    (prefix, `.index`, data file or directory) or a Keras 2 HDF5 save (`x.h5`)."""
    if Path(path).is_file() and keras_h5.is_hdf5(Path(path)):
        return _read_h5(Path(path), config_path=config_path, num_heads=num_heads)
    return object_bundle.read(path, layout(), config_path=config_path, num_heads=num_heads)


@cache
def layout() -> object_bundle.ObjectLayout:
    """How an object-based checkpoint of the layer is read."""
    return object_bundle.ObjectLayout(FORMAT, TABLE, DEFAULT_ACTIVATION)


def _h5_name(layer: str, weight: str) -> str | None:
    """`bert/encoder/layer_0/intermediate/kernel:0` in layer `bert` -> the table's
    `encoder/layer_0/intermediate/kernel`; None for a weight outside the layer's scope."""
    if not weight.startswith(layer + "/"):
        return None
    return weight[len(layer) + 1:].removesuffix(":0")


def _bert_layer_of(path: Path) -> str | None:
    """The name of the layer of a Keras 2 HDF5 file whose weights are a BertModelLayer's (a
    word embedding and an encoder layer through the table), or None. Never raises."""
    try:
        if keras_listing.layout(path) != "keras2":
            return None
        for layer, weights in keras_listing.weight_names(path).items():
            found = {m.canonical for w in weights for n in [_h5_name(layer, w)]
                     if n is not None for m in [TABLE.match(n)] if m is not None}
            if "embeddings.word" in found and any(name.startswith("layers.") for name in found):
                return layer
    except Exception:  # noqa: BLE001 - sniffing answers "not mine"; `read` reports a broken file
        return None
    return None


def _read_h5(path: Path, *, config_path: Path | None, num_heads: int | None) -> ParameterTree:
    bert_layer = _bert_layer_of(path)
    if bert_layer is None:
        raise bad_input(path, "a Keras HDF5 file without a bert-for-tf2 BertModelLayer (no layer holds "
                              "`<layer>/embeddings/word_embeddings/embeddings:0` and encoder layers)")
    weights_file = keras_h5.read_weights_file(path)
    entries, spelling, ignored = [], {}, []
    for layer in weights_file.layers:
        for weight in layer.weights:
            if layer.name == bert_layer:
                spelling[weight.name] = _h5_name(layer.name, weight.name) or weight.name
                entries.append(Entry(weight.name, weight.tensor, path))
            else:
                ignored.append(Ignored(weight.name, OTHER_LAYER_REASON.format(layer=layer.name), weight.tensor.numel,
                                       str(weight.tensor.dtype), tuple(weight.tensor.shape)))
    ignored += [Ignored(w.name, "a weight of the Keras model itself or its optimizer, outside every layer",
                        w.tensor.numel, str(w.tensor.dtype), tuple(w.tensor.shape)) for w in weights_file.extra]
    vocab = path.parent / object_bundle.VOCAB_FILE
    tree = assemble(
        format_name=FORMAT, path=path, entries=entries, table=TABLE,
        config=config_beside(path.parent, config_path, [object_bundle.CONFIG_FILE], activation=DEFAULT_ACTIVATION),
        default_activation=DEFAULT_ACTIVATION, num_heads=num_heads, files=[path],
        vocab=vocab if vocab.is_file() else None, extra_ignored=ignored, rename=lambda name: spelling.get(name, name),
    )
    tree.scope = bert_layer + "/"
    return tree
