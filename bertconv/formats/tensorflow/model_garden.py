"""TF2 Model Garden BERT checkpoints (`tf-models-official`): `BertEncoderV2` and the
`BertPretrainerV2` masked-LM head, saved with `tf.train.Checkpoint`.

Object paths, from tensorflow/models `official/nlp/modeling`:
  - `networks/bert_encoder.py` (BertEncoderV2): `_embedding_layer` (OnDeviceEmbedding,
    variable `embeddings`), `_position_embedding_layer` (PositionEmbedding, `embeddings`),
    `_type_embedding_layer`, `_embedding_norm_layer` (LayerNormalization), `_transformer_layers`
    (a list: `_transformer_layers/{i}`), `_pooler_layer` (Dense, tanh);
  - `layers/transformer_encoder_block.py`: `_attention_layer` (Keras MultiHeadAttention:
    `_query_dense`, `_key_dense`, `_value_dense`, `_output_dense`, EinsumDense kernels
    [H, A, H/A], biases [A, H/A], output kernel [A, H/A, H]), `_attention_layer_norm`,
    `_intermediate_dense` [H, I], `_output_dense` [I, H], `_output_layer_norm`;
  - `models/bert_pretrainer.py` (BertPretrainerV2): `checkpoint_items` = `encoder`,
    `masked_lm` (and any `classification_heads`); as an attribute of a wrapping object the
    encoder is `encoder_network`;
  - `layers/masked_lm.py` (MaskedLM): `dense` (transform), `layer_norm`, `output_bias.Sbias`
    (the weight `output_bias/bias`), and `embedding_table`: the encoder's word embeddings. The
    checkpoint stores that shared variable once, under its shortest path, which is
    `masked_lm/embedding_table` when the head is saved and `encoder/_embedding_layer/embeddings`
    when it is not.

Saved as `tf.train.Checkpoint(**pretrainer.checkpoint_items)` the paths start `encoder/` and
`masked_lm/`; as `tf.train.Checkpoint(model=pretrainer)`, `model/encoder_network/` and
`model/masked_lm/`: the scope (`model/`) is found, not assumed. The Model Garden's own converter
(`tf2_encoder_checkpoint_converter`) keeps only the encoder; here the masked-LM head comes along.

Numerics: BertEncoderV2's default `inner_activation` is `gelu(approximate=True)` (tanh), as is
`official.modeling.activations.gelu`, the pre-training task's `mlm_activation`; LayerNorm epsilon
1e-12 throughout; Keras' masked softmax adds -1e9 where Google adds -10000, which agree except on a
query whose keys are all masked. The format is named in the Google TF family ("tf-...").

A BertPretrainerV2 next-sentence head (the pre-training task's `next_sentence`, layers/cls_head.py
`ClassificationHead`: `dense` [H, H] with tanh on the [CLS] vector, then `out_proj` [H, 2]) computes
what Google's pooler + NSP layer compute, but with its own dense layer: BertEncoderV2's
`_pooler_layer` (pooled_output) is not in the pre-training loss and stays untrained. So a
checkpoint holding exactly one such 2-class head with an [H, H] dense (the trainer's
`Checkpoint(model=pretrainer)`: `classification_heads/0/{dense,out_proj}`) is read with
`NSP_TABLE`: the head's dense as the pooler, out_proj as NSP, the encoder's pooler ignored with that
reason. `Checkpoint(**checkpoint_items)` saves only the head's dense (`next_sentence.pooler_dense`),
no NSP output layer: ignored. Any other classification head is a task head: ignored. Read-only: write it `--to tf` (Google's names), which the Model
Garden's own converter reads.
"""

from __future__ import annotations

from pathlib import Path

from ...tree import ParameterTree
from . import object_bundle
from ..table import Row, Skip, Table

FORMAT = "tf-garden"
#: BertEncoderV2's default inner activation: tf_keras.activations.gelu(x, approximate=True).
DEFAULT_ACTIVATION = "gelu_tanh"

_ENCODER = ("encoder", "encoder_network")  # as a checkpoint item, as a BertPretrainerV2 attribute
_LAYER = "_transformer_layers/{i}"


def _rows(canonical: str, path: str, *, extra: tuple[str, ...] = ()) -> Row:
    """A row for a path below the encoder, spelled under each of the encoder's names."""
    first, *others = (f"{encoder}/{path}" for encoder in _ENCODER)
    return Row(canonical, first, legacy=(*others, *extra))


def _norm(canonical: str, path: str) -> tuple[Row, ...]:
    return (_rows(f"{canonical}.gamma", f"{path}/gamma"), _rows(f"{canonical}.beta", f"{path}/beta"))


def _dense(canonical: str, path: str) -> tuple[Row, ...]:
    return (_rows(f"{canonical}.kernel", f"{path}/kernel"), _rows(f"{canonical}.bias", f"{path}/bias"))


