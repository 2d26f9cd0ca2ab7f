"""The `variables/` bundle of a TF-Hub BERT SavedModel, as the TF2 Model Garden's exporter writes
it (tensorflow/models `official/nlp/tools/export_tfhub_lib.py`, `export_model`: the published TF2
BERT encoders on TF-Hub / Kaggle Models).

`<savedmodel>/variables/variables.{index,data-00000-of-00001}` is an object-based checkpoint of the
exported Keras model, but its keys are positions, not names: `variables/N/.ATTRIBUTES/
VARIABLE_VALUE` for the encoder (the Keras model's `variables` list) and `mlm/variables/N/...`
for the masked-LM sub-model exported `with_mlm=True` (only the variables the encoder does not
already hold: the word embeddings are saved once). The names are the object graph's `full_name`s,
Keras variable names (networks/bert_encoder.py, layers/transformer_encoder_block.py,
layers/masked_lm.py):

    word_embeddings/embeddings, position_embedding/embeddings, type_embeddings/embeddings,
    embeddings/layer_norm/{gamma,beta}, pooler_transform/{kernel,bias},
    transformer/layer_{i}/self_attention/{query,key,value,attention_output}/{kernel,bias}
      (EinsumDense: [H, A, H/A], [A, H/A]; attention_output [A, H/A, H], [H]),
    transformer/layer_{i}/{self_attention_layer_norm,intermediate,output,output_layer_norm}/...,
    cls/predictions/transform/{dense,LayerNorm}/..., cls/predictions/output_bias/bias

The masked-LM head's names carry the pre-training model's name scope (`bert/cls/predictions/...`)
and the encoder's none: each part's scope is found (`scope.find_scopes`). The graph lives in the
data file, so this format, unlike the other TF2 ones, cannot be inspected from the index alone.
The vocabulary is the SavedModel's `assets/vocab.txt`; heads are read off the per-head kernels.

The same Keras names identify the variables of a checkpoint of the functional `BertEncoder`
(`tf.train.Checkpoint(model=encoder)`: keys `model/layer_with_weights-N/...`, the
`TransformerEncoderBlock` attributes below them), what older Model Garden releases and their TF1
checkpoint converter wrote: format "tf-garden-functional", read the same way.

Numerics as the Model Garden's (tanh GELU): names in the Google TF family. Read-only.
"""

from __future__ import annotations

import re
from pathlib import Path

from ...containers.tensorflow import bundle as tf_bundle, prefix as tf_prefix
from ...records import replace
from ...tree import ParameterTree
from . import object_bundle
from ..table import Row, Skip, Table, dense_rows, norm_rows

FORMAT = "tf-hub-savedmodel"
#: The same names in a checkpoint of the functional `BertEncoder` (networks/bert_encoder.py), what
#: older Model Garden releases and their TF1 converter saved: `tf.train.Checkpoint(model=encoder)`.
FORMAT_FUNCTIONAL = "tf-garden-functional"
FORMATS = (FORMAT, FORMAT_FUNCTIONAL)
#: The Model Garden encoder's default inner activation: gelu(approximate=True), tanh.
DEFAULT_ACTIVATION = "gelu_tanh"
VARIABLES_PREFIX = Path("variables") / "variables"
#: A Keras SavedModel's variable keys: positions in the `variables` list of the model or of a
#: sub-object.
_POSITIONAL_KEY = re.compile(r"^(?:[^/]+/)*variables/\d+/\.ATTRIBUTES/VARIABLE_VALUE$")
WHY_GRAPH = "a SavedModel keys its variables by position (`variables/N`), and only the object graph names them"
WHY_GRAPH_FUNCTIONAL = ("a functional Keras model keys its layers by position (`layer_with_weights-N`), and only "
                        "the object graph says which embedding table or dense layer each one is")
#: A functional Keras model's layers, and the Model Garden's transformer block inside one.
_FUNCTIONAL_LAYER = "layer_with_weights-"
_GARDEN_BLOCK = "/_attention_layer/_query_dense/"

_LAYER = "transformer/layer_{i}"


