"""keras-bert (CyberZHG/keras-bert, `pip install keras-bert`), the Keras BERT before bert4keras:
Keras-2 HDF5 files of the models `keras_bert.get_model` / `load_trained_model_from_checkpoint`
build, from `model.save` (layers under `/model_weights`, optimizer state under
`/optimizer_weights`) or `model.save_weights` (layers at the root).

Layer names and weights, from keras_bert/bert.py and keras-transformer (encoder blocks numbered
from 1, so block n is layer n - 1 here):

    Embedding-Token/embeddings [V, H]         Embedding-Segment/embeddings [T, H]
    Embedding-Position/embeddings [P, H]      Embedding-Norm/{gamma, beta}
    Encoder-{n}-MultiHeadSelfAttention/Encoder-{n}-MultiHeadSelfAttention_{Wq,bq,Wk,bk,Wv,bv,Wo,bo}
    Encoder-{n}-MultiHeadSelfAttention-Norm/{gamma, beta}
    Encoder-{n}-FeedForward/Encoder-{n}-FeedForward_{W1,b1,W2,b2}   ([H, I], [I], [I, H], [H])
    Encoder-{n}-FeedForward-Norm/{gamma, beta}
    MLM-Dense/{kernel, bias}, MLM-Norm/{gamma, beta}, MLM-Sim/bias [V] (the output bias of the
      similarity to the tied Embedding-Token table), NSP-Dense/{kernel, bias} (the pooler, tanh),
      NSP/{kernel [H, 2], bias}

Every kernel is [in, out] as in the canonical tree. Names, not positions, identify each weight.

Numerics, from the same sources: keras-transformer's `gelu` is the tanh approximation; the
attention mask subtracts 10000.0 (keras-self-attention), as Google's; but keras-layer-normalization's
epsilon is K.epsilon()**2 = 1e-14, not 1e-12: the registry gives keras-bert a numerics family of
its own (`runtime.numerics.FAMILY_DEFAULTS["keras-bert"]`), and the reader records the epsilon
in the config. Read-only: write it `--to tf`, which
`load_trained_model_from_checkpoint` loads.
"""

from __future__ import annotations

import re
from pathlib import Path

from ...containers.hdf5 import keras as keras_h5, keras_listing
from ...errors import bad_input
from ...records import replace
from ...tree import Ignored, ParameterTree
from ..assemble import Entry, assemble
from ..configs import config_beside
from ..table import Row, Table, dense_rows, norm_rows

FORMAT = "keras-bert-h5"
#: keras-transformer's gelu: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
DEFAULT_ACTIVATION = "gelu_tanh"
#: keras-layer-normalization's default epsilon, K.epsilon() ** 2 with Keras' 1e-7 (in float32 the same number).
LAYER_NORM_EPS = 1e-14
CONFIG_FILE = "bert_config.json"

_ATTENTION = "Encoder-{i}-MultiHeadSelfAttention"
_FEED_FORWARD = "Encoder-{i}-FeedForward"


#: Names are `<layer>/<weight>`, the weight without keras-bert's `<layer>_` prefix and `:0`; {i} is
#: the 0-based layer (keras-bert's block number minus one, see `_table_name`).
TABLE = Table(FORMAT, (
    Row("embeddings.word", "Embedding-Token/embeddings"),
    Row("embeddings.token_type", "Embedding-Segment/embeddings"),
    Row("embeddings.position", "Embedding-Position/embeddings"),
    *norm_rows("embeddings.norm", "Embedding-Norm"),
    *dense_rows("layers.{i}.attention.query", _ATTENTION, kernel="Wq", bias="bq"),
    *dense_rows("layers.{i}.attention.key", _ATTENTION, kernel="Wk", bias="bk"),
    *dense_rows("layers.{i}.attention.value", _ATTENTION, kernel="Wv", bias="bv"),
    *dense_rows("layers.{i}.attention.output", _ATTENTION, kernel="Wo", bias="bo"),
    *norm_rows("layers.{i}.attention_norm", f"{_ATTENTION}-Norm"),
    *dense_rows("layers.{i}.ffn.intermediate", _FEED_FORWARD, kernel="W1", bias="b1"),
    *dense_rows("layers.{i}.ffn.output", _FEED_FORWARD, kernel="W2", bias="b2"),
    *norm_rows("layers.{i}.ffn_norm", f"{_FEED_FORWARD}-Norm"),
    *dense_rows("pooler", "NSP-Dense"),
    *dense_rows("mlm.transform", "MLM-Dense"),
    *norm_rows("mlm.norm", "MLM-Norm"),
    Row("mlm.output_bias", "MLM-Sim/bias"),
    *dense_rows("nsp", "NSP"),
))

