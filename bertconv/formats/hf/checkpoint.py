"""Hugging Face state dicts of the BERT family: `model.safetensors`, `pytorch_model.bin`, sharded sets.

One table per family (BERT, ALBERT, ELECTRA, RoBERTa, DistilBERT; XLM-RoBERTa and CamemBERT are
RoBERTa's names: `FAMILIES`), chosen on reading by the
names a family's modules give its tensors or by config.json's `model_type`, and on writing by
the tree's `config.model_type`.
Layout: `nn.Linear` weights are `[out, in]`, the transpose of canonical kernels; embeddings are
row tables as in the canonical tree. Encoder-only files (`BertModel`, `AlbertModel`, ...) drop
the base model's prefix (`bert.`, `albert.`, ...).
A tied decoder is not stored by `save_pretrained`; where a file stores it anyway, it is read as a
copy of the word embeddings (by storage identity in a `.bin`, by value in `verify`).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ... import families, json_text, paths
from ...config import BertConfig
from ...containers import safetensors_file
from ...errors import bad_input
from ...lazy import lazy_module
from ...tree import Ignored, ParameterTree
from . import files as hf_files
from ..assemble import Entry, assemble
from ..configs import config_beside
from .classes import transformers_5_caveats as write_caveats  # noqa: F401 (the registry's)
from .classes import is_base_model
from ..table import IDENTITY, TRANSPOSE, Row, Skip, Table

if TYPE_CHECKING:
    from ...containers import torch_pickle
else:  # imported on first use: a safetensors checkpoint needs no zipfile or pickle machinery
    torch_pickle = lazy_module("bertconv.containers.torch_pickle")

SAFETENSORS = "hf-safetensors"
PYTORCH_BIN = "hf-pytorch-bin"
FORMATS = (SAFETENSORS, PYTORCH_BIN)

#: transformers' own default for how a config's "gelu" is computed: the exact erf form.
DEFAULT_ACTIVATION = "gelu"
DEFAULT_MAX_SHARD_BYTES = 5 * 10**9

SAFETENSORS_FILE = "model.safetensors"
BIN_FILE = "pytorch_model.bin"
INDEX_SUFFIX = ".index.json"
CONFIG_FILE = "config.json"
VOCAB_FILE = "vocab.txt"
#: The files of a Hugging Face checkpoint directory (what `convert --force` may replace).
OWNED_FILES = ("model.safetensors", "model-*-of-*.safetensors", "model.safetensors.index.json",
               "pytorch_model.bin", "pytorch_model-*-of-*.bin", "pytorch_model.bin.index.json",
               CONFIG_FILE, "generation_config.json")
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
def _pre_norm_layer_rows(layer: str, attention_norm: str, ffn_norm: str) -> tuple[Row, ...]:
    """One pre-LayerNorm layer of BERT's module names (Megatron-BERT's, ESM's), its two norms named
    under `layer`: the one before attention and the one before the FFN."""
    return (
        *_linear_rows("layers.{i}.attention.query", f"{layer}.attention.self.query"),
        *_linear_rows("layers.{i}.attention.key", f"{layer}.attention.self.key"),
        *_linear_rows("layers.{i}.attention.value", f"{layer}.attention.self.value"),
        *_linear_rows("layers.{i}.attention.output", f"{layer}.attention.output.dense"),
        *_norm_rows("layers.{i}.attention_norm", f"{layer}.{attention_norm}"),
        *_linear_rows("layers.{i}.ffn.intermediate", f"{layer}.intermediate.dense"),
        *_linear_rows("layers.{i}.ffn.output", f"{layer}.output.dense"),
        *_norm_rows("layers.{i}.ffn_norm", f"{layer}.{ffn_norm}"),
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
    *_pre_norm_layer_rows("esm.encoder.layer.{i}", "attention.LayerNorm", "LayerNorm"),
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
    """

    model_type: str
    table: Table
    base: str
    head_prefixes: tuple[str, ...]

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
    Family("esm", ESM_TABLE, "esm", ("lm_head.",)),
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


_ALBERT_GROUPED = re.compile(r"\.albert_layer_groups\.(\d+)\.albert_layers\.(\d+)\.")
_ALBERT_FLAT = re.compile(r"\.albert_layers\.(\d+)\.")
#: Put before a file name that must match no row (no row starts with it).
_UNMATCHABLE = "\0"


