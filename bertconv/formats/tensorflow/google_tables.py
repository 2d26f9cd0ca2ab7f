"""The names Google's TF1 checkpoints give each model of the BERT family (google-research/bert,
albert, electra; ZhuiyiTechnology's RoFormer and Huawei's NEZHA in the same layout), as tables,
and the models `google.py` reads and writes with them (see its docstring for the layouts).
"""

from __future__ import annotations

import re

from ...records import field, record
from ..table import TRANSPOSE, Row, Skip, Table, dense_rows, norm_rows

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import Any


CONFIG_FILE = "bert_config.json"
#: The sizes brightmart/albert_zh released, each with its `albert_config_{size}.json`.
ALBERT_ZH_SIZES = ("tiny", "base", "large", "xlarge", "xxlarge")
#: How google-research's code reads a config's "gelu": the tanh approximation.
GELU_TANH = "gelu_tanh"


def _layer_rows(prefix: str, *, attention: str = "attention", ffn_in: str = "intermediate/dense",
                ffn_out: str = "output/dense", attention_norm: str = "attention/output/LayerNorm",
                ffn_norm: str = "output/LayerNorm") -> tuple[Row, ...]:
    """The rows of one transformer layer at `prefix` (which holds `{i}`)."""
    return (
        *dense_rows("layers.{i}.attention.query", f"{prefix}/{attention}/self/query"),
        *dense_rows("layers.{i}.attention.key", f"{prefix}/{attention}/self/key"),
        *dense_rows("layers.{i}.attention.value", f"{prefix}/{attention}/self/value"),
        *dense_rows("layers.{i}.attention.output", f"{prefix}/{attention}/output/dense"),
        *norm_rows("layers.{i}.attention_norm", f"{prefix}/{attention_norm}"),
        *dense_rows("layers.{i}.ffn.intermediate", f"{prefix}/{ffn_in}"),
        *dense_rows("layers.{i}.ffn.output", f"{prefix}/{ffn_out}"),
        *norm_rows("layers.{i}.ffn_norm", f"{prefix}/{ffn_norm}"),
    )


def _embedding_rows(scope: str) -> tuple[Row, ...]:
    return (
        Row("embeddings.word", f"{scope}/word_embeddings"),
        Row("embeddings.token_type", f"{scope}/token_type_embeddings"),
        Row("embeddings.position", f"{scope}/position_embeddings"),
        *norm_rows("embeddings.norm", f"{scope}/LayerNorm"),
    )


def _mlm_rows(scope: str, *, transform: str, norm: str) -> tuple[Row, ...]:
    return (*dense_rows("mlm.transform", f"{scope}/{transform}"), *norm_rows("mlm.norm", f"{scope}/{norm}"),
            Row("mlm.output_bias", f"{scope}/output_bias"))


_SKIPS = (
    Skip("global_step", "training step counter, not a parameter"),
    Skip("*/adam_m", "Adam optimizer slot (first moment)"),
    Skip("*/adam_v", "Adam optimizer slot (second moment)"),
    Skip("*/Momentum", "optimizer slot (momentum)"),
    Skip("AdamWeightDecayOptimizer*", "optimizer state"),
    Skip("output_weights", "fine-tuned classifier head, not part of BERT pre-training"),
    Skip("output_bias", "fine-tuned classifier head, not part of BERT pre-training"),
    Skip("cls/squad/*", "fine-tuned SQuAD head, not part of BERT pre-training"),
    Skip("cls/classifier/*", "fine-tuned classifier head, not part of BERT pre-training"),
)

TABLE = Table("google-tf", (
    *_embedding_rows("bert/embeddings"),
    *_layer_rows("bert/encoder/layer_{i}"),
    *dense_rows("pooler", "bert/pooler/dense"),
    *_mlm_rows("cls/predictions", transform="transform/dense", norm="transform/LayerNorm"),
    Row("nsp.kernel", "cls/seq_relationship/output_weights", TRANSPOSE),
    Row("nsp.bias", "cls/seq_relationship/output_bias"),
), skips=_SKIPS)

#: ALBERT's layers are spelled by stored index in the table; `_albert_names` translates
#: `group_{g}/inner_group_{j}` to and from it.
_ALBERT_STORED = "bert/encoder/transformer/stored_layer_{i}"
_ALBERT_GROUP = re.compile(r"(?<=bert/encoder/transformer/)group_(0|[1-9]\d*)/inner_group_(0|[1-9]\d*)(?=/)")