TABLE = Table(FORMAT, (
    _rows("embeddings.word", "_embedding_layer/embeddings", extra=("masked_lm/embedding_table",)),
    _rows("embeddings.token_type", "_type_embedding_layer/embeddings"),
    _rows("embeddings.position", "_position_embedding_layer/embeddings"),
    *_norm("embeddings.norm", "_embedding_norm_layer"),
    *_dense("layers.{i}.attention.query", f"{_LAYER}/_attention_layer/_query_dense"),
    *_dense("layers.{i}.attention.key", f"{_LAYER}/_attention_layer/_key_dense"),
    *_dense("layers.{i}.attention.value", f"{_LAYER}/_attention_layer/_value_dense"),
    *_dense("layers.{i}.attention.output", f"{_LAYER}/_attention_layer/_output_dense"),
    *_norm("layers.{i}.attention_norm", f"{_LAYER}/_attention_layer_norm"),
    *_dense("layers.{i}.ffn.intermediate", f"{_LAYER}/_intermediate_dense"),
    *_dense("layers.{i}.ffn.output", f"{_LAYER}/_output_dense"),
    *_norm("layers.{i}.ffn_norm", f"{_LAYER}/_output_layer_norm"),
    *_dense("pooler", "_pooler_layer"),
    Row("mlm.transform.kernel", "masked_lm/dense/kernel"),
    Row("mlm.transform.bias", "masked_lm/dense/bias"),
    Row("mlm.norm.gamma", "masked_lm/layer_norm/gamma"),
    Row("mlm.norm.beta", "masked_lm/layer_norm/beta"),
    Row("mlm.output_bias", "masked_lm/output_bias.Sbias"),
), skips=(
    Skip("*classification_heads/*", "a BertPretrainerV2 classification head (such as its next-sentence "
                                    "ClassificationHead), not part of Google's BERT layout"),
    Skip("*next_sentence*", "a BertPretrainerV2 classification head (next sentence), not Google's NSP layer"),
))

_NSP_HEAD = "classification_heads/0"
#: TABLE for a checkpoint with a next-sentence head (see the module docstring).
NSP_TABLE = Table(FORMAT, (
    *(row for row in TABLE.rows if not row.canonical.startswith("pooler.")),
    Row("pooler.kernel", f"{_NSP_HEAD}/dense/kernel"),
    Row("pooler.bias", f"{_NSP_HEAD}/dense/bias"),
    Row("nsp.kernel", f"{_NSP_HEAD}/out_proj/kernel"),
    Row("nsp.bias", f"{_NSP_HEAD}/out_proj/bias"),
), skips=(
    Skip("*_pooler_layer/*", "BertEncoderV2's pooled_output layer, which Model Garden pre-training does not "
                             "train: its next-sentence head pools [CLS] with its own dense layer, read as the pooler"),
    *TABLE.skips,
))


def _layout(table: Table) -> object_bundle.ObjectLayout:
    return object_bundle.ObjectLayout(FORMAT, table, DEFAULT_ACTIVATION, object_bundle.keras_attention_shape,
                                      object_bundle.keras_attention_heads)


LAYOUT, NSP_LAYOUT = _layout(TABLE), _layout(NSP_TABLE)
sniff = object_bundle.sniffer(FORMAT, TABLE)
candidates = object_bundle.candidate_finder(TABLE)


def read(path: Path, *, config_path: Path | None = None, num_heads: int | None = None) -> ParameterTree:
    """Read a Model Garden BERT checkpoint (prefix, `.index`, data file or directory); with its
    next-sentence head as the pooler and NSP when it has one (see the module docstring)."""
    tree = object_bundle.read(path, LAYOUT, config_path=config_path, num_heads=num_heads)
    if _has_next_sentence_head(tree):
        tree = object_bundle.read(path, NSP_LAYOUT, config_path=config_path, num_heads=num_heads)
    return tree


def _has_next_sentence_head(tree: ParameterTree) -> bool:
    """One classification head, 2 classes, pooling with an [H, H] dense: the pre-training task's."""
    hidden = tree.config.hidden_size
    heads = {name.split("classification_heads/", 1)[1].split("/", 1)[0]: None
             for name in (i.name for i in tree.ignored) if "classification_heads/" in name}
    shapes = {name.split(f"{_NSP_HEAD}/", 1)[1].split("/.ATTRIBUTES", 1)[0]: tuple(i.shape)
              for i in tree.ignored for name in [i.name] if f"{tree.scope}{_NSP_HEAD}/" in name}
    return list(heads) == ["0"] and shapes.get("dense/kernel") == (hidden, hidden) \
        and shapes.get("out_proj/kernel") == (hidden, 2)
