"""Hugging Face state dicts' names, one table per family, as transformers' PyTorch modules name
their parameters (`FAMILIES`; XLM-RoBERTa and CamemBERT are RoBERTa's names).

Layout: `nn.Linear` weights are `[out, in]`, the transpose of canonical kernels; embeddings are
row tables as in the canonical tree. Encoder-only files (`BertModel`, `AlbertModel`, ...) drop
the base model's prefix (`bert.`, `albert.`, ...).
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import families
from ..table import TRANSPOSE, Row, Skip, Table

#: What `nn.DataParallel` / DistributedDataParallel put before every name of the model they wrap.
DATA_PARALLEL_PREFIX = "module."


def _norm_rows(canonical: str, name: str) -> tuple[Row, ...]:
    return (
        Row(f"{canonical}.gamma", f"{name}.weight", legacy=(f"{name}.gamma",)),
        Row(f"{canonical}.beta", f"{name}.bias", legacy=(f"{name}.beta",)),
    )


def _linear_rows(canonical: str, name: str) -> tuple[Row, ...]:
    return (
        Row(f"{canonical}.kernel", f"{name}.weight", TRANSPOSE),
        Row(f"{canonical}.bias", f"{name}.bias"),
    )


_LAYER = "bert.encoder.layer.{i}"
#: Why a stored rotary buffer is set aside: the runtimes compute the same values from the config.
ROTARY_BUFFER = ("rotary inverse frequencies (a buffer), 1 / rope_theta^(2j / D): computed from the config, "
                 "and checked equal to these")


def _bert_layer_rows(layer: str) -> tuple[Row, ...]:
    """One BERT encoder layer as transformers' `BertLayer` (and ELECTRA's, RoBERTa's) names it."""
    return (
        *_linear_rows("layers.{i}.attention.query", f"{layer}.attention.self.query"),
        *_linear_rows("layers.{i}.attention.key", f"{layer}.attention.self.key"),
        *_linear_rows("layers.{i}.attention.value", f"{layer}.attention.self.value"),
        *_linear_rows("layers.{i}.attention.output", f"{layer}.attention.output.dense"),
        Row("layers.{i}.attention.distance_embedding", f"{layer}.attention.self.distance_embedding.weight"),
        *_norm_rows("layers.{i}.attention_norm", f"{layer}.attention.output.LayerNorm"),
        *_linear_rows("layers.{i}.ffn.intermediate", f"{layer}.intermediate.dense"),
        *_linear_rows("layers.{i}.ffn.output", f"{layer}.output.dense"),
        *_norm_rows("layers.{i}.ffn_norm", f"{layer}.output.LayerNorm"),
    )


def _embedding_rows(base: str) -> tuple[Row, ...]:
    return (
        Row("embeddings.word", f"{base}.embeddings.word_embeddings.weight"),
        Row("embeddings.token_type", f"{base}.embeddings.token_type_embeddings.weight"),
        Row("embeddings.position", f"{base}.embeddings.position_embeddings.weight"),
        *_norm_rows("embeddings.norm", f"{base}.embeddings.LayerNorm"),
    )


_SKIPS = (
    Skip("*embeddings.position_ids", "buffer (position ids), not a parameter"),
    Skip("*embeddings.token_type_ids", "buffer (token type ids), not a parameter"),
    Skip("classifier.*", "a fine-tuning head that BERT pre-training does not define"),
    Skip("qa_outputs.*", "a fine-tuning head that BERT pre-training does not define"),
)

TABLE = Table("hf", (
    *_embedding_rows("bert"),
    *_bert_layer_rows(_LAYER),
    *_linear_rows("pooler", "bert.pooler.dense"),
    *_linear_rows("mlm.transform", "cls.predictions.transform.dense"),
    *_norm_rows("mlm.norm", "cls.predictions.transform.LayerNorm"),
    Row("mlm.output_bias", "cls.predictions.bias"),
    Row("mlm.decoder", "cls.predictions.decoder.weight"),
    Row("mlm.decoder_bias", "cls.predictions.decoder.bias"),
    *_linear_rows("nsp", "cls.seq_relationship"),
), skips=(*_SKIPS,
          # Heads a model's own code adds beside BERT's under `cls.` (AntiBERTy's species and
          # chain classifiers): no stock class reads them, and the MLM head's logits never do.
          Skip("cls.[!p]*", "a task head beside BERT's pre-training heads (under cls.), which the masked LM "
                            "does not read")))