def _flatten_albert(path: Path, name: str, inner_group_num: int) -> str:
    """`...albert_layer_groups.{g}.albert_layers.{j}.x` -> the table's `...albert_layers.{g*J+j}.x`.
    Indices spelled with a leading zero are left as they are (no row matches them), and so is a
    file name already in the table's flat spelling, which is no name transformers gives."""
    match = _ALBERT_GROUPED.search(name)
    if match is None:
        return _UNMATCHABLE + name if _ALBERT_FLAT.search(name) else name
    if any(str(int(index)) != index for index in match.groups()):
        return name
    group, inner = int(match.group(1)), int(match.group(2))
    if inner >= inner_group_num:
        raise bad_input(path, f"tensor {name!r} is inner layer {inner} of group {group}, but the config says "
                              f"inner_group_num is {inner_group_num}: the config is not this checkpoint's")
    return f"{name[:match.start()]}.albert_layers.{group * inner_group_num + inner}.{name[match.end():]}"


def _unflatten_albert(name: str, inner_group_num: int) -> str:
    """The inverse of `_flatten_albert`: stored layer k is inner layer k % J of group k // J."""
    match = _ALBERT_FLAT.search(name)
    if match is None:
        return name
    layer = int(match.group(1))
    return (f"{name[:match.start()]}.albert_layer_groups.{layer // inner_group_num}"
            f".albert_layers.{layer % inner_group_num}.{name[match.end():]}")


def _inner_group_num(config: BertConfig | None, names: list[str]) -> int:
    """J: the config's, or without a config the most inner layers any group stores."""
    if config is not None and config.shares_layers:
        return config.inner_group_num or 1
    inner = [int(m.group(2)) for m in map(_ALBERT_GROUPED.search, names) if m is not None]
    return max(inner, default=0) + 1


def _renamer(path: Path, family: Family, config: BertConfig | None, names: list[str]):
    """File name -> the family table's spelling."""
    if not family.declared.shares_layers:
        return family.with_prefix
    inner = _inner_group_num(config, names)
    return lambda name: _flatten_albert(path, family.with_prefix(name), inner)


# --- finding the files ----------------------------------------------------------------------


def candidates(directory: Path) -> list[Path]:
    """The Hugging Face checkpoints a directory holds (an index counts once for its shards)."""
    found = [directory / name for name in (SAFETENSORS_FILE + INDEX_SUFFIX, BIN_FILE + INDEX_SUFFIX)
             if (directory / name).is_file()]
    for name in (SAFETENSORS_FILE, BIN_FILE):
        if (directory / name).is_file():
            found.append(directory / name)
    if not found:
        # Any other *.safetensors, each listed as a checkpoint of its own: one is read as the
        # model, several (unindexed shards, which may not be complete) are refused as ambiguous.
        found = sorted(directory.glob("*.safetensors"))
    return found


def sniff(path: Path) -> str | None:
    """This module's format name for a file, judged from its content, or None."""
    if path.name.endswith(INDEX_SUFFIX):
        return SAFETENSORS if _first_shard(path).endswith(".safetensors") else PYTORCH_BIN
    if safetensors_file.looks_like_safetensors(path):
        return SAFETENSORS
    if torch_pickle.looks_like_torch(path):
        return PYTORCH_BIN
    return None


def _first_shard(index_path: Path) -> str:
    try:
        weight_map = json_text.loads(index_path.read_text()).get("weight_map", {})
        return next(iter(weight_map.values()), "")
    except (OSError, ValueError, AttributeError):
        return ""


# --- reading --------------------------------------------------------------------------------


def read(path: Path, *, config_path: Path | None = None, num_heads: int | None = None) -> ParameterTree:
    """Read a Hugging Face checkpoint file (or shard index) of the BERT family into a canonical tree.

    The family's table is the one its names mark (`family_of_names`), else the one config.json's
    `model_type` names, else BERT's; a config naming another family than the names is refused.
    """
    path = Path(path)
    if path.name.endswith(INDEX_SUFFIX):
        shard_files = _shards(path)
    else:
        shard_files = [path]
    format_name = sniff(path)
    entries: list[Entry] = []
    checkpoints: list[tuple[Path, torch_pickle.TorchCheckpoint]] = []
    for shard in shard_files:
        shard_entries, checkpoint = _entries(shard)
        entries += shard_entries
        if checkpoint is not None:
            checkpoints.append((shard, checkpoint))
    config = config_beside(path.parent, config_path, [CONFIG_FILE], activation=DEFAULT_ACTIVATION)
    names = [entry.name for entry in entries] + [name for _, c in checkpoints for name in c.non_tensors]
    stated = config.model_type if config else None
    family = family_of_names(names, stated) or FAMILIES.get(stated or "bert", FAMILIES["bert"])
    rename = _renamer(path, family, config, names)
    ignored = [item for file, checkpoint in checkpoints
               for item in _non_tensors(file, checkpoint, family.table, rename)]
    vocab = path.parent / VOCAB_FILE
    tree = assemble(
        format_name=format_name or SAFETENSORS, path=path, entries=entries, table=family.table, config=config,
        default_activation=DEFAULT_ACTIVATION, num_heads=num_heads, files=shard_files,
        vocab=vocab if vocab.is_file() else None, rename=rename, extra_ignored=ignored,
        family=family.model_type,
    )
    stored = {entry.name: entry.tensor for entry in entries}
    tree.ignored = [_check_rotary_buffer(tree, item, stored) for item in tree.ignored]
    return tree