ALBERT_TABLE = Table("google-tf albert", (
    *_embedding_rows("bert/embeddings"),
    *dense_rows("embeddings.projection", "bert/encoder/embedding_hidden_mapping_in"),
    *_layer_rows(_ALBERT_STORED, attention="attention_1", ffn_in="ffn_1/intermediate/dense",
                 ffn_out="ffn_1/intermediate/output/dense", attention_norm="LayerNorm", ffn_norm="LayerNorm_1"),
    *dense_rows("pooler", "bert/pooler/dense"),
    *_mlm_rows("cls/predictions", transform="transform/dense", norm="transform/LayerNorm"),
    # ALBERT pre-trains this head on sentence order (SOP), with NSP's shape and name.
    Row("sop.kernel", "cls/seq_relationship/output_weights", TRANSPOSE),
    Row("sop.bias", "cls/seq_relationship/output_bias"),
), skips=_SKIPS)

#: brightmart/albert_zh's modeling.py: BERT's names, its one shared layer at `layer_shared`
#: (stored layer 0, applied L times), the bias-free word-only projection `word_embeddings_2`
#: [E, H] (the position and token-type tables and the embedding LayerNorm are H wide, the MLM
#: transform H -> H), and sentence-order prediction in `cls/seq_relationship`.
ALBERT_ZH_TABLE = Table("google-tf albert_zh (brightmart)", (
    Row("embeddings.word", "bert/embeddings/word_embeddings"),
    Row("embeddings.word_projection.kernel", "bert/embeddings/word_embeddings_2"),
    *_embedding_rows("bert/embeddings")[1:],
    *(Row(row.canonical.replace("{i}", "0"), row.name, row.layout)
      for row in _layer_rows("bert/encoder/layer_shared")),
    *dense_rows("pooler", "bert/pooler/dense"),
    *_mlm_rows("cls/predictions", transform="transform/dense", norm="transform/LayerNorm"),
    Row("sop.kernel", "cls/seq_relationship/output_weights", TRANSPOSE),
    Row("sop.bias", "cls/seq_relationship/output_bias"),
), skips=_SKIPS)

_GENERATOR_SKIPS = (
    Skip("electra/*", "the discriminator (--model discriminator)"),
    Skip("discriminator_predictions/*", "the discriminator's replaced-token head (--model discriminator)"),
)
_DISCRIMINATOR_SKIPS = (
    Skip("generator/*", "the generator (--model generator)"),
    Skip("generator_predictions/*", "the generator's masked-LM head (--model generator)"),
)


def _generator_table(embeddings: str) -> Table:
    return Table("google-tf electra generator", (
        *_embedding_rows(embeddings),
        *dense_rows("embeddings.projection", "generator/embeddings_project"),
        *_layer_rows("generator/encoder/layer_{i}"),
        *_mlm_rows("generator_predictions", transform="dense", norm="LayerNorm"),
    ), skips=_SKIPS + _GENERATOR_SKIPS)


#: The generator with the discriminator's embeddings (ELECTRA's default, shared embeddings)...
ELECTRA_GENERATOR_TABLE = _generator_table("electra/embeddings")
#: ... or with its own (`untied_generator_embeddings`).
ELECTRA_UNTIED_GENERATOR_TABLE = _generator_table("generator/embeddings")

ELECTRA_DISCRIMINATOR_TABLE = Table("google-tf electra discriminator", (
    *_embedding_rows("electra/embeddings"),
    *dense_rows("embeddings.projection", "electra/embeddings_project"),
    *_layer_rows("electra/encoder/layer_{i}"),
    *dense_rows("rtd.dense", "discriminator_predictions/dense"),
    *dense_rows("rtd.output", "discriminator_predictions/dense_1"),
), skips=_SKIPS + _DISCRIMINATOR_SKIPS)


#: ZhuiyiTechnology's RoFormer and Huawei's NEZHA: BERT's names without the position table (their
#: positions are computed), as bert4keras' `variable_mapping` names them. RoFormer's embeddings,
#: E wide, are projected to H after their LayerNorm by `bert/encoder/embedding_hidden_mapping_in`
#: (bert4keras' Embedding-Mapping, built when E differs from H; ALBERT's name, outside its groups).
POSITION_NAME = "bert/embeddings/position_embeddings"
_POSITIONLESS = tuple(row for row in TABLE.rows if row.name != POSITION_NAME)
ROFORMER_TABLE = Table("google-tf roformer", (
    *_POSITIONLESS, *dense_rows("embeddings.projection", "bert/encoder/embedding_hidden_mapping_in"),
), skips=_SKIPS)
NEZHA_TABLE = Table("google-tf nezha", _POSITIONLESS, skips=_SKIPS)


