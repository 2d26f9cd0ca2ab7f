"""Hugging Face state dicts' names, one table per family, as transformers' PyTorch modules name
their parameters (`FAMILIES`; XLM-RoBERTa and CamemBERT are RoBERTa's names).

Layout: `nn.Linear` weights are `[out, in]`, the transpose of canonical kernels; embeddings are
row tables as in the canonical tree. Encoder-only files (`BertModel`, `AlbertModel`, ...) drop
the base model's prefix (`bert.`, `albert.`, ...).
"""

from __future__ import annotations


from ... import families
from ...records import record, replace
from ..table import Row, Skip, Table, torch_linear_rows

#: What `nn.DataParallel` / DistributedDataParallel put before every name of the model they wrap.
DATA_PARALLEL_PREFIX = "module."


def _norm_rows(canonical: str, name: str) -> tuple[Row, ...]:
    return (
        Row(f"{canonical}.gamma", f"{name}.weight", legacy=(f"{name}.gamma",)),
        Row(f"{canonical}.beta", f"{name}.bias", legacy=(f"{name}.beta",)),
    )


_LAYER = "bert.encoder.layer.{i}"
#: Why a stored rotary buffer is set aside: the runtimes compute the same values from the config.
ROTARY_BUFFER = ("rotary inverse frequencies (a buffer), 1 / rope_theta^(2j / D): computed from the config, "
                 "and checked equal to these")

#: Why RoFormer's stored sinusoids are set aside: the runtimes compute the same values from the config.
SINUSOID_TABLE = ("rotary sinusoids (a frozen table), sin and cos of p / 10000^(2j / D) for p < "
                  "max_position_embeddings: computed from the config, and checked equal to these")


def _bert_layer_rows(layer: str) -> tuple[Row, ...]:
    """One BERT encoder layer as transformers' `BertLayer` (and ELECTRA's, RoBERTa's) names it."""
    return (
        *torch_linear_rows("layers.{i}.attention.query", f"{layer}.attention.self.query"),
        *torch_linear_rows("layers.{i}.attention.key", f"{layer}.attention.self.key"),
        *torch_linear_rows("layers.{i}.attention.value", f"{layer}.attention.self.value"),
        *torch_linear_rows("layers.{i}.attention.output", f"{layer}.attention.output.dense"),
        Row("layers.{i}.attention.distance_embedding", f"{layer}.attention.self.distance_embedding.weight"),
        *_norm_rows("layers.{i}.attention_norm", f"{layer}.attention.output.LayerNorm"),
        *torch_linear_rows("layers.{i}.ffn.intermediate", f"{layer}.intermediate.dense"),
        *torch_linear_rows("layers.{i}.ffn.output", f"{layer}.output.dense"),
        *_norm_rows("layers.{i}.ffn_norm", f"{layer}.output.LayerNorm"),
    )


def _embedding_rows(base: str) -> tuple[Row, ...]:
    return (
        Row("embeddings.word", f"{base}.embeddings.word_embeddings.weight"),
        Row("embeddings.token_type", f"{base}.embeddings.token_type_embeddings.weight"),
        Row("embeddings.position", f"{base}.embeddings.position_embeddings.weight"),
        *_norm_rows("embeddings.norm", f"{base}.embeddings.LayerNorm"),
    )


def _mlm_head_rows(transform: str, norm: str, output_bias: str, decoder: str | None = None) -> tuple[Row, ...]:
    """An MLM head: its transform's dense layer and LayerNorm, the output bias, and the decoder
    `decoder`.weight / .bias where the head has one of its own (stored when untied)."""
    rows = (*torch_linear_rows("mlm.transform", transform), *_norm_rows("mlm.norm", norm), Row("mlm.output_bias", output_bias))
    if decoder is None:
        return rows
    return (*rows, Row("mlm.decoder", f"{decoder}.weight"), Row("mlm.decoder_bias", f"{decoder}.bias"))


#: BERT's `cls.predictions` (DeBERTa-v2's default head has its names too).
_BERT_MLM_HEAD = _mlm_head_rows("cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm",
                                "cls.predictions.bias", "cls.predictions.decoder")

_SKIPS = (
    Skip("*embeddings.position_ids", "buffer (position ids), not a parameter"),
    Skip("*embeddings.token_type_ids", "buffer (token type ids), not a parameter"),
    Skip("classifier.*", "a fine-tuning head that BERT pre-training does not define"),
    Skip("qa_outputs.*", "a fine-tuning head that BERT pre-training does not define"),
)

