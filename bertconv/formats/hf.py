"""Hugging Face BERT state dicts: `model.safetensors`, `pytorch_model.bin`, and sharded sets.

Layout: `nn.Linear` weights are `[out, in]`, the transpose of canonical kernels; embeddings are
row tables as in the canonical tree. Encoder-only (`BertModel`) files drop the `bert.` prefix.
A tied decoder is not stored by `save_pretrained`; where a file stores it anyway, it is read as a
copy of the word embeddings (by storage identity in a `.bin`, by value in `verify`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..config import BertConfig, load_config_file
from ..containers import safetensors_file, torch_pickle
from ..errors import bad_input
from ..tree import Ignored, ParameterTree
from .assemble import Entry, assemble
from .table import IDENTITY, TRANSPOSE, Row, Skip, Table

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

TABLE = Table("hf", (
    Row("embeddings.word", "bert.embeddings.word_embeddings.weight"),
    Row("embeddings.token_type", "bert.embeddings.token_type_embeddings.weight"),
    Row("embeddings.position", "bert.embeddings.position_embeddings.weight"),
    *_norm_rows("embeddings.norm", "bert.embeddings.LayerNorm"),
    *_linear_rows("layers.{i}.attention.query", f"{_LAYER}.attention.self.query"),
    *_linear_rows("layers.{i}.attention.key", f"{_LAYER}.attention.self.key"),
    *_linear_rows("layers.{i}.attention.value", f"{_LAYER}.attention.self.value"),
    *_linear_rows("layers.{i}.attention.output", f"{_LAYER}.attention.output.dense"),
    *_norm_rows("layers.{i}.attention_norm", f"{_LAYER}.attention.output.LayerNorm"),
    *_linear_rows("layers.{i}.ffn.intermediate", f"{_LAYER}.intermediate.dense"),
    *_linear_rows("layers.{i}.ffn.output", f"{_LAYER}.output.dense"),
    *_norm_rows("layers.{i}.ffn_norm", f"{_LAYER}.output.LayerNorm"),
    *_linear_rows("pooler", "bert.pooler.dense"),
    *_linear_rows("mlm.transform", "cls.predictions.transform.dense"),
    *_norm_rows("mlm.norm", "cls.predictions.transform.LayerNorm"),
    Row("mlm.output_bias", "cls.predictions.bias"),
    Row("mlm.decoder", "cls.predictions.decoder.weight"),
    Row("mlm.decoder_bias", "cls.predictions.decoder.bias"),
    *_linear_rows("nsp", "cls.seq_relationship"),
), skips=(
    Skip("*embeddings.position_ids", "buffer (position ids), not a parameter"),
    Skip("*embeddings.token_type_ids", "buffer (token type ids), not a parameter"),
    Skip("classifier.*", "a fine-tuning head that BERT pre-training does not define"),
    Skip("qa_outputs.*", "a fine-tuning head that BERT pre-training does not define"),
))


#: What `nn.DataParallel` / DistributedDataParallel put before every name of the model they wrap.
DATA_PARALLEL_PREFIX = "module."


def _with_prefix(name: str) -> str:
    """Encoder-only (`BertModel`) files name `embeddings.*`, not `bert.embeddings.*`; a model
    saved through `nn.DataParallel` prefixes every name with `module.`."""
    name = name.removeprefix(DATA_PARALLEL_PREFIX)
    return name if name.startswith(("bert.", "cls.")) else "bert." + name


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
        weight_map = json.loads(index_path.read_text()).get("weight_map", {})
        return next(iter(weight_map.values()), "")
    except (OSError, ValueError, AttributeError):
        return ""


# --- reading --------------------------------------------------------------------------------


def read(path: Path, *, config_path: Path | None = None, num_heads: int | None = None) -> ParameterTree:
    """Read a Hugging Face BERT checkpoint file (or shard index) into a canonical tree."""
    path = Path(path)
    if path.name.endswith(INDEX_SUFFIX):
        shard_files = _shards(path)
    else:
        shard_files = [path]
    format_name = sniff(path)
    entries: list[Entry] = []
    ignored: list[Ignored] = []
    for shard in shard_files:
        shard_entries, shard_ignored = _entries(shard)
        entries += shard_entries
        ignored += shard_ignored
    config = _config(path, config_path)
    vocab = path.parent / VOCAB_FILE
    return assemble(
        format_name=format_name or SAFETENSORS, path=path, entries=entries, table=TABLE, config=config,
        default_activation=DEFAULT_ACTIVATION, num_heads=num_heads, files=shard_files,
        vocab=vocab if vocab.is_file() else None, rename=_with_prefix, extra_ignored=ignored,
    )


def _entries(file: Path) -> tuple[list[Entry], list[Ignored]]:
    """The file's tensors, and its entries that are not tensors, each with why it is set aside."""
    if safetensors_file.looks_like_safetensors(file):
        header = safetensors_file.read_header(file)
        return [Entry(name, tensor, file) for name, tensor in header.tensors.items()], []
    if torch_pickle.looks_like_torch(file):
        checkpoint = torch_pickle.read_checkpoint(file)
        entries = [Entry(name, tensor, file, identity=checkpoint.identities[name])
                   for name, tensor in checkpoint.tensors.items()]
        return entries, _non_tensors(file, checkpoint)
    raise bad_input(file, "neither a safetensors file nor a torch checkpoint")