#: ALBERT's stored layer i, spelled flat in the table: the file's
#: `albert.encoder.albert_layer_groups.{g}.albert_layers.{j}` with i = g * inner_group_num + j
#: (`_flatten_albert` and `_unflatten_albert` translate).
_ALBERT_LAYER = "albert.encoder.albert_layers.{i}"

#: transformers `AlbertForPreTraining` / `AlbertForMaskedLM` / `AlbertModel`. The decoder is tied
#: to the [V, E] word embeddings, and its bias is `predictions.bias`.
ALBERT_TABLE = Table("hf", (
    *_embedding_rows("albert"),
    *_linear_rows("embeddings.projection", "albert.encoder.embedding_hidden_mapping_in"),
    *_linear_rows("layers.{i}.attention.query", f"{_ALBERT_LAYER}.attention.query"),
    *_linear_rows("layers.{i}.attention.key", f"{_ALBERT_LAYER}.attention.key"),
    *_linear_rows("layers.{i}.attention.value", f"{_ALBERT_LAYER}.attention.value"),
    *_linear_rows("layers.{i}.attention.output", f"{_ALBERT_LAYER}.attention.dense"),
    Row("layers.{i}.attention.distance_embedding", f"{_ALBERT_LAYER}.attention.distance_embedding.weight"),
    *_norm_rows("layers.{i}.attention_norm", f"{_ALBERT_LAYER}.attention.LayerNorm"),
    *_linear_rows("layers.{i}.ffn.intermediate", f"{_ALBERT_LAYER}.ffn"),
    *_linear_rows("layers.{i}.ffn.output", f"{_ALBERT_LAYER}.ffn_output"),
    *_norm_rows("layers.{i}.ffn_norm", f"{_ALBERT_LAYER}.full_layer_layer_norm"),
    *_linear_rows("pooler", "albert.pooler"),
    *_linear_rows("mlm.transform", "predictions.dense"),
    *_norm_rows("mlm.norm", "predictions.LayerNorm"),
    Row("mlm.output_bias", "predictions.bias"),
    Row("mlm.decoder", "predictions.decoder.weight"),
    Row("mlm.decoder_bias", "predictions.decoder.bias"),
    *_linear_rows("sop", "sop_classifier.classifier"),
), skips=_SKIPS)

#: transformers `ElectraForMaskedLM` (the generator: `generator_predictions` and the tied
#: `generator_lm_head`, whose bias is the output bias), `ElectraForPreTraining` (the
#: discriminator: `discriminator_predictions`) and `ElectraModel`. No pooler.
ELECTRA_TABLE = Table("hf", (
    *_embedding_rows("electra"),
    *_linear_rows("embeddings.projection", "electra.embeddings_project"),
    *_bert_layer_rows("electra.encoder.layer.{i}"),
    *_linear_rows("mlm.transform", "generator_predictions.dense"),
    *_norm_rows("mlm.norm", "generator_predictions.LayerNorm"),
    Row("mlm.output_bias", "generator_lm_head.bias"),
    Row("mlm.decoder", "generator_lm_head.weight"),
    *_linear_rows("rtd.dense", "discriminator_predictions.dense"),
    *_linear_rows("rtd.output", "discriminator_predictions.dense_prediction"),
), skips=_SKIPS)

#: transformers `RobertaForMaskedLM` and `RobertaModel`: BERT's encoder under `roberta.`, the
#: MLM head `lm_head` (decoder tied to the word embeddings, its bias `lm_head.bias`).
ROBERTA_TABLE = Table("hf", (
    *_embedding_rows("roberta"),
    *_bert_layer_rows("roberta.encoder.layer.{i}"),
    *_linear_rows("pooler", "roberta.pooler.dense"),
    *_linear_rows("mlm.transform", "lm_head.dense"),
    *_norm_rows("mlm.norm", "lm_head.layer_norm"),
    Row("mlm.output_bias", "lm_head.bias"),
    Row("mlm.decoder", "lm_head.decoder.weight"),
    Row("mlm.decoder_bias", "lm_head.decoder.bias"),
), skips=_SKIPS)


_DISTILBERT_LAYER = "distilbert.transformer.layer.{i}"