def _check_rotary_buffer(tree: ParameterTree, item: Ignored, stored: dict) -> Ignored:
    """A stored rotary buffer as set aside, or, where its values are not the ones the config gives
    (an old checkpoint's float16 rounding), unread: transformers computes with the stored values."""
    if item.reason != ROTARY_BUFFER:
        return item
    import numpy as np  # noqa: PLC0415 (a rotary model's only: headers of the others load without NumPy)

    from ...runtime.positions import inverse_frequencies  # noqa: PLC0415

    computed = inverse_frequencies(tree.config.rope_theta, tree.config.head_size)
    values = np.asarray(stored[item.name].read(), dtype=np.float64)
    if values.shape == computed.shape and np.array_equal(values, computed):
        return item
    return replace(item, reason=f"rotary inverse frequencies that differ from the config's (rope_theta "
                                f"{tree.config.rope_theta:g}, head width {tree.config.head_size}): transformers "
                                f"computes with the stored ones, bertconv would not", unread=True)


def _entries(file: Path) -> tuple[list[Entry], torch_pickle.TorchCheckpoint | None]:
    """The file's tensors, and the torch checkpoint they came from (None for safetensors)."""
    if safetensors_file.looks_like_safetensors(file):
        header = safetensors_file.read_header(file)
        return [Entry(name, tensor, file) for name, tensor in header.tensors.items()], None
    if torch_pickle.looks_like_torch(file):
        checkpoint = torch_pickle.read_checkpoint(file)
        entries = [Entry(name, tensor, file, identity=checkpoint.identities[name])
                   for name, tensor in checkpoint.tensors.items()]
        return entries, checkpoint
    raise bad_input(file, "neither a safetensors file nor a torch checkpoint")


def _non_tensors(file: Path, checkpoint: torch_pickle.TorchCheckpoint, table: Table, rename) -> list[Ignored]:
    """A state dict's entries that are not tensors, and what a training script saved beside it.
    A non-tensor under a parameter's name is a damaged file, not something to set aside."""
    ignored = []
    for name, entry in checkpoint.non_tensors.items():
        match = table.match(rename(name))
        if match is not None:
            raise bad_input(file, f"entry {name!r} is a {entry.type_name} where a tensor is expected "
                                  f"({match.canonical})")
        ignored.append(Ignored(name, f"not a tensor ({entry.type_name})", entry.values, entry.type_name))
    where = f"under {checkpoint.wrapper!r}" if checkpoint.wrapper else ""
    for name, entry in checkpoint.beside.items():
        ignored.append(Ignored(name, f"training state saved beside the model's state dict ({where}), not a "
                                     f"parameter", entry.values, entry.type_name))
    return ignored


def _shards(index_path: Path) -> list[Path]:
    try:
        index = json_text.loads(index_path.read_text(encoding="utf-8"))
        weight_map = index["weight_map"]
        if not isinstance(weight_map, dict):
            raise TypeError("weight_map is not an object")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise bad_input(index_path, f"not a shard index with a weight_map: {exc}") from None
    shards = []
    for shard in dict.fromkeys(weight_map.values()):
        shard_path = index_path.parent / str(shard)
        if Path(str(shard)).is_absolute() or ".." in Path(str(shard)).parts:
            raise bad_input(index_path, f"shard {shard!r} lies outside the checkpoint's directory")
        if (problem := paths.file_problem(shard_path)) is not None:
            raise bad_input(index_path, f"shard {shard!r} listed in the weight_map {problem}")
        shards.append(shard_path)
    return shards


# --- writing --------------------------------------------------------------------------------


def _family(tree: ParameterTree) -> Family:
    family = FAMILIES.get(tree.config.model_type)
    if family is None:
        raise bad_input(tree.path, f"a {tree.config.model_type} model has no Hugging Face table here; "
                                   f"this writer writes {', '.join(FAMILIES)}")
    return family


