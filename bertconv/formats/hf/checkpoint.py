"""Hugging Face state dicts of the BERT family: `model.safetensors`, `pytorch_model.bin`, sharded sets.

The family's table (`tables.py`) is chosen on reading by the names a family's modules give its
tensors or by config.json's `model_type`, and on writing by the tree's `config.model_type`.
A tied decoder is not stored by `save_pretrained`; where a file stores it anyway, it is read as a
copy of the word embeddings (by storage identity in a `.bin`, by value in `verify`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ...config import BertConfig
from ...containers import safetensors_file
from ...errors import bad_input
from ...lazy import lazy_module
from ...records import replace
from ...tree import Ignored, ParameterTree
from . import files as hf_files
from . import head_layouts
from ..assemble import Entry, assemble
from ..configs import config_beside
from .classes import transformers_5_caveats as write_caveats  # noqa: F401 (the registry's)
from .classes import is_base_model
from .tables import FAMILIES, ROTARY_BUFFER, SINUSOID_TABLE, Family, family_of_names
from .tables import WRITES_FAMILIES  # noqa: F401 (the registry's)
from ..table import Table

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from ...containers import stream, torch_pickle
    from ...containers.stream import TensorSource
else:  # imported on first use: a safetensors checkpoint needs no zipfile or pickle machinery,
    # and reading one no writer
    torch_pickle = lazy_module("bertconv.containers.torch_pickle")
    stream = lazy_module("bertconv.containers.stream")

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
#: Families transformers has no class of, and why `--to hf` refuses them.
REFUSED_FAMILIES = {"roformer_v2": "transformers has no RoFormer-v2 class, and its RoFormer (RoFormerForMaskedLM) "
                                   "computes biases, centred LayerNorms with a scale and a shift, and an MLM "
                                   "transform: another function"}
VOCAB_FILE = "vocab.txt"
#: The files of a Hugging Face checkpoint directory (what `convert --force` may replace).
OWNED_FILES = ("model.safetensors", "model-*-of-*.safetensors", "model.safetensors.index.json",
               "pytorch_model.bin", "pytorch_model-*-of-*.bin", "pytorch_model.bin.index.json",
               CONFIG_FILE, "generation_config.json")
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
        return SAFETENSORS if hf_files.index_shards_end_with(path, ".safetensors") else PYTORCH_BIN
    if safetensors_file.looks_like_safetensors(path):
        return SAFETENSORS
    if torch_pickle.looks_like_torch(path):
        return PYTORCH_BIN
    return None


# --- reading --------------------------------------------------------------------------------


def read(path: Path, *, config_path: Path | None = None, num_heads: int | None = None) -> ParameterTree:
    """Read a Hugging Face checkpoint file (or shard index) of the BERT family into a canonical tree.

    The family's table is the one its names mark (`family_of_names`), else the one config.json's
    `model_type` names, else BERT's; a config naming another family than the names is refused.
    """
    path = Path(path)
    if path.name.endswith(INDEX_SUFFIX):
        shard_files = list(dict.fromkeys(hf_files.weight_map(path).values()))
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
    layout = family.layout_of(names)  # the head layout the names hold (DeBERTa-v2 has two)
    table = layout.table if layout is not None else family.table
    ignored = [item for file, checkpoint in checkpoints
               for item in _non_tensors(file, checkpoint, table, rename)]
    vocab = path.parent / VOCAB_FILE
    tree = assemble(
        format_name=format_name or SAFETENSORS, path=path, entries=entries, table=table, config=config,
        default_activation=DEFAULT_ACTIVATION, num_heads=num_heads, files=shard_files,
        vocab=vocab if vocab.is_file() else None, rename=rename, extra_ignored=ignored,
        family=family.model_type,
    )
    stored = {entry.name: entry.tensor for entry in entries}
    tree.ignored = [check_rotary_buffer(tree, item, stored) for item in tree.ignored]
    tree.ignored = [_check_sinusoid_table(tree, item, stored) for item in tree.ignored]
    return head_layouts.settled(tree, layout)


def check_rotary_buffer(tree: ParameterTree, item: Ignored, stored: dict) -> Ignored:
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


def _check_sinusoid_table(tree: ParameterTree, item: Ignored, stored: dict) -> Ignored:
    """RoFormer's stored sinusoids as set aside, or, where they are not the config's (another shape,
    or values other than their rounding to the stored dtype), unread: transformers rotates by them."""
    if item.reason != SINUSOID_TABLE:
        return item
    import numpy as np  # noqa: PLC0415 (a RoFormer's only)

    from ...runtime.sinusoids import roformer_position_table  # noqa: PLC0415

    tensor = stored[item.name]
    computed = roformer_position_table(tree.config.max_position_embeddings, tree.config.head_size)
    rounding = {"float32": np.float32, "float16": np.float16}.get(tensor.dtype.name)
    if tuple(tensor.shape) == computed.shape and rounding is not None and np.array_equal(
            tensor.read(), computed.astype(rounding)):
        return item
    return replace(item, reason=f"rotary sinusoids that differ from the config's (max_position_embeddings "
                                f"{tree.config.max_position_embeddings}, head width {tree.config.head_size}, "
                                f"[P, D]): transformers rotates by the stored ones, bertconv would not", unread=True)


def _sinusoid_source(tree: ParameterTree, family: Family, encoder_only: bool) -> list:
    """The family's frozen sinusoid table, as transformers saves it beside the parameters (RoFormer's
    [P, D], in the word embeddings' float16 or else float32), computed from the config."""
    if family.sinusoid_table is None:
        return []
    from ...dtypes import from_numpy  # noqa: PLC0415
    from ...runtime.sinusoids import roformer_position_table  # noqa: PLC0415
    from ...tensor import ArrayTensor  # noqa: PLC0415

    table = roformer_position_table(tree.config.max_position_embeddings, tree.config.head_size)
    if tree["embeddings.word"].tensor.dtype.name == "float16":
        table = table.astype("float16")
    name = family.sinusoid_table.removeprefix(family.base + ".") if encoder_only else family.sinusoid_table
    tensor = ArrayTensor(table, from_numpy(table.dtype))
    return [(name, tensor.dtype, tensor.shape, tensor)]


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