TABLE = Table("hf", (
    *_embedding_rows("bert"),
    *_bert_layer_rows(_LAYER),
    *torch_linear_rows("pooler", "bert.pooler.dense"),
    *_BERT_MLM_HEAD,
    *torch_linear_rows("nsp", "cls.seq_relationship"),
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
    *torch_linear_rows("embeddings.projection", "albert.encoder.embedding_hidden_mapping_in"),
    *torch_linear_rows("layers.{i}.attention.query", f"{_ALBERT_LAYER}.attention.query"),
    *torch_linear_rows("layers.{i}.attention.key", f"{_ALBERT_LAYER}.attention.key"),
    *torch_linear_rows("layers.{i}.attention.value", f"{_ALBERT_LAYER}.attention.value"),
    *torch_linear_rows("layers.{i}.attention.output", f"{_ALBERT_LAYER}.attention.dense"),
    Row("layers.{i}.attention.distance_embedding", f"{_ALBERT_LAYER}.attention.distance_embedding.weight"),
    *_norm_rows("layers.{i}.attention_norm", f"{_ALBERT_LAYER}.attention.LayerNorm"),
    *torch_linear_rows("layers.{i}.ffn.intermediate", f"{_ALBERT_LAYER}.ffn"),
    *torch_linear_rows("layers.{i}.ffn.output", f"{_ALBERT_LAYER}.ffn_output"),
    *_norm_rows("layers.{i}.ffn_norm", f"{_ALBERT_LAYER}.full_layer_layer_norm"),
    *torch_linear_rows("pooler", "albert.pooler"),
    *torch_linear_rows("mlm.transform", "predictions.dense"),
    *_norm_rows("mlm.norm", "predictions.LayerNorm"),
    Row("mlm.output_bias", "predictions.bias"),
    Row("mlm.decoder", "predictions.decoder.weight"),
    Row("mlm.decoder_bias", "predictions.decoder.bias"),
    *torch_linear_rows("sop", "sop_classifier.classifier"),
), skips=_SKIPS)

#: transformers `ElectraForMaskedLM` (the generator: `generator_predictions` and the tied
#: `generator_lm_head`, whose bias is the output bias), `ElectraForPreTraining` (the
#: discriminator: `discriminator_predictions`) and `ElectraModel`. No pooler.
ELECTRA_TABLE = Table("hf", (
    *_embedding_rows("electra"),
    *torch_linear_rows("embeddings.projection", "electra.embeddings_project"),
    *_bert_layer_rows("electra.encoder.layer.{i}"),
    *torch_linear_rows("mlm.transform", "generator_predictions.dense"),
    *_norm_rows("mlm.norm", "generator_predictions.LayerNorm"),
    Row("mlm.output_bias", "generator_lm_head.bias"),
    Row("mlm.decoder", "generator_lm_head.weight"),
    *torch_linear_rows("rtd.dense", "discriminator_predictions.dense"),
    *torch_linear_rows("rtd.output", "discriminator_predictions.dense_prediction"),
), skips=_SKIPS)