#: transformers `DistilBertForMaskedLM` and `DistilBertModel`: no token types, no pooler; the MLM
#: head's `vocab_projector` is the decoder tied to the word embeddings, its bias the output bias.
DISTILBERT_TABLE = Table("hf", (
    Row("embeddings.word", "distilbert.embeddings.word_embeddings.weight"),
    Row("embeddings.position", "distilbert.embeddings.position_embeddings.weight"),
    *_norm_rows("embeddings.norm", "distilbert.embeddings.LayerNorm"),
    *_linear_rows("layers.{i}.attention.query", f"{_DISTILBERT_LAYER}.attention.q_lin"),
    *_linear_rows("layers.{i}.attention.key", f"{_DISTILBERT_LAYER}.attention.k_lin"),
    *_linear_rows("layers.{i}.attention.value", f"{_DISTILBERT_LAYER}.attention.v_lin"),
    *_linear_rows("layers.{i}.attention.output", f"{_DISTILBERT_LAYER}.attention.out_lin"),
    *_norm_rows("layers.{i}.attention_norm", f"{_DISTILBERT_LAYER}.sa_layer_norm"),
    *_linear_rows("layers.{i}.ffn.intermediate", f"{_DISTILBERT_LAYER}.ffn.lin1"),
    *_linear_rows("layers.{i}.ffn.output", f"{_DISTILBERT_LAYER}.ffn.lin2"),
    *_norm_rows("layers.{i}.ffn_norm", f"{_DISTILBERT_LAYER}.output_layer_norm"),
    *_linear_rows("mlm.transform", "vocab_transform"),
    *_norm_rows("mlm.norm", "vocab_layer_norm"),
    Row("mlm.output_bias", "vocab_projector.bias"),
    Row("mlm.decoder", "vocab_projector.weight"),
), skips=(*_SKIPS, Skip("pre_classifier.*", "a fine-tuning head that DistilBERT pre-training does not define")))


#: transformers `MegatronBertForPreTraining` / `ForMaskedLM` / `Model`: BERT's names and heads, its
#: pre-LayerNorm encoder's norms before attention (`attention.ln`) and the FFN (`ln`), the final
#: `encoder.ln`, no embedding LayerNorm.
def _pre_norm_layer_rows(layer: str, attention_norm: str, ffn_norm: str, norm_rows=_norm_rows) -> tuple[Row, ...]:
    """One pre-LayerNorm layer of BERT's module names (Megatron-BERT's, ESM's), its two norms named
    under `layer`: the one before attention and the one before the FFN (spelled by `norm_rows`)."""
    return (
        *_linear_rows("layers.{i}.attention.query", f"{layer}.attention.self.query"),
        *_linear_rows("layers.{i}.attention.key", f"{layer}.attention.self.key"),
        *_linear_rows("layers.{i}.attention.value", f"{layer}.attention.self.value"),
        *_linear_rows("layers.{i}.attention.output", f"{layer}.attention.output.dense"),
        *norm_rows("layers.{i}.attention_norm", f"{layer}.{attention_norm}"),
        *_linear_rows("layers.{i}.ffn.intermediate", f"{layer}.intermediate.dense"),
        *_linear_rows("layers.{i}.ffn.output", f"{layer}.output.dense"),
        *norm_rows("layers.{i}.ffn_norm", f"{layer}.{ffn_norm}"),
    )


def _gamma_beta_rows(canonical: str, name: str) -> tuple[Row, ...]:
    """A LayerNorm as transformers 5 saves ESM's `LayerNorm` modules: `gamma` and `beta` (ESM's
    conversion mapping keeps the legacy renaming to `weight` / `bias`, which saving reverses)."""
    return (
        Row(f"{canonical}.gamma", f"{name}.gamma", legacy=(f"{name}.weight",)),
        Row(f"{canonical}.beta", f"{name}.beta", legacy=(f"{name}.bias",)),
    )


MEGATRON_TABLE = Table("hf", tuple(
    row for row in TABLE.rows if not row.canonical.startswith(("embeddings.norm", "layers."))
) + (
    *_pre_norm_layer_rows("bert.encoder.layer.{i}", "attention.ln", "ln"),
    *_norm_rows("final_norm", "bert.encoder.ln"),
), skips=_SKIPS)


