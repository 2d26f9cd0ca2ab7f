"""bert-for-tf2 (kpe/bert-for-tf2, `import bert`): a TF2 Keras BERT layer, `BertModelLayer`,
saved inside the user's Keras model with `model.save_weights('x.ckpt')` (an object-based
checkpoint).

Object paths below the layer, from the library's sources (bert/model.py, embeddings.py,
transformer.py, attention.py; params-flow's LayerNormalization): `embeddings_layer/`
{`word_embeddings_layer`, `token_type_embeddings_layer`, `position_embeddings_layer`}`/embeddings`
and `layer_norm_layer/{gamma,beta}`; per layer `encoders_layer/encoder_layers/{i}/` with
`self_attention_layer/attention_layer/{query,key,value}_layer/{kernel,bias}`,
`self_attention_layer/attention_projector/{dense,layer_norm}`, `intermediate_layer`,
`output_projector/{dense,layer_norm}`. These are what its loader (bert/loader.py,
`map_to_stock_variable_name`) pairs with Google's names. Kernels are [in, out] as Google's.

The layer sits in the user's model (`layer_with_weights-0/...`): that scope is found and
reported; the user's own layers (a classifier on top) and optimizer state are listed as ignored.
bert-for-tf2 has no pooler and no masked-LM head: its checkpoints hold the encoder only.

Numerics: params-flow's `gelu` is the tanh approximation, LayerNorm epsilon 1e-12, the attention
mask adds -10000.0: google-research/bert's own, hence a name in the Google TF family ("tf-...").
Read-only.
"""

from __future__ import annotations

from pathlib import Path

from ..tree import ParameterTree
from . import object_bundle
from .table import Row, Table, dense_rows, norm_rows

FORMAT = "tf-bert-for-tf2"
#: params_flow.activations.gelu: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
DEFAULT_ACTIVATION = "gelu_tanh"

_LAYER = "encoders_layer/encoder_layers/{i}"


TABLE = Table(FORMAT, (
    Row("embeddings.word", "embeddings_layer/word_embeddings_layer/embeddings"),
    Row("embeddings.token_type", "embeddings_layer/token_type_embeddings_layer/embeddings"),
    Row("embeddings.position", "embeddings_layer/position_embeddings_layer/embeddings"),
    *norm_rows("embeddings.norm", "embeddings_layer/layer_norm_layer"),
    *dense_rows("layers.{i}.attention.query", f"{_LAYER}/self_attention_layer/attention_layer/query_layer"),
    *dense_rows("layers.{i}.attention.key", f"{_LAYER}/self_attention_layer/attention_layer/key_layer"),
    *dense_rows("layers.{i}.attention.value", f"{_LAYER}/self_attention_layer/attention_layer/value_layer"),
    *dense_rows("layers.{i}.attention.output", f"{_LAYER}/self_attention_layer/attention_projector/dense"),
    *norm_rows("layers.{i}.attention_norm", f"{_LAYER}/self_attention_layer/attention_projector/layer_norm"),
    *dense_rows("layers.{i}.ffn.intermediate", f"{_LAYER}/intermediate_layer"),
    *dense_rows("layers.{i}.ffn.output", f"{_LAYER}/output_projector/dense"),
    *norm_rows("layers.{i}.ffn_norm", f"{_LAYER}/output_projector/layer_norm"),
))

LAYOUT = object_bundle.ObjectLayout(FORMAT, TABLE, DEFAULT_ACTIVATION)
sniff = object_bundle.sniffer(FORMAT, TABLE)
candidates = object_bundle.candidate_finder(TABLE)


def read(path: Path, *, config_path: Path | None = None, num_heads: int | None = None) -> ParameterTree:
    """Read a Keras model holding a bert-for-tf2 `BertModelLayer` (prefix, `.index`, data file or
    directory)."""
    return object_bundle.read(path, LAYOUT, config_path=config_path, num_heads=num_heads)
