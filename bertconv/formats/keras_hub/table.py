"""keras-hub's masked-LM presets, one declaration per family: what its backbone's config keys
mean, where its weights lie in the preset's Keras 3 files, and what its code computes with.

A keras-hub backbone hard-codes what a transformers config states: the activation, the LayerNorm
epsilon, and (in its task's `MaskedLMHead`) the head's own activation and an epsilon of 1e-5.
These are facts of the family here (keras-hub 0.32: models/<family>/<family>_backbone.py and
<family>_masked_lm.py), read into every tree and compared with the source's on writing.

Names are the Keras 3 paths of a variable inside its file, under `layers/`, as
`backbone.layers` orders them: a layer's group is its class in snake_case (`transformer_encoder`,
then `transformer_encoder_1`, ...), its sub-layers the attributes holding them. The first encoder
layer's group carries no index; the table spells it `transformer_encoder_0` (`spelled_index`).
Attention kernels are stored per head ([H, A, D], output [A, D, H]) and read reshaped to the
canonical [H, H] (`HEADWISE`). Adding a family is one more `KerasHubFamily` in `FAMILIES`.

RoBERTa, XLM-RoBERTa and DistilBERT embed with a `TokenAndPositionEmbedding` (no token types, no
pooler); RoBERTa's positions start past the padding index in transformers and at row 0 in
keras-hub (`formats/keras_hub/positions.py`). ELECTRA has a backbone and no masked-LM task in
keras-hub 0.32: its presets carry the encoder, never the MLM or replaced-token head.

DeBERTa-v3 (`DebertaV3Backbone`) is transformers' DeBERTa-v2 computation with its settings fixed:
shared keys, c2p and p2c, LayerNorm'd relative embeddings, log buckets up to `max_sequence_length`,
no absolute positions, no token types (`stated`); of what a transformers config states, the
fields without which the tensors themselves differ are required outright (`required`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ...records import field, record, replace
from ..table import Row, Skip, Table

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

#: The files of a preset.
CONFIG_FILE = "config.json"
TASK_FILE = "task.json"
METADATA_FILE = "metadata.json"
PREPROCESSOR_FILE = "preprocessor.json"
TOKENIZER_FILE = "tokenizer.json"
MODEL_WEIGHTS = "model.weights.h5"
TASK_WEIGHTS = "task.weights.h5"
#: What a preset saved with shards holds instead of model.weights.h5.
SHARDED_INDEX = "model.weights.json"
TOKENIZER_ASSETS = "assets/tokenizer"
#: The entry names' prefixes: which file a variable is in.
MODEL_PREFIX = MODEL_WEIGHTS + ":"
TASK_PREFIX = TASK_WEIGHTS + ":"
#: keras-hub's `MaskedLMHead` default, which no masked-LM task overrides.
HEAD_LAYER_NORM_EPS = 1e-5
#: Keras' own config keys of a layer: they change nothing a model computes (dtype is read apart).
KERAS_INERT = ("name", "trainable", "dropout")

_LAYER = MODEL_PREFIX + "layers/transformer_encoder_{i}"
_ATTENTION = _LAYER + "/_self_attention_layer"


def _dense(canonical: str, name: str) -> tuple[Row, ...]:
    return Row(f"{canonical}.kernel", f"{name}/vars/0"), Row(f"{canonical}.bias", f"{name}/vars/1")


def _norm(canonical: str, name: str) -> tuple[Row, ...]:
    return Row(f"{canonical}.gamma", f"{name}/vars/0"), Row(f"{canonical}.beta", f"{name}/vars/1")


#: keras-hub's `TransformerEncoder` (post-LayerNorm, as BERT).
_ENCODER_ROWS = (
    *_dense("layers.{i}.attention.query", f"{_ATTENTION}/query_dense"),
    *_dense("layers.{i}.attention.key", f"{_ATTENTION}/key_dense"),
    *_dense("layers.{i}.attention.value", f"{_ATTENTION}/value_dense"),
    *_dense("layers.{i}.attention.output", f"{_ATTENTION}/output_dense"),
    *_norm("layers.{i}.attention_norm", f"{_LAYER}/_self_attention_layer_norm"),
    *_dense("layers.{i}.ffn.intermediate", f"{_LAYER}/_feedforward_intermediate_dense"),
    *_dense("layers.{i}.ffn.output", f"{_LAYER}/_feedforward_output_dense"),
    *_norm("layers.{i}.ffn_norm", f"{_LAYER}/_feedforward_layer_norm"),
)
#: keras-hub's `MaskedLMHead`, the task's own weights (its decoder is the token embedding).
_HEAD = TASK_PREFIX + "layers/masked_lm_head"
_HEAD_ROWS = (
    *_dense("mlm.transform", f"{_HEAD}/_intermediate_dense"),
    *_norm("mlm.norm", f"{_HEAD}/_intermediate_layer_norm"),
    Row("mlm.output_bias", f"{_HEAD}/vars/0"),
)
_SKIPS = (
    Skip(TASK_PREFIX + "optimizer/*", "optimizer state (saved with the task's weights), not a model parameter"),
    Skip(TASK_PREFIX + "preprocessor/*", "the preprocessor's state, not a model parameter"),
)

#: Attention sub-layers whose variables are stored per head: kernel [H, A, D] and bias [A, D]
#: (query, key, value), kernel [A, D, H] (output); canonical [H, H] and [H].
HEADWISE = re.compile(r"/_self_attention_layer/(_?query|_?key|_?value|output)_dense/vars/[01]$")

BERT_TABLE = Table("keras-hub", (
    Row("embeddings.word", MODEL_PREFIX + "layers/reversible_embedding/vars/0"),
    Row("embeddings.position", MODEL_PREFIX + "layers/position_embedding/vars/0"),
    Row("embeddings.token_type", MODEL_PREFIX + "layers/embedding/vars/0"),
    *_norm("embeddings.norm", MODEL_PREFIX + "layers/layer_normalization"),
    *_ENCODER_ROWS,
    *_dense("pooler", MODEL_PREFIX + "layers/dense"),
    *_HEAD_ROWS,
), skips=_SKIPS)

#: ALBERT: the projection E -> H is the first Dense (`embedding_projection`), the pooler the
#: second; stored layer g * J + j is `group_{g}_inner_layer_{j}`, the (g * J + j)-th encoder.
ALBERT_TABLE = Table("keras-hub", (
    Row("embeddings.word", MODEL_PREFIX + "layers/reversible_embedding/vars/0"),
    Row("embeddings.position", MODEL_PREFIX + "layers/position_embedding/vars/0"),
    Row("embeddings.token_type", MODEL_PREFIX + "layers/embedding/vars/0"),
    *_norm("embeddings.norm", MODEL_PREFIX + "layers/layer_normalization"),
    *_dense("embeddings.projection", MODEL_PREFIX + "layers/dense"),
    *_ENCODER_ROWS,
    *_dense("pooler", MODEL_PREFIX + "layers/dense_1"),
    *_HEAD_ROWS,
), skips=_SKIPS)


#: RoBERTa, XLM-RoBERTa, DistilBERT: token and position embeddings in one layer, no pooler.
_TOKEN_AND_POSITION = MODEL_PREFIX + "layers/token_and_position_embedding"
ROBERTA_TABLE = Table("keras-hub", (
    Row("embeddings.word", _TOKEN_AND_POSITION + "/token_embedding/vars/0"),
    Row("embeddings.position", _TOKEN_AND_POSITION + "/position_embedding/vars/0"),
    *_norm("embeddings.norm", MODEL_PREFIX + "layers/layer_normalization"),
    *_ENCODER_ROWS,
    *_HEAD_ROWS,
), skips=_SKIPS)


def _electra_table(projected: bool) -> Table:
    """ELECTRA's backbone: the projection E -> H is the first Dense when E differs from H (only
    then has the backbone one), the pooler the next."""
    return Table("keras-hub", (
        Row("embeddings.word", MODEL_PREFIX + "layers/reversible_embedding/vars/0"),
        Row("embeddings.position", MODEL_PREFIX + "layers/position_embedding/vars/0"),
        Row("embeddings.token_type", MODEL_PREFIX + "layers/embedding/vars/0"),
        *_norm("embeddings.norm", MODEL_PREFIX + "layers/layer_normalization"),
        *(_dense("embeddings.projection", MODEL_PREFIX + "layers/dense") if projected else ()),
        *_ENCODER_ROWS,
        *_dense("pooler", MODEL_PREFIX + ("layers/dense_1" if projected else "layers/dense")),
    ), skips=_SKIPS)


ELECTRA_TABLE, ELECTRA_UNPROJECTED_TABLE = _electra_table(True), _electra_table(False)

#: DeBERTa-v3's `DisentangledAttentionEncoder`: its attention's sub-layers are `_query_dense`, ...
#: (query, key, value per head; the output [H, H] as a Dense), the rest as `TransformerEncoder`'s.
_DEBERTA_LAYER = MODEL_PREFIX + "layers/disentangled_attention_encoder_{i}"
_DEBERTA_ATTENTION = _DEBERTA_LAYER + "/_self_attention_layer"
DEBERTA_V3_TABLE = Table("keras-hub", (
    Row("embeddings.word", MODEL_PREFIX + "layers/reversible_embedding/vars/0"),
    *_norm("embeddings.norm", MODEL_PREFIX + "layers/layer_normalization"),
    Row("relative_embeddings", MODEL_PREFIX + "layers/relative_embedding/vars/0"),
    *_norm("relative_norm", MODEL_PREFIX + "layers/relative_embedding/layer_norm"),
    *(replace(row, name=row.name.replace(_LAYER, _DEBERTA_LAYER)) for row in _ENCODER_ROWS
      if ".attention." not in row.canonical),
    *_dense("layers.{i}.attention.query", f"{_DEBERTA_ATTENTION}/_query_dense"),
    *_dense("layers.{i}.attention.key", f"{_DEBERTA_ATTENTION}/_key_dense"),
    *_dense("layers.{i}.attention.value", f"{_DEBERTA_ATTENTION}/_value_dense"),
    *_dense("layers.{i}.attention.output", f"{_DEBERTA_ATTENTION}/_output_dense"),
    *_HEAD_ROWS,
), skips=_SKIPS)


@record
class KerasHubFamily:
    """One family's keras-hub preset, declared.

    Attributes:
      model_type: bertconv's family (`BertConfig.model_type`).
      package: its keras-hub module directory (`keras_hub.src.models.<package>`) and file prefix.
      backbone, task, preprocessor, tokenizer: keras-hub's class names.
      table: where its variables lie.
      config_keys: backbone config key -> `BertConfig` field.
      stated: `BertConfig` fields its code hard-codes (the encoder's activation and epsilon, the
        head's), with their values.
      vocabulary: the tokenizer's asset files in `assets/tokenizer/`, each with the tokenizer
        file of a checkpoint directory (`companions.TOKENIZER_FILES`) it is.
      tokenizer_config: keys the tokenizer's config states beside `config_file`.
      object_names: Keras names of the layers, by their path's group (for the `vars` groups'
        `name` attributes), `{i}` the encoder layer.
      segments: whether the backbone has token types (a segment embedding); without, a preset's
        positions start at row `position_offset` of the canonical table (`positions`).
      unprojected_table: where the variables lie when the embeddings are not projected (ELECTRA
        with E = H), if that differs from `table`.
      masked_lm: whether keras-hub has a masked-LM task for the family (ELECTRA's has none: its
        presets are the backbone's, with no head).
      encoder_group: the encoder layers' group in the file (`<group>`, `<group>_1`, ...).
      encoder_layer: the encoder layers' Keras name, `{i}` the layer.
      derived: `BertConfig` fields its code sets from another's value (field -> that field).
      required: `stated` fields a source must have as stated: keras-hub's layout has no place
        for the tensors of another value, so no loss of them can be accepted.
      extra_keys, read_extra, write_extra: backbone config keys beyond the sizes (RoFormer-v2's
        `head_size`, `use_bias`, `activation`, `max_wavelength`), read into `BertConfig` fields
        (raising ValueError for a value bertconv does not compute) and written from them.
      defaults: `BertConfig` fields no preset states, at the value bertconv takes (RoFormer-v2's
        `max_position_embeddings`: its rotary positions have no bound in keras-hub).
      caveats: what keras-hub's code of the family computes otherwise than its source for any tree
        (notes of every `convert --to keras-hub`).
    """

    model_type: str
    package: str
    backbone: str
    task: str
    preprocessor: str
    tokenizer: str
    table: Table
    config_keys: dict[str, str]
    stated: dict[str, Any]
    vocabulary: dict[str, str]
    tokenizer_config: dict[str, Any] = field(default_factory=dict)
    object_names: dict[str, str] = field(default_factory=dict)
    segments: bool = True
    position_offset: int = 0
    unprojected_table: Table | None = None
    masked_lm: bool = True
    encoder_group: str = "transformer_encoder"
    encoder_layer: str = "transformer_layer_{i}"
    derived: dict[str, str] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    extra_keys: tuple[str, ...] = ()
    read_extra: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    write_extra: Callable[[Any], dict[str, Any]] | None = None
    defaults: dict[str, Any] = field(default_factory=dict)
    caveats: tuple[str, ...] = ()

    def table_for(self, projected: bool) -> Table:
        """The table of a model whose embeddings are (or are not) projected E -> H."""
        return self.table if projected or self.unprojected_table is None else self.unprojected_table

    def encoder_name(self, layer: int, inner_group_num: int) -> str:
        """The Keras name of stored encoder layer `layer`."""
        if "num_groups" in self.config_keys:
            return f"group_{layer // inner_group_num}_inner_layer_{layer % inner_group_num}"
        return self.encoder_layer.format(i=layer)


_SIZES = {"vocabulary_size": "vocab_size", "num_layers": "num_hidden_layers", "num_heads": "num_attention_heads",
          "hidden_dim": "hidden_size", "intermediate_dim": "intermediate_size",
          "max_sequence_length": "max_position_embeddings", "num_segments": "type_vocab_size"}
#: RoBERTa's and XLM-RoBERTa's: BERT's sizes without token types.
_ROBERTA_SIZES = {key: name for key, name in _SIZES.items() if key != "num_segments"}
#: keras-hub's RoBERTa and XLM-RoBERTa (roberta_backbone.py, roberta_masked_lm.py): exact GELU and
#: epsilon 1e-5 everywhere, the head's too (as transformers' RobertaLMHead), no token types.
_ROBERTA_NUMERICS = {"hidden_act": "gelu", "layer_norm_eps": 1e-5, "mlm_hidden_act": None,
                     "mlm_layer_norm_eps": None, "type_vocab_size": 0}
_ROBERTA_NAMES = {"layer_normalization": "embeddings_layer_norm"}
_NAMES = {"reversible_embedding": "token_embedding", "position_embedding": "position_embedding",
          "embedding": "segment_embedding", "layer_normalization": "embeddings_layer_norm"}

#: A WordPiece tokenizer's config beside its vocabulary (`lowercase` is the source's).
_WORDPIECE = {"vocabulary": None, "sequence_length": None, "lowercase": False, "strip_accents": False,
              "split": True, "suffix_indicator": "##", "oov_token": "[UNK]", "special_tokens": None,
              "special_tokens_in_strings": False}

#: RoFormer-v2 (roformer_v2_backbone.py, roformer_v2_encoder.py, roformer_v2_layers.py): bias-free
#: kernels stored [in, out] whole (not per head), one `RoformerNorm` scale per norm, no head weights
#: (its `RoformerV2MaskedLMHead` decodes with the token embedding: save_to_preset writes no task.weights.h5).
_V2_LAYER = MODEL_PREFIX + "layers/roformer_v2_encoder_{i}"
ROFORMER_V2_TABLE = Table("keras-hub", (
    Row("embeddings.word", MODEL_PREFIX + "layers/reversible_embedding/vars/0"),
    Row("embeddings.token_type", MODEL_PREFIX + "layers/embedding/vars/0"),
    Row("embeddings.norm.gamma", MODEL_PREFIX + "layers/roformer_norm/vars/0"),
    *(Row(f"layers.{{i}}.attention.{part}.kernel", f"{_V2_LAYER}/attention_layer/{short}_dense/vars/0")
      for part, short in (("query", "q"), ("key", "k"), ("value", "v"), ("output", "o"))),
    Row("layers.{i}.attention_norm.gamma", _V2_LAYER + "/attention_norm/vars/0"),
    Row("layers.{i}.ffn.intermediate.kernel", _V2_LAYER + "/feedforward_intermediate_dense/vars/0"),
    Row("layers.{i}.ffn.output.kernel", _V2_LAYER + "/feedforward_output_dense/vars/0"),
    Row("layers.{i}.ffn_norm.gamma", _V2_LAYER + "/feedforward_norm/vars/0"),
), skips=_SKIPS)
#: keras' serialized activation names RoFormer-v2's backbone computes as bertconv's ("gelu" is
#: keras.activations.gelu, approximate=False by default: the erf form).
_KERAS_ACTIVATIONS = {"relu": "relu", "gelu": "gelu"}
#: The base of its rotary positions bertconv computes (`runtime/sinusoids.py`), bert4keras' too.
ROTARY_BASE = 10000
#: The bound bertconv's runtimes take for a preset's inputs (keras-hub has none): bert4keras'
#: `max_position` when a config states no `max_position_embeddings`.
ROFORMER_V2_MAX_POSITIONS = 512


#: roformer_v2_attention.py reshapes `token_ids != 0` to [B, 1, S, 1] and hands it to
#: `dot_product_attention` as it is (transposed to a key mask on the torch backend only): a mask
#: over queries (measured on TensorFlow: the real tokens' hidden states of a padded row move by 1.7).
PADDED_QUERIES = ("keras-hub 0.32's RoFormer-v2 masks padded queries instead of padded keys (on TensorFlow and "
                  "JAX; its torch backend masks keys): in a batch padded with id 0 its outputs at the real tokens "
                  "differ from bert4keras' and bertconv's, which hide padded keys; unpadded inputs compute the same")


def _roformer_v2_fields(values: dict[str, Any]) -> dict[str, Any]:
    """RoFormer-v2's backbone keys beyond the sizes, as `BertConfig` fields; ValueError naming a
    value bertconv does not compute (biases, another rotary base, heads narrower than hidden_dim / num_heads)."""
    if values["use_bias"] is not False:
        raise ValueError(f"use_bias is {values['use_bias']!r}: RoFormer-v2 with biases is another model")
    if values["max_wavelength"] != ROTARY_BASE:
        raise ValueError(f"max_wavelength is {values['max_wavelength']!r}: bertconv rotates with base {ROTARY_BASE}")
    if values["head_size"] * values["num_heads"] != values["hidden_dim"]:
        raise ValueError(f"head_size {values['head_size']!r} x num_heads {values['num_heads']} is not hidden_dim "
                         f"{values['hidden_dim']}: attention of another width than the hidden size")
    if values["activation"] not in _KERAS_ACTIVATIONS:
        raise ValueError(f"activation is {values['activation']!r}, expected one of {', '.join(_KERAS_ACTIVATIONS)}")
    return {"hidden_act": _KERAS_ACTIVATIONS[values["activation"]]}


def _roformer_v2_keys(config: Any) -> dict[str, Any]:
    """The inverse of `_roformer_v2_fields`; ValueError for an activation keras has no name for."""
    names = {act: name for name, act in _KERAS_ACTIVATIONS.items()}
    if config.hidden_act not in names:
        raise ValueError(f"hidden_act is {config.hidden_act!r}; keras-hub's RoFormer-v2 computes "
                         f"{', '.join(names)} (keras' own names) only")
    return {"head_size": config.head_size, "use_bias": False, "activation": names[config.hidden_act],
            "max_wavelength": ROTARY_BASE}


FAMILIES: dict[str, KerasHubFamily] = {family.model_type: family for family in (
    KerasHubFamily(
        model_type="bert", package="bert", backbone="BertBackbone", task="BertMaskedLM",
        preprocessor="BertMaskedLMPreprocessor", tokenizer="BertTokenizer", table=BERT_TABLE,
        config_keys=_SIZES,
        # bert_backbone.py: TransformerEncoder(activation=gelu_approximate, layer_norm_epsilon=1e-12);
        # bert_masked_lm.py: MaskedLMHead(intermediate_activation="gelu"), Keras' exact GELU.
        stated={"hidden_act": "gelu_tanh", "layer_norm_eps": 1e-12, "mlm_hidden_act": "gelu",
                "mlm_layer_norm_eps": HEAD_LAYER_NORM_EPS},
        vocabulary={"vocabulary.txt": "vocab.txt"},
        tokenizer_config=_WORDPIECE,
        object_names={**_NAMES, "dense": "pooled_dense"},
    ),
    KerasHubFamily(
        model_type="albert", package="albert", backbone="AlbertBackbone", task="AlbertMaskedLM",
        preprocessor="AlbertMaskedLMPreprocessor", tokenizer="AlbertTokenizer", table=ALBERT_TABLE,
        config_keys={**_SIZES, "embedding_dim": "embedding_size", "num_groups": "num_hidden_groups",
                     "num_inner_repetitions": "inner_group_num"},
        # albert_backbone.py and albert_masked_lm.py: gelu_approximate in both, epsilon 1e-12.
        stated={"hidden_act": "gelu_tanh", "layer_norm_eps": 1e-12, "mlm_hidden_act": None,
                "mlm_layer_norm_eps": HEAD_LAYER_NORM_EPS},
        vocabulary={"vocabulary.spm": "spiece.model"},
        tokenizer_config={"proto": None, "sequence_length": None, "add_bos": False, "add_eos": False},
        object_names={**_NAMES, "dense": "embedding_projection", "dense_1": "pooled_dense"},
    ),
    KerasHubFamily(
        model_type="roberta", package="roberta", backbone="RobertaBackbone", task="RobertaMaskedLM",
        preprocessor="RobertaMaskedLMPreprocessor", tokenizer="RobertaTokenizer", table=ROBERTA_TABLE,
        config_keys=_ROBERTA_SIZES, stated=_ROBERTA_NUMERICS,
        vocabulary={"vocabulary.json": "vocab.json", "merges.txt": "merges.txt"},
        tokenizer_config={"sequence_length": None, "add_prefix_space": False,
                          "unsplittable_tokens": ["</s>", "<pad>", "<mask>", "<s>"]},
        object_names=_ROBERTA_NAMES, segments=False, position_offset=2,
    ),
    KerasHubFamily(
        model_type="xlm-roberta", package="xlm_roberta", backbone="XLMRobertaBackbone", task="XLMRobertaMaskedLM",
        preprocessor="XLMRobertaMaskedLMPreprocessor", tokenizer="XLMRobertaTokenizer", table=ROBERTA_TABLE,
        config_keys=_ROBERTA_SIZES, stated=_ROBERTA_NUMERICS,
        vocabulary={"vocabulary.spm": "sentencepiece.bpe.model"},
        tokenizer_config={"proto": None, "sequence_length": None, "add_bos": False, "add_eos": False},
        object_names=_ROBERTA_NAMES, segments=False, position_offset=2,
    ),
    KerasHubFamily(
        model_type="distilbert", package="distil_bert", backbone="DistilBertBackbone", task="DistilBertMaskedLM",
        preprocessor="DistilBertMaskedLMPreprocessor", tokenizer="DistilBertTokenizer", table=ROBERTA_TABLE,
        config_keys=_ROBERTA_SIZES,
        # distil_bert_backbone.py: exact GELU, epsilon 1e-12 (as transformers'); its MaskedLMHead's
        # epsilon is 1e-5 where transformers' vocab_layer_norm has 1e-12.
        stated={"hidden_act": "gelu", "layer_norm_eps": 1e-12, "mlm_hidden_act": None,
                "mlm_layer_norm_eps": HEAD_LAYER_NORM_EPS, "type_vocab_size": 0},
        vocabulary={"vocabulary.txt": "vocab.txt"}, tokenizer_config=_WORDPIECE,
        object_names=_ROBERTA_NAMES, segments=False,
    ),
    KerasHubFamily(
        model_type="electra", package="electra", backbone="ElectraBackbone", task="",
        preprocessor="", tokenizer="ElectraTokenizer", table=ELECTRA_TABLE,
        config_keys={**{("vocab_size" if key == "vocabulary_size" else key): name for key, name in _SIZES.items()},
                     "embedding_dim": "embedding_size"},
        # electra_backbone.py: gelu_approximate, epsilon 1e-12 (transformers' ELECTRA: exact GELU).
        stated={"hidden_act": "gelu_tanh", "layer_norm_eps": 1e-12, "mlm_hidden_act": None,
                "mlm_layer_norm_eps": None},
        vocabulary={"vocabulary.txt": "vocab.txt"}, tokenizer_config=_WORDPIECE,
        object_names={**_NAMES, "dense": "embeddings_projection", "dense_1": "pooled_dense"},
        unprojected_table=ELECTRA_UNPROJECTED_TABLE, masked_lm=False,
    ),
    KerasHubFamily(
        model_type="deberta-v2", package="deberta_v3", backbone="DebertaV3Backbone", task="DebertaV3MaskedLM",
        preprocessor="DebertaV3MaskedLMPreprocessor", tokenizer="DebertaV3Tokenizer", table=DEBERTA_V3_TABLE,
        config_keys={**_ROBERTA_SIZES, "bucket_size": "position_buckets"},
        # deberta_v3_backbone.py: exact GELU, epsilon 1e-7 (embeddings, relative embeddings, encoder);
        # disentangled_self_attention.py: the layer's own query and key project the relative
        # embeddings, both terms, scale 1 / sqrt(3 D); deberta_v3_masked_lm.py: MaskedLMHead(gelu), 1e-5.
        stated={"hidden_act": "gelu", "layer_norm_eps": 1e-7, "mlm_hidden_act": None,
                "mlm_layer_norm_eps": HEAD_LAYER_NORM_EPS, "type_vocab_size": 0, "relative_attention": True,
                "share_att_key": True, "pos_att_type": ("c2p", "p2c"), "relative_embedding_norm": True,
                "position_biased_input": False},
        # Its log buckets reach `max_sequence_length`, as transformers' `max_relative_positions`.
        derived={"max_relative_positions": "max_position_embeddings"},
        required=("relative_attention", "share_att_key", "relative_embedding_norm", "position_biased_input"),
        vocabulary={"vocabulary.spm": "spm.model"},
        tokenizer_config={"proto": None, "sequence_length": None, "add_bos": False, "add_eos": False},
        object_names={"reversible_embedding": "token_embedding", "layer_normalization": "embeddings_layer_norm",
                      "relative_embedding": "rel_embedding"},
        segments=False, encoder_group="disentangled_attention_encoder",
        encoder_layer="disentangled_attention_encoder_layer_{i}",
    ),
    KerasHubFamily(
        model_type="roformer_v2", package="roformer_v2", backbone="RoformerV2Backbone", task="RoformerV2MaskedLM",
        preprocessor="RoformerV2MaskedLMPreprocessor", tokenizer="RoformerV2Tokenizer", table=ROFORMER_V2_TABLE,
        config_keys={key: name for key, name in _SIZES.items() if key != "max_sequence_length"},
        # Its norms' epsilon is keras.backend.epsilon(); every norm stores a scale.
        stated={"layer_norm_eps": 1e-7, "mlm_hidden_act": None, "mlm_layer_norm_eps": None,
                "position_embedding_type": "rotary_interleaved", "norm_scale": True},
        vocabulary={"vocabulary.txt": "vocab.txt"}, tokenizer_config=_WORDPIECE,
        object_names={"reversible_embedding": "token_embedding", "embedding": "segment_embedding",
                      "roformer_norm": "embeddings_layer_norm"},
        encoder_group="roformer_v2_encoder",
        extra_keys=("head_size", "use_bias", "activation", "max_wavelength"),
        read_extra=_roformer_v2_fields, write_extra=_roformer_v2_keys,
        defaults={"max_position_embeddings": ROFORMER_V2_MAX_POSITIONS},
        caveats=(PADDED_QUERIES,),
    ),
)}

#: keras-hub's registered name of a backbone class -> its family.
BY_BACKBONE = {f"keras_hub>{family.backbone}": family for family in FAMILIES.values()}