def _non_tensors(file: Path, checkpoint: torch_pickle.TorchCheckpoint) -> list[Ignored]:
    """A state dict's entries that are not tensors, and what a training script saved beside it.
    A non-tensor under a parameter's name is a damaged file, not something to set aside."""
    ignored = []
    for name, entry in checkpoint.non_tensors.items():
        match = TABLE.match(_with_prefix(name))
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
        index = json.loads(index_path.read_text(encoding="utf-8"))
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
        if not shard_path.is_file():
            raise bad_input(index_path, f"shard {shard!r} listed in the weight_map does not exist")
        shards.append(shard_path)
    return shards


def _config(path: Path, config_path: Path | None) -> BertConfig | None:
    candidate = config_path or path.parent / CONFIG_FILE
    if config_path is None and not candidate.is_file():
        return None
    return load_config_file(candidate, gelu_means_for_google="gelu")


# --- writing --------------------------------------------------------------------------------


def architecture(tree: ParameterTree) -> str:
    """The transformers class that holds exactly the heads the tree has."""
    heads = tree.heads
    if heads.mlm and heads.nsp:
        return "BertForPreTraining"
    if heads.mlm:
        return "BertForMaskedLM"
    if heads.nsp:
        return "BertForNextSentencePrediction"
    return "BertModel"


def tensors_to_write(tree: ParameterTree) -> list[safetensors_file.TensorSource]:
    """(name, dtype, shape, lazy tensor) for every tensor a Hugging Face file of `tree` holds.

    Tied copies are not written (as `save_pretrained` does); an untied decoder is.
    """
    if tree.conditional:
        raise bad_input(tree.path, "conditional LayerNorm (bert4keras layer_norm_cond) has no "
                                   "Hugging Face equivalent; convert it --to bert4keras instead")
    encoder_only = architecture(tree) == "BertModel"
    sources = []
    for param in tree:
        if not tree.is_counted(param.name):
            continue
        name, layout = TABLE.spelling(param.name)
        if encoder_only:
            name = name.removeprefix("bert.")
        tensor = layout.to_format(param.tensor)
        sources.append((name, tensor.dtype, tuple(tensor.shape), tensor))  # lazy: copied or read when written
    return sources


def write(tree: ParameterTree, directory: Path, *, options) -> list[Path]:
    """Write `tree` as a Hugging Face checkpoint into the (new, empty) `directory`.

    Returns the files written. Shards past `options.max_shard_bytes` (default 5 GB), with
    `model.safetensors.index.json`: the same files, bytes and index as transformers 5's
    `save_pretrained(max_shard_size=...)` writes for a model it loaded (see `natural_key`). `options` is a
    `convert.WriteOptions`.
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
    config = tree.config.to_hf_dict(architectures=[architecture(tree)], dtype=dtype)
    config["tie_word_embeddings"] = not tree.has_untied_decoder
    (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    written.append(directory / CONFIG_FILE)
    return written


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
