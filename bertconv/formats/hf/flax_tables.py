"""transformers 4.x's Flax spelling of each family: one `FlaxLayout` per `model_type`.

A Flax model's parameters are a nested dict; joined with '/', its paths are the rows below, in
the order the model creates them (its modules' `setup` and first call), which is the order
`save_pretrained` writes a freshly built model's dict in. A `{i}` row stands for every stored
layer. The base model's files (`FlaxBertModel`, ...) drop the `base/` level. Dense kernels are
`[in, out]` as canonical; LayerNorm `scale`/`bias`; embeddings `embedding`. A tied decoder is not
stored (the head applies the word-embedding table); an untied one is a `[H, V]` kernel, the
transpose of the canonical decoder.
"""

from __future__ import annotations

from functools import cached_property, partial

from ...records import record
from .tf_tables import TASK_LAYERS, bert_layer_rows, distilbert_rows, task_skips
from .layer_groups import LayerGroups
from ..table import TRANSPOSE, Row, Table, dense_rows, norm_rows

#: Flax names a LayerNorm's parameters `scale` and `bias`.
_norm = partial(norm_rows, gamma="scale", beta="bias")


@record
class FlaxLayout:
    """One family's Flax model: its base model's key, its rows in creation order, the top-level
    keys of its heads, its stored-layer grouping (ALBERT), and the transformers classes 4.57 has
    for it in Flax (the `architectures` names)."""

    model_type: str
    base: str
    rows: tuple[Row, ...]
    head_keys: tuple[str, ...]
    classes: tuple[str, ...]
    layer_groups: LayerGroups | None = None
    #: The config key under which the model computes its positions instead of storing a table.
    computed_positions_key: str | None = None

    @cached_property
    def table(self) -> Table:
        return Table("hf-flax", self.rows, skips=task_skips(self.model_type))

    def with_base(self, name: str) -> str:
        """A file path in the table's spelling: base-model files lack the `base/` level."""
        return name if name.split("/", 1)[0] in (self.base, *self.head_keys, *TASK_KEYS) else f"{self.base}/{name}"


#: The top-level keys of transformers' task heads (skipped by every family's table).
TASK_KEYS = TASK_LAYERS


def _embeddings(base: str) -> tuple[Row, ...]:
    """The embedding parameters in the order Flax{Bert,Roberta,Albert,Electra}Embeddings creates them."""
    return (
        Row("embeddings.word", f"{base}/embeddings/word_embeddings/embedding"),
        Row("embeddings.position", f"{base}/embeddings/position_embeddings/embedding"),
        Row("embeddings.token_type", f"{base}/embeddings/token_type_embeddings/embedding"),
        *_norm("embeddings.norm", f"{base}/embeddings/LayerNorm"),
    )


def _bert_layer(base: str) -> tuple[Row, ...]:
    return bert_layer_rows(f"{base}/encoder/layer/{{i}}", dense_rows, _norm)


#: ALBERT's stored layer, spelled flat (`LayerGroups` translates the file's group and inner index).
_ALBERT_LAYER = "albert/encoder/albert_layers/{i}"

