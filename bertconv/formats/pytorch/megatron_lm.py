"""NVIDIA Megatron-LM's BERT checkpoints (`model_optim_rng.pt`, in a checkpoint directory under
`release/mp_rank_00/` or `iter_N/mp_rank_00/`): read only, as transformers'
`convert_megatron_bert_checkpoint.py` reads them.

The pickle is a dict: `model` (nested dicts of tensors), `checkpoint_version`, `args` (the
training options, an argparse.Namespace; absent from the oldest releases), and the optimizer and
RNG states. The model, as this module flattens it into dotted names:

    language_model.embedding.{word,position,tokentype}_embeddings.weight   [V', H], [P, H], [T, H]
    language_model.{transformer|encoder}.layers.{i}.
        input_layernorm.{weight, bias}                       before attention (pre-LayerNorm)
        {attention|self_attention}.query_key_value.{weight [3H, H], bias [3H]}
        {attention|self_attention}.dense.{weight [H, H], bias}
        post_attention_layernorm.{weight, bias}              before the MLP
        mlp.dense_h_to_4h [I, H], mlp.dense_4h_to_h [H, I]
    language_model.{transformer|encoder}.final_layernorm.{weight, bias}
    language_model.pooler.dense.{weight, bias}
    lm_head.dense [H, H], lm_head.layernorm [H], lm_head.bias [V']   the decoder is the word table
    binary_head.{weight [2, H], bias}                                 next-sentence prediction

The fused query/key/value rows are ordered by `checkpoint_version` (Megatron-LM's
`fix_query_key_value_ordering`): split s (query, key, value), head a, head dimension d is row
s·H + a·D + d in version 0, a·3D + 3d + s in version 1.0, a·3D + s·D + d from 2.0 on.

V' is the vocabulary padded past the tokenizer's (Megatron's `make_vocab_size_divisible_by`, 128,
times the tensor-parallel size: 30,592 rows for BERT's 30,522 WordPiece tokens). Those rows are
the model's and are kept; `audit` and `verify` name them padding (the Megatron-BERT family's
`vocab_pad_multiple`). The config is the options' sizes (`padded_vocab_size`, `num_layers`, ...);
the options that make another computation (post-LayerNorm residuals, RMSNorm, rotary positions,
SwiGLU, untied output, ...) are refused by name, and a model split over tensor- or pipeline-parallel
ranks is refused until merged.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...config import BertConfig, LAYER_NORM_EPS
from ...config.dialects import config_from_dict
from ...containers import torch_pickle
from ...errors import BadInput, bad_input
from ...records import replace
from ...tensor import LazyTensor
from ...tree import ParameterTree
from ..assemble import Entry, assemble
from ..configs import config_beside
from ..fairseq import entries_and_ignored, norm_rows
from ..table import TRANSPOSE, Row, Table, torch_linear_rows

FORMAT = "megatron-lm"
CHECKPOINT_FILE = "model_optim_rng.pt"
#: Where a checkpoint directory keeps the single-rank model: the release, else the latest iteration.
RANK_DIRECTORY = "mp_rank_00"
SPLITS = ("query", "key", "value")
#: Megatron-LM options at the value whose computation transformers' MegatronBert has; any other
#: value is another model.
SAME_COMPUTATION = {
    "apply_residual_connection_post_layernorm": False, "openai_gelu": False, "onnx_safe": None,
    "normalization": "LayerNorm", "position_embedding_type": "learned_absolute", "add_position_embedding": True,
    "untie_embeddings_and_output_weights": False, "swiglu": False, "squared_relu": False,
    "add_bias_linear": True, "add_qkv_bias": True, "group_query_attention": False, "num_experts": None,
    "apply_layernorm_1p": False, "qk_layernorm": False, "bias_dropout_fusion_disabled": None,
}
PARALLEL = ("tensor_model_parallel_size", "pipeline_model_parallel_size")

_LAYER = "language_model.encoder.layers.{i}"

TABLE = Table(FORMAT, (
    Row("embeddings.word", "language_model.embedding.word_embeddings.weight"),
    Row("embeddings.position", "language_model.embedding.position_embeddings.weight"),
    Row("embeddings.token_type", "language_model.embedding.tokentype_embeddings.weight"),
    *norm_rows("layers.{i}.attention_norm", f"{_LAYER}.input_layernorm"),
    *(row for split in SPLITS for row in (
        Row(f"layers.{{i}}.attention.{split}.kernel", f"{_LAYER}.attention.query_key_value.weight[{split}]", TRANSPOSE),
        Row(f"layers.{{i}}.attention.{split}.bias", f"{_LAYER}.attention.query_key_value.bias[{split}]"))),
    *torch_linear_rows("layers.{i}.attention.output", f"{_LAYER}.attention.dense"),
    *norm_rows("layers.{i}.ffn_norm", f"{_LAYER}.post_attention_layernorm"),
    *torch_linear_rows("layers.{i}.ffn.intermediate", f"{_LAYER}.mlp.dense_h_to_4h"),
    *torch_linear_rows("layers.{i}.ffn.output", f"{_LAYER}.mlp.dense_4h_to_h"),
    *norm_rows("final_norm", "language_model.encoder.final_layernorm"),
    *torch_linear_rows("pooler", "language_model.pooler.dense"),
    *torch_linear_rows("mlm.transform", "lm_head.dense"),
    *norm_rows("mlm.norm", "lm_head.layernorm"),
    Row("mlm.output_bias", "lm_head.bias"),
    *torch_linear_rows("nsp", "binary_head"),
))


def spelled(name: str) -> str:
    """A name in the table's spelling: older Megatron-LM says `transformer` and `attention`, newer
    `encoder` and `self_attention`."""
    return name.replace("language_model.transformer.", "language_model.encoder.").replace(
        ".self_attention.", ".attention.")


class QkvPart(LazyTensor):
    """The query, key or value rows [H, ...] of a fused `query_key_value` tensor [3H, ...], in the
    row order its `checkpoint_version` stored them (module docstring)."""

    def __init__(self, fused: LazyTensor, split: int, heads: int, version: float):
        self.fused, self.split, self.heads, self.version = fused, split, heads, version
        self.dtype = fused.dtype
        self.shape = (fused.shape[0] // 3, *fused.shape[1:])

    def read(self):
        values = self.fused.read()
        head_size, rest = self.shape[0] // self.heads, self.shape[1:]
        if self.version == 0:
            part = values.reshape(3, self.heads, head_size, *rest)[self.split]
        elif self.version == 1:
            part = values.reshape(self.heads, head_size, 3, *rest)[:, :, self.split]
        else:
            part = values.reshape(self.heads, 3, head_size, *rest)[:, self.split]
        return part.reshape(self.shape)


# --- finding the files ----------------------------------------------------------------------


def sniff(path: Path) -> str | None:
    """A torch pickle of `model` holding Megatron-LM's `language_model.embedding` dicts."""
    path = Path(path)
    if not path.is_file() or not torch_pickle.looks_like_torch(path):
        return None
    try:
        checkpoint, _ = _read(path)
    except BadInput:
        return None
    return FORMAT if _is_megatron(checkpoint) else None