#: transformers `RobertaForMaskedLM` and `RobertaModel`: BERT's encoder under `roberta.`, the
#: MLM head `lm_head` (decoder tied to the word embeddings, its bias `lm_head.bias`).
ROBERTA_TABLE = Table("hf", (
    *_embedding_rows("roberta"),
    *_bert_layer_rows("roberta.encoder.layer.{i}"),
    *torch_linear_rows("pooler", "roberta.pooler.dense"),
    *torch_linear_rows("mlm.transform", "lm_head.dense"),
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
    *torch_linear_rows("layers.{i}.attention.query", f"{_DISTILBERT_LAYER}.attention.q_lin"),
    *torch_linear_rows("layers.{i}.attention.key", f"{_DISTILBERT_LAYER}.attention.k_lin"),
    *torch_linear_rows("layers.{i}.attention.value", f"{_DISTILBERT_LAYER}.attention.v_lin"),
    *torch_linear_rows("layers.{i}.attention.output", f"{_DISTILBERT_LAYER}.attention.out_lin"),
    *_norm_rows("layers.{i}.attention_norm", f"{_DISTILBERT_LAYER}.sa_layer_norm"),
    *torch_linear_rows("layers.{i}.ffn.intermediate", f"{_DISTILBERT_LAYER}.ffn.lin1"),
    *torch_linear_rows("layers.{i}.ffn.output", f"{_DISTILBERT_LAYER}.ffn.lin2"),
    *_norm_rows("layers.{i}.ffn_norm", f"{_DISTILBERT_LAYER}.output_layer_norm"),
    *torch_linear_rows("mlm.transform", "vocab_transform"),
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
        *torch_linear_rows("layers.{i}.attention.query", f"{layer}.attention.self.query"),
        *torch_linear_rows("layers.{i}.attention.key", f"{layer}.attention.self.key"),
        *torch_linear_rows("layers.{i}.attention.value", f"{layer}.attention.self.value"),
        *torch_linear_rows("layers.{i}.attention.output", f"{layer}.attention.output.dense"),
        *norm_rows("layers.{i}.attention_norm", f"{layer}.{attention_norm}"),
        *torch_linear_rows("layers.{i}.ffn.intermediate", f"{layer}.intermediate.dense"),
        *torch_linear_rows("layers.{i}.ffn.output", f"{layer}.output.dense"),
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
    *torch_linear_rows("pooler", "esm.pooler.dense"),
    *torch_linear_rows("contact", "esm.contact_head.regression"),
    *torch_linear_rows("mlm.transform", "lm_head.dense"),
    *_norm_rows("mlm.norm", "lm_head.layer_norm"),
    Row("mlm.output_bias", "lm_head.bias"),
    Row("mlm.decoder", "lm_head.decoder.weight"),
), skips=(*_SKIPS, Skip("*rotary_embeddings.inv_freq", ROTARY_BUFFER)))


_MODERNBERT_LAYER = "model.layers.{i}"

#: transformers `ModernBertForMaskedLM` / `ModernBertModel`: the encoder under `model.`, its word
#: table `tok_embeddings` and LayerNorm `norm`; per layer the fused `attn.Wqkv` [3H, H], `attn.Wo`,
#: `attn_norm` (none in layer 0), `mlp_norm` and the GeGLU `mlp.Wi` [2I, H] and `mlp.Wo`; then
#: `final_norm`. The MLM head is `head.dense`, `head.norm` and `decoder` (tied to the word table,
#: its bias the output bias). Biases and LayerNorm biases only where the config says so.
MODERNBERT_TABLE = Table("hf", (
    Row("embeddings.word", "model.embeddings.tok_embeddings.weight"),
    *_norm_rows("embeddings.norm", "model.embeddings.norm"),
    *_norm_rows("layers.{i}.attention_norm", f"{_MODERNBERT_LAYER}.attn_norm"),
    *torch_linear_rows("layers.{i}.attention.qkv", f"{_MODERNBERT_LAYER}.attn.Wqkv"),
    *torch_linear_rows("layers.{i}.attention.output", f"{_MODERNBERT_LAYER}.attn.Wo"),
    *_norm_rows("layers.{i}.ffn_norm", f"{_MODERNBERT_LAYER}.mlp_norm"),
    *torch_linear_rows("layers.{i}.ffn.gated_intermediate", f"{_MODERNBERT_LAYER}.mlp.Wi"),
    *torch_linear_rows("layers.{i}.ffn.output", f"{_MODERNBERT_LAYER}.mlp.Wo"),
    *_norm_rows("final_norm", "model.final_norm"),
    *torch_linear_rows("mlm.transform", "head.dense"),
    *_norm_rows("mlm.norm", "head.norm"),
    Row("mlm.output_bias", "decoder.bias"),
    Row("mlm.decoder", "decoder.weight"),
), skips=(*_SKIPS, Skip("*rotary_emb.*inv_freq", "rotary inverse frequencies (a buffer transformers never saves), "
                                                  "computed from the config")))

#: transformers `RoFormerForMaskedLM` / `RoFormerModel`: BERT's layers under `roformer.`, no position
#: table (rotary positions; the sinusoids it saves are `Family.sinusoid_table`), ELECTRA's
#: `embeddings_project` when E differs from H, BERT's MLM head (H -> E), no pooler.
ROFORMER_TABLE = Table("hf", (
    Row("embeddings.word", "roformer.embeddings.word_embeddings.weight"),
    Row("embeddings.token_type", "roformer.embeddings.token_type_embeddings.weight"),
    *_norm_rows("embeddings.norm", "roformer.embeddings.LayerNorm"),
    *torch_linear_rows("embeddings.projection", "roformer.embeddings_project"),
    *(row for row in _bert_layer_rows("roformer.encoder.layer.{i}") if "distance_embedding" not in row.canonical),
    *(row for row in TABLE.rows if row.canonical.startswith("mlm.")),
), skips=(*_SKIPS, Skip("*encoder.embed_positions.weight", SINUSOID_TABLE)))