#: transformers `EsmForMaskedLM` / `EsmModel`: a pre-LayerNorm encoder under `esm.` (each layer's
#: `attention.LayerNorm` before attention, `LayerNorm` before the FFN, `emb_layer_norm_after` after
#: the last), no token types, rotary positions (ESM-1b's absolute table and embedding LayerNorm are
#: rows too, for a clear refusal by the config), the contact head, and `lm_head` (its decoder tied,
#: with no bias of its own).
ESM_TABLE = Table("hf", (
    Row("embeddings.word", "esm.embeddings.word_embeddings.weight"),
    Row("embeddings.position", "esm.embeddings.position_embeddings.weight"),
    *_norm_rows("embeddings.norm", "esm.embeddings.layer_norm"),
    *_pre_norm_layer_rows("esm.encoder.layer.{i}", "attention.LayerNorm", "LayerNorm", _gamma_beta_rows),
    *_norm_rows("final_norm", "esm.encoder.emb_layer_norm_after"),
    *_linear_rows("pooler", "esm.pooler.dense"),
    *_linear_rows("contact", "esm.contact_head.regression"),
    *_linear_rows("mlm.transform", "lm_head.dense"),
    *_norm_rows("mlm.norm", "lm_head.layer_norm"),
    Row("mlm.output_bias", "lm_head.bias"),
    Row("mlm.decoder", "lm_head.decoder.weight"),
), skips=(*_SKIPS, Skip("*rotary_embeddings.inv_freq", ROTARY_BUFFER)))


@dataclass(frozen=True)
class Family:
    """One model family's Hugging Face spelling.

    Attributes:
      model_type: config.json's `model_type`, and `BertConfig.model_type`.
      table: its names.
      base: the base model's prefix, which encoder-only files (`BertModel`, ...) drop.
      head_prefixes: the top-level modules of its heads, which keep their names in every file.
      rotary_buffer: the name `save_pretrained` writes a rotary model's inverse frequencies under
        (transformers 5 ESM's one `inv_freq`, spelled as its conversion mapping reverses it).
    """

    model_type: str
    table: Table
    base: str
    head_prefixes: tuple[str, ...]
    rotary_buffer: str | None = None

    @property
    def declared(self) -> families.Family:
        return families.named(self.model_type)

    def with_prefix(self, name: str) -> str:
        """The table's spelling of a file name: encoder-only files drop the base model's prefix
        (`embeddings.*`, not `bert.embeddings.*`); a model saved through `nn.DataParallel`
        prefixes every name with `module.`."""
        name = name.removeprefix(DATA_PARALLEL_PREFIX)
        return name if name.startswith((self.base + ".", *self.head_prefixes)) else f"{self.base}.{name}"


FAMILIES: dict[str, Family] = {family.model_type: family for family in (
    Family("bert", TABLE, "bert", ("cls.",)),
    Family("albert", ALBERT_TABLE, "albert", ("predictions.", "sop_classifier.")),
    Family("electra", ELECTRA_TABLE, "electra", ("generator_predictions.", "generator_lm_head.",
                                                 "discriminator_predictions.")),
    Family("roberta", ROBERTA_TABLE, "roberta", ("lm_head.",)),
    # XLM-RoBERTa and CamemBERT are RoBERTa's modules under their own model types.
    Family("xlm-roberta", ROBERTA_TABLE, "roberta", ("lm_head.",)),
    Family("camembert", ROBERTA_TABLE, "roberta", ("lm_head.",)),
    Family("distilbert", DISTILBERT_TABLE, "distilbert", ("vocab_transform.", "vocab_layer_norm.",
                                                          "vocab_projector.")),
    Family("megatron-bert", MEGATRON_TABLE, "bert", ("cls.",)),
    Family("esm", ESM_TABLE, "esm", ("lm_head.",), rotary_buffer="esm.encoder.layer.*.attention.self.rotary_embeddings.inv_freq"),
)}

#: The families this module writes (`convert` refuses a tree of any other).
WRITES_FAMILIES = tuple(FAMILIES)


def family_of_names(names: list[str], stated: str | None = None) -> Family | None:
    """The family whose own module names (its declaration's `hf_marks`) the file's names hold, or
    None for an encoder-only file whose names several families share (its config.json says which).
    A family whose files hold another's marks too (Megatron-BERT's `bert.`, `cls.`) is told by its
    own; families spelled alike (RoBERTa, XLM-RoBERTa, CamemBERT) by the `stated` model type
    (config.json's), else the first of them is taken."""
    marked = [family for family in FAMILIES.values()
              if any(mark in "." + name.removeprefix(DATA_PARALLEL_PREFIX)
                     for name in names for mark in family.declared.hf_marks)]
    shared = {other for family in marked for other in family.declared.shares_hf_marks_with}
    own = [family for family in marked if family.model_type not in shared]
    return next((family for family in own if family.model_type == stated), next(iter(own), None))