def _is_megatron(checkpoint: torch_pickle.TorchCheckpoint) -> bool:
    return checkpoint.wrapper == "model" and any(name.startswith("language_model.embedding.")
                                                  for name in checkpoint.tensors)


def candidates(directory: Path) -> list[Path]:
    """`model_optim_rng.pt` in `directory`, else in its `release/mp_rank_00/`, else in the rank
    directory of the iteration `latest_checkpointed_iteration.txt` names. The name is Megatron-LM's
    own: the file is taken unsniffed, so that reading it says what is wrong with it."""
    directory = Path(directory)
    places = [directory, directory / "release" / RANK_DIRECTORY]
    latest = directory / "latest_checkpointed_iteration.txt"
    if latest.is_file():
        text = latest.read_text(errors="replace").strip()
        places.append(directory / ("release" if text == "release" else f"iter_{text:0>7}") / RANK_DIRECTORY)
    return [place / CHECKPOINT_FILE for place in dict.fromkeys(places)
            if (place / CHECKPOINT_FILE).is_file()][:1]


# --- reading --------------------------------------------------------------------------------


def _read(path: Path) -> tuple[torch_pickle.TorchCheckpoint, object]:
    """The checkpoint with `model`'s nested dicts flattened to dotted names, and its
    `checkpoint_version` (0 when it states none, as Megatron-LM reads it)."""
    found = {}

    def flatten(saved):
        if not (isinstance(saved, dict) and isinstance(saved.get("model"), dict)):
            return saved
        found["version"] = saved.get("checkpoint_version", 0)
        return {**saved, "model": dict(_dotted(saved["model"]))}

    checkpoint = torch_pickle.read_checkpoint(path, arrange=flatten)
    return checkpoint, found.get("version", 0)