def tensors_to_write(tree: ParameterTree) -> list[safetensors_file.TensorSource]:
    """(name, dtype, shape, lazy tensor) for every tensor a Hugging Face file of `tree` holds.

    Tied copies are not written (as `save_pretrained` does); an untied decoder is.
    """
    if tree.conditional:
        raise bad_input(tree.path, "conditional LayerNorm (bert4keras layer_norm_cond) has no "
                                   "Hugging Face equivalent; convert it --to bert4keras instead")
    family = _family(tree)
    encoder_only = is_base_model(tree)
    sources = []
    for param in tree:
        if not tree.is_counted(param.name):
            continue
        spelled = family.table.spelling(param.name)
        if spelled is None:
            raise bad_input(tree.path, f"{param.name} ({param.source}) has no name in transformers' "
                                       f"{family.model_type} models; nothing was written")
        name, layout = spelled
        if tree.config.shares_layers:
            name = _unflatten_albert(name, tree.config.inner_group_num or 1)
        if encoder_only:
            name = name.removeprefix(family.base + ".")
        tensor = layout.to_format(param.tensor)
        sources.append((name, tensor.dtype, tuple(tensor.shape), tensor))  # lazy: copied or read when written
    return sources


def write(tree: ParameterTree, directory: Path, *, options) -> list[Path]:
    """Write `tree` as a Hugging Face checkpoint into the (new, empty) `directory`.

    Returns the files written. Shards past `options.max_shard_bytes` (default 5 GB), with
    `model.safetensors.index.json`: the same files, bytes and index as transformers 5's
    `save_pretrained(max_shard_size=...)` writes for a model it loaded (see `natural_key`). `options` is a
    `conversion.WriteOptions`.
    """
    max_shard_bytes = options.max_shard_bytes or DEFAULT_MAX_SHARD_BYTES
    on_tensor = options.on_tensor
    sources = tensors_to_write(tree)
    shards = split_like_save_pretrained(sorted(sources, key=lambda s: natural_key(s[0])), max_shard_bytes)
    written = []
    metadata = {"format": "pt"}
    if len(shards) == 1:
        target = directory / SAFETENSORS_FILE
        safetensors_file.write_file(target, shards[0], metadata, on_tensor=on_tensor)
        written.append(target)
    else:
        weight_map = {}
        for number, shard in enumerate(shards, start=1):
            target = directory / f"model-{number:05d}-of-{len(shards):05d}.safetensors"
            safetensors_file.write_file(target, shard, metadata, on_tensor=on_tensor)
            weight_map.update({name: target.name for name, *_ in shard})
            written.append(target)
        parameters = sum(param.numel for param in tree if tree.is_counted(param.name))
        index = {"metadata": {"total_parameters": parameters, "total_size": sum(_nbytes(s) for s in sources)},
                 "weight_map": weight_map}
        target = directory / (SAFETENSORS_FILE + INDEX_SUFFIX)
        target.write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
        written.append(target)
    dtype = tree["embeddings.word"].tensor.dtype.name if "embeddings.word" in tree else "float32"
    return written + hf_files.write_config(tree, directory, dtype=dtype)


def _nbytes(source: safetensors_file.TensorSource) -> int:
    _, dtype, shape, _ = source
    return math.prod(shape) * dtype.itemsize


def natural_key(name: str) -> list[tuple]:
    """transformers' `dot_natural_key`: the order `save_pretrained` hands a loaded model's tensors
    to the shard splitter. Dot-separated parts compare numbers numerically, and a word with a
    numeric tail (`shard_11`) by its word and then its number."""
    key = []
    for part in name.split("."):
        if part.isdigit():
            key.append((0, int(part)))
            continue
        word = part.rstrip("0123456789")
        key.append((1, word, int(part[len(word):])) if word != part else (1, word))
    return key


def split_like_save_pretrained(ordered: list, max_bytes: int) -> list[list]:
    """Shards as huggingface_hub's `split_state_dict_into_shards_factory` makes them from
    tensors in state-dict order: a tensor larger than `max_bytes` becomes a shard of its own at
    once (the shard being filled carries on after it); otherwise a tensor that would take the
    current shard past `max_bytes` closes it first."""
    shards: list[list] = []
    current: list = []
    size = 0
    for source in ordered:
        nbytes = _nbytes(source)
        if nbytes > max_bytes:
            shards.append([source])
            continue
        if size + nbytes > max_bytes:
            shards.append(current)
            current, size = [], 0
        current.append(source)
        size += nbytes
    if current:
        shards.append(current)
    return shards