@record
class Model:
    """A model a Google checkpoint may hold, and how to read it.

    Attributes:
      family: the model type (`BertConfig.model_type`).
      name: "generator" or "discriminator" for ELECTRA's two models, else None.
      table: its names.
      config_names: config files that describe it, looked for beside the checkpoint in order
        (`{stem}`: the checkpoint prefix's name before `.ckpt`).
      own: canonical-name prefixes only this model has (its layers and head): the file holds the
        model when one of its names reads as one of them.
      gelu_means: what its authors' code computes for a config's "gelu": Google's tanh
        approximation, or the erf form (RoFormer's, trained with bert4keras).
      stated: keys its authors' code reads that every config written for it states (NEZHA's
        `use_relative_position`, without which Huawei's code builds a position table).
    """

    family: str
    name: str | None
    table: Table
    config_names: tuple[str, ...]
    own: tuple[str, ...] = ("layers.",)
    gelu_means: str = GELU_TANH
    stated: dict[str, Any] = field(default_factory=dict)


_BERT_CONFIGS = ("{stem}.bert_config.json", CONFIG_FILE)
BERT = Model("bert", None, TABLE, _BERT_CONFIGS)
ALBERT = Model("albert", None, ALBERT_TABLE, ("{stem}.albert_config.json", "albert_config.json", *_BERT_CONFIGS))
#: brightmart's releases name the config after the size (albert_tiny_zh/albert_config_tiny.json).
ALBERT_ZH = Model("albert", None, ALBERT_ZH_TABLE,
                  (*ALBERT.config_names, *(f"albert_config_{size}.json" for size in ALBERT_ZH_SIZES)),
                  ("embeddings.word_projection.",))
ELECTRA_GENERATOR = Model("electra", "generator", ELECTRA_GENERATOR_TABLE,
                          ("{stem}.generator_config.json", "generator_config.json"), ("layers.", "mlm."))
ELECTRA_UNTIED_GENERATOR = Model("electra", "generator", ELECTRA_UNTIED_GENERATOR_TABLE,
                                 ELECTRA_GENERATOR.config_names, ("embeddings.word",))
ELECTRA_DISCRIMINATOR = Model("electra", "discriminator", ELECTRA_DISCRIMINATOR_TABLE,
                              ("{stem}.discriminator_config.json", "discriminator_config.json"), ("layers.", "rtd."))
#: RoFormer's authors trained it with bert4keras, whose "gelu" is the erf form; Huawei's NEZHA code
#: is google-research/bert's (tanh "gelu", -10000 mask adder) with relative positions clipped at 64
#: (hard-coded: its configs state no `max_relative_position`), and builds a position table
#: unless the config says `use_relative_position`.
ROFORMER = Model("roformer", None, ROFORMER_TABLE, _BERT_CONFIGS, gelu_means="gelu")
NEZHA = Model("nezha", None, NEZHA_TABLE, _BERT_CONFIGS, stated={"use_relative_position": True})
NEZHA_MAX_RELATIVE_POSITION = 64
#: The models each family (or variant: `families.member`) is written as; a family with several
#: models (ELECTRA's) writes the tree's own, else the one its heads make it.
MODELS_TO_WRITE = {"bert": (BERT,), "albert": (ALBERT,), "albert_zh": (ALBERT_ZH,),
                   "electra": (ELECTRA_GENERATOR, ELECTRA_DISCRIMINATOR), "roformer": (ROFORMER,),
                   "nezha": (NEZHA,)}
#: The families this module has tables to write (RoBERTa was never a Google TF checkpoint), and
#: brightmart's ALBERT variant (`families.member`), which only this format holds.
WRITES_FAMILIES = tuple(MODELS_TO_WRITE)
#: Every model, in the order ties are settled (the most common first).
ALL_MODELS = (BERT, ALBERT, ALBERT_ZH, ELECTRA_UNTIED_GENERATOR, ELECTRA_GENERATOR, ELECTRA_DISCRIMINATOR)


def _albert_names(names: list[str], inner_groups: int | None) -> dict[str, str]:
    """File name -> the ALBERT table's spelling: `group_{g}/inner_group_{j}` becomes stored
    layer g*J + j. J is the config's `inner_group_num`, else the names' own count."""
    found = [(name, match) for name in names if (match := _ALBERT_GROUP.search(name))]
    inner = inner_groups or 1 + max((int(m.group(2)) for _, m in found), default=0)
    out = {}
    for name, match in found:
        group, j = int(match.group(1)), int(match.group(2))
        if j < inner:  # an inner index beyond J is another model's: left unmatched, so reported
            out[name] = name[:match.start()] + f"stored_layer_{group * inner + j}" + name[match.end():]
    return out


def albert_name(spelled: str, inner_groups: int) -> str:
    """The ALBERT table's spelling of stored layer k -> Google's `group_{k // J}/inner_group_{k % J}`."""
    def group(match: re.Match) -> str:
        k = int(match.group(1))
        return f"group_{k // inner_groups}/inner_group_{k % inner_groups}"
    return re.sub(r"stored_layer_(\d+)", group, spelled)