def _dotted(tree: dict, prefix: str = ""):
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _dotted(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def read(path: Path, *, config_path: Path | None = None, num_heads: int | None = None) -> ParameterTree:
    """Read a Megatron-LM BERT checkpoint's layout (no tensor data) and its options."""
    path = Path(path)
    checkpoint, version = _read(path)
    if not _is_megatron(checkpoint):
        raise bad_input(path, "is not a Megatron-LM BERT checkpoint: expected a dict whose `model` holds "
                              "language_model.embedding.word_embeddings.weight")
    if isinstance(version, bool) or not isinstance(version, (int, float)) or not (version in (0, 1) or version >= 2):
        raise bad_input(path, f"checkpoint_version is {version!r}; Megatron-LM's query/key/value row orders are "
                              f"those of versions 0, 1.0 and 2.0 on")
    _refuse_split(path)
    options = checkpoint.settings.get("args") or {}
    config = (config_beside(path.parent, config_path, (), activation="gelu", family="megatron-bert")
              or (_config_from_options(path, options, checkpoint) if options else None))
    heads = num_heads or (config.num_attention_heads if config else None)
    entries, ignored = entries_and_ignored(path, checkpoint, saved_by="Megatron-LM")
    entries = [part for entry in entries for part in _split_qkv(path, entry, heads, float(version))]
    vocab = next((place / "vocab.txt" for place in (path.parent, *path.parents[:3]) if (place / "vocab.txt").is_file()),
                 None)
    return assemble(format_name=FORMAT, path=path, entries=entries, table=TABLE, config=config,
                    default_activation="gelu", num_heads=num_heads, files=[path], vocab=vocab,
                    extra_ignored=ignored, rename=spelled, family="megatron-bert")


def _split_qkv(path: Path, entry: Entry, heads: int | None, version: float) -> list[Entry]:
    name = spelled(entry.name)
    if not name.endswith((".attention.query_key_value.weight", ".attention.query_key_value.bias")):
        return [entry]
    if version == 0:  # three blocks of H rows: the head count does not matter
        heads = heads or 1
    if heads is None:
        raise bad_input(path, f"{entry.name}: the fused query/key/value rows are ordered by head, and nothing "
                              f"states the head count (no `args` saved): pass --heads or --config")
    if entry.tensor.shape[0] % (3 * heads):
        raise bad_input(path, f"{entry.name} has {entry.tensor.shape[0]} rows, expected 3 x {heads} heads x "
                              f"the head width")
    return [Entry(f"{entry.name}[{split}]", QkvPart(entry.tensor, number, heads, version), entry.file)
            for number, split in enumerate(SPLITS)]


def _refuse_split(path: Path) -> None:
    rank = path.parent
    if rank.name.startswith("mp_rank_") and any(other.name != rank.name and other.name.startswith("mp_rank_")
                                                 for other in rank.parent.iterdir()):
        raise bad_input(path, f"{rank.parent} holds the model split over several ranks ({rank.name} and others): "
                              f"merge them into one first (Megatron-LM's tools/checkpoint), bertconv reads one rank")


def _config_from_options(path: Path, options: dict, checkpoint: torch_pickle.TorchCheckpoint) -> BertConfig:
    for key in PARALLEL:
        if options.get(key, 1) not in (None, 1):
            raise bad_input(path, f"Megatron-LM option {key} is {options[key]!r}: this file is one shard of a model "
                                  f"split that many ways; merge the shards first (Megatron-LM's tools/checkpoint)")
    for key, value in SAME_COMPUTATION.items():
        if key in options and options[key] != value and value is not None:
            raise bad_input(path, f"Megatron-LM option {key} is {options[key]!r}: another computation than "
                                  f"Megatron-BERT's ({key} {value!r}), which bertconv does not run")
    hidden, heads = options.get("hidden_size"), options.get("num_attention_heads")
    if options.get("kv_channels") not in (None, (hidden // heads) if isinstance(hidden, int) and heads else None):
        raise bad_input(path, f"Megatron-LM option kv_channels is {options['kv_channels']!r}: a head width other "
                              f"than hidden_size / num_attention_heads, which transformers' MegatronBert cannot hold")
    shapes = {spelled(name): tensor.shape for name, tensor in checkpoint.tensors.items()}
    token_types = shapes.get("language_model.embedding.tokentype_embeddings.weight", (0,))[0]
    # Megatron-LM normalizes with its --layernorm-epsilon; a file that does not state it gets the
    # value transformers' conversion writes (MegatronBertConfig's default).
    epsilon = options.get("layernorm_epsilon", LAYER_NORM_EPS)
    stated = dict(model_type="megatron-bert", vocab_size=options.get("padded_vocab_size"), hidden_size=hidden,
                  num_hidden_layers=options.get("num_layers"), num_attention_heads=heads,
                  intermediate_size=options.get("ffn_hidden_size") or (4 * hidden if isinstance(hidden, int) else None),
                  max_position_embeddings=options.get("max_position_embeddings"), type_vocab_size=token_types,
                  layer_norm_eps=epsilon, hidden_act="gelu")
    try:
        config = config_from_dict(stated, gelu_means="gelu", family="megatron-bert")
    except (KeyError, ValueError) as exc:
        raise bad_input(path, f"Megatron-LM options {json.dumps(stated, default=str)}: {exc}") from None
    from_options = set(stated) - {"model_type", "type_vocab_size", "hidden_act"}
    provenance = {key: "file" if key in from_options else "format" for key in config.provenance}
    provenance.update(type_vocab_size="shapes")
    if "layernorm_epsilon" not in options:
        provenance.update(layer_norm_eps="default")
    return replace(config, provenance=provenance, source=path)