# --- writing --------------------------------------------------------------------------------


def _family(tree: ParameterTree) -> Family:
    family = FAMILIES.get(tree.config.model_type)
    if family is None:
        raise bad_input(tree.path, f"a {tree.config.model_type} model has no Hugging Face table here; "
                                   f"this writer writes {', '.join(FAMILIES)}")
    return family


def tensors_to_write(tree: ParameterTree) -> list[TensorSource]:
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
    if family.rotary_buffer and tree.config.position_embedding_type == "rotary":
        sources.append(_rotary_buffer(tree, family.rotary_buffer.removeprefix(family.base + ".") if encoder_only
                                      else family.rotary_buffer))
    return sources + _sinusoid_source(tree, family, encoder_only)


def _rotary_buffer(tree: ParameterTree, name: str) -> TensorSource:
    """The inverse frequencies `save_pretrained` writes, float32 [D / 2], from the config (a stored
    buffer of other values is unread: `check_rotary_buffer`)."""
    from ...runtime.positions import inverse_frequencies  # noqa: PLC0415 (a rotary model's only)
    from ...tensor import ArrayTensor  # noqa: PLC0415
    from ... import dtypes  # noqa: PLC0415

    values = inverse_frequencies(tree.config.rope_theta, tree.config.head_size)
    return name, dtypes.FLOAT32, values.shape, ArrayTensor(values, dtypes.FLOAT32)


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
        index = {"metadata": {"total_parameters": parameters, "total_size": sum(stream.nbytes_of(s) for s in sources)},
                 "weight_map": weight_map}
        target = directory / (SAFETENSORS_FILE + INDEX_SUFFIX)
        target.write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
        written.append(target)
    dtype = tree["embeddings.word"].tensor.dtype.name if "embeddings.word" in tree else "float32"
    return written + hf_files.write_config(tree, directory, dtype=dtype)


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
        nbytes = stream.nbytes_of(source)
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