TABLE = Table(FORMAT, (
    Row("embeddings.word", "word_embeddings/embeddings"),
    Row("embeddings.token_type", "type_embeddings/embeddings"),
    Row("embeddings.position", "position_embedding/embeddings"),
    *norm_rows("embeddings.norm", "embeddings/layer_norm"),
    *dense_rows("layers.{i}.attention.query", f"{_LAYER}/self_attention/query"),
    *dense_rows("layers.{i}.attention.key", f"{_LAYER}/self_attention/key"),
    *dense_rows("layers.{i}.attention.value", f"{_LAYER}/self_attention/value"),
    *dense_rows("layers.{i}.attention.output", f"{_LAYER}/self_attention/attention_output"),
    *norm_rows("layers.{i}.attention_norm", f"{_LAYER}/self_attention_layer_norm"),
    *dense_rows("layers.{i}.ffn.intermediate", f"{_LAYER}/intermediate"),
    *dense_rows("layers.{i}.ffn.output", f"{_LAYER}/output"),
    *norm_rows("layers.{i}.ffn_norm", f"{_LAYER}/output_layer_norm"),
    *dense_rows("pooler", "pooler_transform"),
    *dense_rows("mlm.transform", "cls/predictions/transform/dense"),
    *norm_rows("mlm.norm", "cls/predictions/transform/LayerNorm"),
    Row("mlm.output_bias", "cls/predictions/output_bias/bias"),
), skips=(
    # The exporter saves the preprocessing's casing beside the weights (`export_tfhub_lib`).
    Skip("do_lower_case/*", "the tokenizer's lower-casing flag the exporter saved, not a weight"),
))

LAYOUT = object_bundle.ObjectLayout(FORMAT, TABLE, DEFAULT_ACTIVATION, object_bundle.keras_attention_shape,
                                    object_bundle.keras_attention_heads, names_in_graph=True, why_graph=WHY_GRAPH)
FUNCTIONAL_LAYOUT = replace(LAYOUT, format_name=FORMAT_FUNCTIONAL, why_graph=WHY_GRAPH_FUNCTIONAL)


def kind_of(prefix: Path) -> str | None:
    """FORMAT for a SavedModel's variables (keys by position), FORMAT_FUNCTIONAL for a checkpoint
    of the functional `BertEncoder` (Keras layers keyed `layer_with_weights-N`, the Model
    Garden's transformer blocks inside), else None. From the index alone; never raises."""
    try:
        reader = tf_bundle.BundleReader(prefix)
        paths, _ = object_bundle.variable_paths(reader)
    except Exception:  # sniffing never fails: the reader reports a broken bundle properly
        return None
    keys = list(paths)
    if keys and sum(bool(_POSITIONAL_KEY.match(key)) for key in keys) * 2 > len(keys):
        return FORMAT
    if any(_FUNCTIONAL_LAYER in key for key in keys) and any(_GARDEN_BLOCK in key for key in keys):
        return FORMAT_FUNCTIONAL
    return None


def sniff(path: Path) -> str | None:
    path = Path(path)
    prefix = tf_prefix.bundle_prefix_of(path / VARIABLES_PREFIX if path.is_dir() else path)
    return kind_of(prefix) if prefix is not None else None


def candidates(directory: Path) -> list[Path]:
    """A SavedModel directory's variables bundle, the bundle of its `variables/` directory, or a
    functional BertEncoder checkpoint in the directory."""
    found = [prefix for prefix in (directory / VARIABLES_PREFIX, directory / VARIABLES_PREFIX.name)
             if Path(f"{prefix}{tf_bundle.INDEX_SUFFIX}").is_file() and kind_of(prefix) == FORMAT]
    return found + [prefix for prefix in tf_prefix.bundle_prefixes(directory)
                    if prefix not in found and kind_of(prefix) == FORMAT_FUNCTIONAL]


def read(path: Path, *, config_path: Path | None = None, num_heads: int | None = None) -> ParameterTree:
    """Read a TF-Hub BERT SavedModel's variables (the SavedModel directory, its `variables/`
    directory, or the bundle's prefix, `.index` or data file)."""
    path = Path(path)
    if path.is_dir() and Path(f"{path / VARIABLES_PREFIX}{tf_bundle.INDEX_SUFFIX}").is_file():
        path = path / VARIABLES_PREFIX
    prefix = tf_prefix.bundle_prefix_of(path)
    layout = LAYOUT if prefix is None or kind_of(prefix) != FORMAT_FUNCTIONAL else FUNCTIONAL_LAYOUT
    return object_bundle.read(path, layout, config_path=config_path, num_heads=num_heads)