#: Layer names only keras-bert builds (bert4keras numbers `Transformer-{i}`, from 0). Compiled on
#: first use (by `re`'s cache): asking a file of other names compiles neither.
_PREFIX = "Encoder-"
_SIGNATURE = r"^Encoder-[1-9]\d*-(?:MultiHeadSelfAttention|FeedForward)$"
_BLOCK = r"^Encoder-(\d+)-"


def _is_keras_bert(path: Path) -> bool:
    try:
        return keras_listing.layout(path) == "keras2" and any(
            n.startswith(_PREFIX) and re.match(_SIGNATURE, n) for n in keras_listing.layer_names(path))
    except Exception:  # sniffing never fails: the reader reports a broken file properly
        return False


def sniff(path: Path) -> str | None:
    return FORMAT if Path(path).is_file() and _is_keras_bert(Path(path)) else None


def candidates(directory: Path) -> list[Path]:
    return [path for path in sorted(Path(directory).iterdir()) if path.is_file() and _is_keras_bert(path)]


def _table_name(path: Path, layer: str, weight: str) -> str:
    """`Encoder-1-FeedForward/Encoder-1-FeedForward_W1:0` -> `Encoder-0-FeedForward/W1`: the
    weight's own name, with keras-bert's 1-based block number made the table's 0-based layer."""
    leaf = weight.rsplit("/", 1)[-1].removesuffix(":0")
    leaf = leaf[len(layer) + 1:] if leaf.startswith(layer + "_") else leaf
    block = re.match(_BLOCK, layer)
    if block is None:
        return f"{layer}/{leaf}"
    number = int(block.group(1))
    if number < 1:
        raise bad_input(path, f"layer {layer!r}: keras-bert numbers its encoder blocks from 1")
    return f"Encoder-{number - 1}-{layer[block.end():]}/{leaf}"


def read(path: Path, *, config_path: Path | None = None, num_heads: int | None = None) -> ParameterTree:
    """Read a keras-bert HDF5 file (`model.save` or `save_weights`) into a canonical tree (headers only)."""
    path = Path(path)
    weights_file = keras_h5.read_weights_file(path)
    entries, spelling = [], {}
    ignored = [Ignored(w.name, "optimizer state (model.save), not a model parameter"
                       if w.name.startswith(keras_h5.OPTIMIZER_WEIGHTS + "/") else
                       "a weight of the Keras model itself, outside every layer",
                       w.tensor.numel, str(w.tensor.dtype), tuple(w.tensor.shape)) for w in weights_file.extra]
    for layer in weights_file.layers:
        for weight in layer.weights:
            spelling[weight.name] = _table_name(path, layer.name, weight.name)
            entries.append(Entry(weight.name, weight.tensor, path))
    config = config_beside(path.parent, config_path, [CONFIG_FILE], activation=DEFAULT_ACTIVATION)
    tree = assemble(
        format_name=FORMAT, path=path, entries=entries, table=TABLE, config=config,
        default_activation=DEFAULT_ACTIVATION, num_heads=num_heads, files=[path],
        vocab=path.parent / "vocab.txt" if (path.parent / "vocab.txt").is_file() else None,
        extra_ignored=ignored, rename=lambda name: spelling.get(name, name),
    )
    if tree.config.provenance.get("layer_norm_eps") != "file":
        tree.config = replace(tree.config, layer_norm_eps=LAYER_NORM_EPS,
                              provenance={**tree.config.provenance, "layer_norm_eps": "format"})
    return tree


