"""Hugging Face BERT state dicts: `model.safetensors`, `pytorch_model.bin`, and sharded sets.

Layout: `nn.Linear` weights are `[out, in]`, the transpose of canonical kernels; embeddings are
row tables as in the canonical tree. Encoder-only (`BertModel`) files drop the `bert.` prefix.
A tied decoder is not stored by `save_pretrained`; where a file stores it anyway, it is read as a
copy of the word embeddings (by storage identity in a `.bin`, by value in `verify`).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

from ..config import BertConfig, load_config_file
from ..containers import safetensors_file, torch_pickle
from ..errors import bad_input
from ..tree import ParameterTree
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


def _with_prefix(name: str) -> str:
    """Encoder-only (`BertModel`) files name `embeddings.*`, not `bert.embeddings.*`."""
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
    for shard in shard_files:
        entries.extend(_entries(shard, path))
    config = _config(path, config_path)
    vocab = path.parent / VOCAB_FILE
    return assemble(
        format_name=format_name or SAFETENSORS, path=path, entries=entries, table=TABLE, config=config,
        default_activation=DEFAULT_ACTIVATION, num_heads=num_heads, files=shard_files,
        vocab=vocab if vocab.is_file() else None, rename=_with_prefix,
    )


def _entries(file: Path, origin: Path) -> list[Entry]:
    if safetensors_file.looks_like_safetensors(file):
        header = safetensors_file.read_header(file)
        return [Entry(name, tensor, file) for name, tensor in header.tensors.items()]
    if torch_pickle.looks_like_torch(file):
        checkpoint = torch_pickle.read_checkpoint(file)
        return [Entry(name, tensor, file, identity=checkpoint.identities[name])
                for name, tensor in checkpoint.tensors.items()]
    raise bad_input(file, "neither a safetensors file nor a torch checkpoint")


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
    `model.safetensors.index.json`. `options` is a `convert.WriteOptions`.
    """
    max_shard_bytes = options.max_shard_bytes or DEFAULT_MAX_SHARD_BYTES
    on_tensor = options.on_tensor
    sources = tensors_to_write(tree)
    shards = _split(safetensors_file.plan(sources), max_shard_bytes)
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
        total = sum(_nbytes(s) for s in sources)
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        target = directory / (SAFETENSORS_FILE + INDEX_SUFFIX)
        target.write_text(json.dumps(index, indent=2) + "\n")
        written.append(target)
    dtype = tree["embeddings.word"].tensor.dtype.name if "embeddings.word" in tree else "float32"
    config = tree.config.to_hf_dict(architectures=[architecture(tree)], dtype=dtype)
    config["tie_word_embeddings"] = not tree.has_untied_decoder
    (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    written.append(directory / CONFIG_FILE)
    if tree.vocab is not None:
        shutil.copyfile(tree.vocab, directory / VOCAB_FILE)
        written.append(directory / VOCAB_FILE)
    return written


def _nbytes(source: safetensors_file.TensorSource) -> int:
    _, dtype, shape, _ = source
    return math.prod(shape) * dtype.itemsize


def _split(ordered: list, max_bytes: int) -> list[list]:
    """Greedy shards in write order, each under `max_bytes` unless one tensor alone exceeds it."""
    shards: list[list] = [[]]
    size = 0
    for source in ordered:
        nbytes = _nbytes(source)
        if shards[-1] and size + nbytes > max_bytes:
            shards.append([])
            size = 0
        shards[-1].append(source)
        size += nbytes
    return shards
