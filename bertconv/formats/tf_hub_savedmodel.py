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

Numerics as the Model Garden's (tanh GELU): a name in the Google TF family. Read-only.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..containers import tf_bundle
from ..tree import ParameterTree
from . import object_bundle
from .table import Row, Table, dense_rows, norm_rows

FORMAT = "tf-hub-savedmodel"
#: The Model Garden encoder's default inner activation: gelu(approximate=True), tanh.
DEFAULT_ACTIVATION = "gelu_tanh"
VARIABLES_PREFIX = Path("variables") / "variables"
#: A Keras SavedModel's variable keys: positions in the `variables` list of the model or of a
#: sub-object.
_POSITIONAL_KEY = re.compile(r"^(?:[^/]+/)*variables/\d+/\.ATTRIBUTES/VARIABLE_VALUE$")
WHY_GRAPH = "a SavedModel keys its variables by position (`variables/N`), and only the object graph names them"

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
))

LAYOUT = object_bundle.ObjectLayout(FORMAT, TABLE, DEFAULT_ACTIVATION, object_bundle.keras_attention_shape,
                                    object_bundle.keras_attention_heads, names_in_graph=True, why_graph=WHY_GRAPH)


def _is_savedmodel_variables(prefix: Path) -> bool:
    """Keys of a Keras SavedModel: every variable keyed by position (index alone; never raises)."""
    try:
        reader = tf_bundle.BundleReader(prefix)
        paths, _ = object_bundle.variable_paths(reader)
    except Exception:  # sniffing never fails: the reader reports a broken bundle properly
        return False
    keys = [key for key in reader.entries if key in paths]
    return bool(keys) and sum(bool(_POSITIONAL_KEY.match(key)) for key in keys) * 2 > len(keys)


def sniff(path: Path) -> str | None:
    path = Path(path)
    prefix = tf_bundle.bundle_prefix_of(path / VARIABLES_PREFIX if path.is_dir() else path)
    return FORMAT if prefix is not None and _is_savedmodel_variables(prefix) else None


def candidates(directory: Path) -> list[Path]:
    """A SavedModel directory's variables bundle, or the bundle of its `variables/` directory."""
    found = []
    for prefix in (directory / VARIABLES_PREFIX, directory / VARIABLES_PREFIX.name):
        if Path(f"{prefix}{tf_bundle.INDEX_SUFFIX}").is_file() and _is_savedmodel_variables(prefix):
            found.append(prefix)
    return found


def read(path: Path, *, config_path: Path | None = None, num_heads: int | None = None) -> ParameterTree:
    """Read a TF-Hub BERT SavedModel's variables (the SavedModel directory, its `variables/`
    directory, or the bundle's prefix, `.index` or data file)."""
    path = Path(path)
    if path.is_dir() and Path(f"{path / VARIABLES_PREFIX}{tf_bundle.INDEX_SUFFIX}").is_file():
        path = path / VARIABLES_PREFIX
    return object_bundle.read(path, LAYOUT, config_path=config_path, num_heads=num_heads)