#: transformers 4's `NezhaForPreTraining` / `ForMaskedLM` / `Model`: BERT's names under `nezha.`, no
#: position table (functional relative positions; transformers 4.57 does not save their buffer,
#: which older versions did).
def _under_nezha(row: Row) -> Row:
    return replace(row, name=row.name.replace("bert.", "nezha.", 1),
                   legacy=tuple(name.replace("bert.", "nezha.", 1) for name in row.legacy))


NEZHA_TABLE = Table("hf", tuple(
    _under_nezha(row) for row in TABLE.rows
    if not row.canonical.startswith("embeddings.position") and "distance_embedding" not in row.canonical
), skips=(*TABLE.skips, Skip("*relative_positions_encoding.positions_encoding",
                             "functional relative positions (a buffer), sinusoids of the distances: computed from "
                             "the config")))

_DEBERTA_LAYER = "deberta.encoder.layer.{i}"
#: Why DeBERTa-v3's replaced-token-detection head is set aside.
DEBERTA_RTD_HEAD = ("DeBERTa-v3's replaced-token-detection head (microsoft/DeBERTa's MaskPredictionHead: dense, "
                    "LayerNorm, one logit per token), which transformers' DeBERTa-v2 classes set aside on loading "
                    "and no masked LM reads: the checkpoint is an RTD discriminator")

#: transformers `DebertaV2Model`'s names under `deberta.`: BERT's layer with `query_proj`, `key_proj`,
#: `value_proj`, the relative embeddings' own projections where keys are not shared, and the
#: encoder's `rel_embeddings` and their `LayerNorm`.
_DEBERTA_ENCODER = (
    Row("embeddings.word", "deberta.embeddings.word_embeddings.weight"),
    Row("embeddings.token_type", "deberta.embeddings.token_type_embeddings.weight"),
    Row("embeddings.position", "deberta.embeddings.position_embeddings.weight"),
    *_norm_rows("embeddings.norm", "deberta.embeddings.LayerNorm"),
    *torch_linear_rows("layers.{i}.attention.query", f"{_DEBERTA_LAYER}.attention.self.query_proj"),
    *torch_linear_rows("layers.{i}.attention.key", f"{_DEBERTA_LAYER}.attention.self.key_proj"),
    *torch_linear_rows("layers.{i}.attention.value", f"{_DEBERTA_LAYER}.attention.self.value_proj"),
    *torch_linear_rows("layers.{i}.attention.position_key", f"{_DEBERTA_LAYER}.attention.self.pos_key_proj"),
    *torch_linear_rows("layers.{i}.attention.position_query", f"{_DEBERTA_LAYER}.attention.self.pos_query_proj"),
    *torch_linear_rows("layers.{i}.attention.output", f"{_DEBERTA_LAYER}.attention.output.dense"),
    *_norm_rows("layers.{i}.attention_norm", f"{_DEBERTA_LAYER}.attention.output.LayerNorm"),
    *torch_linear_rows("layers.{i}.ffn.intermediate", f"{_DEBERTA_LAYER}.intermediate.dense"),
    *torch_linear_rows("layers.{i}.ffn.output", f"{_DEBERTA_LAYER}.output.dense"),
    *_norm_rows("layers.{i}.ffn_norm", f"{_DEBERTA_LAYER}.output.LayerNorm"),
    Row("relative_embeddings", "deberta.encoder.rel_embeddings.weight"),
    *_norm_rows("relative_norm", "deberta.encoder.LayerNorm"),
)
_DEBERTA_SKIPS = (*_SKIPS, Skip("mask_predictions.*", DEBERTA_RTD_HEAD))

#: `DebertaV2ForMaskedLM` as transformers 5 builds it by default (`legacy` true): BERT's
#: `cls.predictions` head, its decoder tied to the word embeddings.
DEBERTA_V2_TABLE = Table("hf", (
    *_DEBERTA_ENCODER,
    *_BERT_MLM_HEAD,
), skips=_DEBERTA_SKIPS)