LAYOUTS: dict[str, FlaxLayout] = {layout.model_type: layout for layout in (
    FlaxLayout(
        "bert", "bert",
        rows=(
            *_embeddings("bert"), *_bert_layer("bert"), *dense_rows("pooler", "bert/pooler/dense"),
            Row("mlm.output_bias", "cls/predictions/bias"),
            *dense_rows("mlm.transform", "cls/predictions/transform/dense"),
            *_norm("mlm.norm", "cls/predictions/transform/LayerNorm"),
            Row("mlm.decoder", "cls/predictions/decoder/kernel", TRANSPOSE),  # untied only; [H, V]
            *dense_rows("nsp", "cls/seq_relationship"),  # kernel [H, 2], as canonical
        ),
        head_keys=("cls",),
        classes=("BertForPreTraining", "BertForMaskedLM", "BertLMHeadModel", "BertForNextSentencePrediction",
                 "BertModel"),
    ),
    # XLM-RoBERTa's Flax model is RoBERTa's under its own names (transformers 4.57 has no Flax CamemBERT).
    *(FlaxLayout(
        model_type, "roberta",
        rows=(
            *_embeddings("roberta"), *_bert_layer("roberta"), *dense_rows("pooler", "roberta/pooler/dense"),
            Row("mlm.output_bias", "lm_head/bias"),
            *dense_rows("mlm.transform", "lm_head/dense"),
            *_norm("mlm.norm", "lm_head/layer_norm"),
            Row("mlm.decoder", "lm_head/decoder/kernel", TRANSPOSE),  # untied only; [H, V]
        ),
        head_keys=("lm_head",),
        classes=(f"{prefix}ForMaskedLM", f"{prefix}ForCausalLM", f"{prefix}Model"),
    ) for model_type, prefix in (("roberta", "Roberta"), ("xlm-roberta", "XLMRoberta"))),
    # FlaxAlbertSelfAttention creates its value projection before its key projection.
    FlaxLayout(
        "albert", "albert",
        rows=(
            *_embeddings("albert"),
            *dense_rows("embeddings.projection", "albert/encoder/embedding_hidden_mapping_in"),
            *dense_rows("layers.{i}.attention.query", f"{_ALBERT_LAYER}/attention/query"),
            *dense_rows("layers.{i}.attention.value", f"{_ALBERT_LAYER}/attention/value"),
            *dense_rows("layers.{i}.attention.key", f"{_ALBERT_LAYER}/attention/key"),
            *dense_rows("layers.{i}.attention.output", f"{_ALBERT_LAYER}/attention/dense"),
            *_norm("layers.{i}.attention_norm", f"{_ALBERT_LAYER}/attention/LayerNorm"),
            *dense_rows("layers.{i}.ffn.intermediate", f"{_ALBERT_LAYER}/ffn"),
            *dense_rows("layers.{i}.ffn.output", f"{_ALBERT_LAYER}/ffn_output"),
            *_norm("layers.{i}.ffn_norm", f"{_ALBERT_LAYER}/full_layer_layer_norm"),
            *dense_rows("pooler", "albert/pooler"),
            Row("mlm.output_bias", "predictions/bias"),
            *dense_rows("mlm.transform", "predictions/dense"),
            *_norm("mlm.norm", "predictions/LayerNorm"),
            Row("mlm.decoder", "predictions/decoder/kernel", TRANSPOSE),  # untied only; [E, V]
            *dense_rows("sop", "sop_classifier/classifier"),  # kernel [H, 2]
        ),
        head_keys=("predictions", "sop_classifier"),
        classes=("AlbertForPreTraining", "AlbertForMaskedLM", "AlbertModel"),
        layer_groups=LayerGroups("albert_layer_groups/{g}/albert_layers/{j}/", "albert_layers/{i}/"),
    ),
    # An untied generator head is an `nn.Dense` (kernel, then its bias, the output bias); a tied
    # one (FlaxElectraTiedDense) has the bias alone.
    FlaxLayout(
        "electra", "electra",
        rows=(
            *_embeddings("electra"), *dense_rows("embeddings.projection", "electra/embeddings_project"),
            *_bert_layer("electra"),
            *dense_rows("mlm.transform", "generator_predictions/dense"),
            *_norm("mlm.norm", "generator_predictions/LayerNorm"),
            Row("mlm.decoder", "generator_lm_head/kernel", TRANSPOSE),  # untied only; [E, V]
            Row("mlm.output_bias", "generator_lm_head/bias"),
            *dense_rows("rtd.dense", "discriminator_predictions/dense"),
            *dense_rows("rtd.output", "discriminator_predictions/dense_prediction"),  # kernel [H, 1]
        ),
        head_keys=("generator_predictions", "generator_lm_head", "discriminator_predictions"),
        classes=("ElectraForPreTraining", "ElectraForMaskedLM", "ElectraForCausalLM", "ElectraModel"),
    ),
    # A tied `vocab_projector` (FlaxDistilBertLMDecoder) has the bias alone; an untied one is an
    # `nn.Dense`, its kernel then its bias.
    FlaxLayout(
        "distilbert", "distilbert",
        rows=(
            *distilbert_rows("distilbert", "distilbert/transformer/layer/{i}", dense_rows, _norm,
                             embedding="embedding", word="embedding"),
            *dense_rows("mlm.transform", "vocab_transform"),
            *_norm("mlm.norm", "vocab_layer_norm"),
            Row("mlm.decoder", "vocab_projector/kernel", TRANSPOSE),  # untied only; [H, V]
            Row("mlm.output_bias", "vocab_projector/bias"),
        ),
        head_keys=("vocab_transform", "vocab_layer_norm", "vocab_projector"),
        classes=("DistilBertForMaskedLM", "DistilBertModel"),
        computed_positions_key="sinusoidal_pos_embds",
    ),
)}

#: Families transformers 4.57 has no Flax model of, and why `--to hf-flax` refuses them.
NO_FLAX_MODEL = {"camembert": "transformers 4.57 has no Flax CamemBERT (no FlaxCamembert* class loads it); "
                              "write --to hf-tf or hf"}

#: Every top-level key a family's Flax file may start with (for sniffing): bases, heads, and the
#: base model's own modules.
TOP_KEYS = frozenset({key for layout in LAYOUTS.values() for key in (layout.base, *layout.head_keys)}
                     | {"embeddings", "embeddings_project", "encoder", "transformer", "pooler", *TASK_KEYS})