#: `DebertaV2ForMaskedLM` with `legacy` false, and what microsoft's DeBERTa code saves:
#: `lm_predictions.lm_head`, whose logits are always against the word embeddings (no decoder of its own).
DEBERTA_V2_LM_PREDICTIONS_TABLE = Table("hf", (
    *_DEBERTA_ENCODER,
    *_mlm_head_rows("lm_predictions.lm_head.dense", "lm_predictions.lm_head.LayerNorm", "lm_predictions.lm_head.bias"),
), skips=_DEBERTA_SKIPS)


@record
class HeadLayout:
    """One of the head layouts transformers builds for a family, as the config says which.

    Attributes:
      prefix: the top-level module of the layout's head (`lm_predictions.`).
      table: the family's names with that head.
      config_key, config_value: the config.json setting under which transformers builds it
        (`legacy` false); a file in this layout under another value loads with a new head.
    """

    prefix: str
    table: Table
    config_key: str
    config_value: object


@record
class Family:
    """One model family's Hugging Face spelling.

    Attributes:
      model_type: config.json's `model_type`, and `BertConfig.model_type`.
      table: its names (what the writer writes: the head layout of transformers' default class).
      base: the base model's prefix, which encoder-only files (`BertModel`, ...) drop.
      head_prefixes: the top-level modules of its heads, which keep their names in every file.
      sinusoid_table: the name its files hold the sinusoids of its rotary positions under
        (RoFormer's frozen `embed_positions`, [P, D]), computed when written; None for the others.
      layouts: the head layouts of its files, the default (`table`'s) first, when it has several
        (DeBERTa-v2's `cls.predictions` and `lm_predictions`).
      rotary_buffer: the name `save_pretrained` writes a rotary model's inverse frequencies under
        (transformers 5 ESM's one `inv_freq`, spelled as its conversion mapping reverses it).
    """

    model_type: str
    table: Table
    base: str
    head_prefixes: tuple[str, ...]
    sinusoid_table: str | None = None
    layouts: tuple[HeadLayout, ...] = ()
    rotary_buffer: str | None = None

    def layout_of(self, names: list[str]) -> HeadLayout | None:
        """The head layout whose prefix a file's names hold (the default when none does), or None
        for a family of one layout."""
        held = [layout for layout in self.layouts[1:]
                if any(self.with_prefix(name).startswith(layout.prefix) for name in names)]
        return next(iter(held), self.layouts[0] if self.layouts else None)

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
    Family("esm", ESM_TABLE, "esm", ("lm_head.",),
           rotary_buffer="esm.encoder.layer.*.attention.self.rotary_embeddings.inv_freq"),
    Family("modernbert", MODERNBERT_TABLE, "model", ("head.", "decoder.")),
    Family("nezha", NEZHA_TABLE, "nezha", ("cls.",)),
    Family("roformer", ROFORMER_TABLE, "roformer", ("cls.",), "roformer.encoder.embed_positions.weight"),
    Family("deberta-v2", DEBERTA_V2_TABLE, "deberta", ("cls.", "lm_predictions.", "mask_predictions."),
           layouts=(HeadLayout("cls.predictions.", DEBERTA_V2_TABLE, "legacy", True),
                    HeadLayout("lm_predictions.lm_head.", DEBERTA_V2_LM_PREDICTIONS_TABLE, "legacy", False))),
)}

#: The families this module writes (`convert` refuses a tree of any other).
WRITES_FAMILIES = tuple(FAMILIES)


def family_of_names(names: list[str], stated: str | None = None) -> Family | None:
    """The family whose own module names (its declaration's `hf_marks`) the file's names hold, or
    None for an encoder-only file whose names several families share (its config.json says which).
    A family whose files hold another's marks too (Megatron-BERT's `bert.`, `cls.`) is told by its
    own; families spelled alike (RoBERTa, XLM-RoBERTa, CamemBERT) by the `stated` model type
    (config.json's), else the first of them is taken."""
    # One text to search, a name a line: a mark is a dotted part of one name, never across two.
    spelled = "\n".join("." + name.removeprefix(DATA_PARALLEL_PREFIX) for name in names)
    marked = [family for family in FAMILIES.values() if any(mark in spelled for mark in family.declared.hf_marks)]
    # The stated family's shared marks count too: an encoder-only file lacks its own (RoFormerModel's
    # `embeddings_project` is ELECTRA's mark, and no name says `roformer.`).
    stated_family = [FAMILIES[stated]] if stated in FAMILIES else []
    shared = {other for family in (*marked, *stated_family) for other in family.declared.shares_hf_marks_with}
    own = [family for family in marked if family.model_type not in shared]
    return next((family for family in own if family.model_type == stated), next(iter(own), None))
