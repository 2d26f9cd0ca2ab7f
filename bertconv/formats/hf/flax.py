"""Hugging Face Flax models of the BERT family: the `flax_model.msgpack` that transformers 4.x's
`save_pretrained` writes for its Flax classes of BERT, RoBERTa, XLM-RoBERTa, ALBERT, ELECTRA and
DistilBERT (pre-training, masked-LM, base and task models), single or sharded. transformers 5 no
longer reads them. Each family's names are its `FlaxLayout` (formats/hf/flax_tables.py); 4.57 has
no Flax CamemBERT, so `--to hf-flax` refuses one.

The file is flax's msgpack encoding of the nested parameter dict (containers/msgpack_file.py).
Joined with '/', its paths are `bert/embeddings/word_embeddings/embedding`,
`bert/encoder/layer/0/attention/self/query/kernel`, `cls/predictions/bias`, ...; the base
model's files (FlaxBertModel, ...) drop the `bert/` level. The top-level keys say the family (a
base model's file, whose keys every family shares, is the config's family, or the one whose
table knows the most of its names); a config naming another family is refused, and so is a file
of a family bertconv does not read, naming its keys. Any dtype flax stores (float32, float16,
bfloat16) is read as is.

Sharded (`flax_model.msgpack.index.json`, `weight_map`: joined path -> shard): each shard is a
msgpack file of its part of the nested dict.

Writing (`--to hf-flax`): one `flax_model.msgpack` holding the parameters in the order
transformers' Flax model creates them, byte-identical to its `save_pretrained` for the same
values, with `config.json`.
"""

from __future__ import annotations

import re
from pathlib import Path

from ... import json_text
from ...config import BertConfig
from ...containers import msgpack_file
from ...errors import bad_input
from ...tree import ParameterTree
from . import files as hf_files
from ..assemble import Entry, assemble
from .classes import is_base_model
from .flax_tables import LAYOUTS, NO_FLAX_MODEL, TOP_KEYS, FlaxLayout
from .tf_tables import expanded_rows, layout_for_tree
from ..table import refuse_unwritten

FORMAT = "hf-flax-msgpack"
FLAX_FILE = "flax_model.msgpack"
INDEX_FILE = FLAX_FILE + hf_files.INDEX_SUFFIX
#: The files `candidates` looks for in a directory, the index first (it stands for its shards).
DIRECTORY_FILES = (INDEX_FILE, FLAX_FILE)
#: transformers' shard files: `flax_model-00001-of-00002.msgpack`.
_SHARD_FILE = re.compile(r"flax_model-\d+-of-\d+\.msgpack")
#: BERT's table, which tests use.
TABLE = LAYOUTS["bert"].table
#: The families this module writes (`convert` refuses a tree of any other, saying why for these).
WRITES_FAMILIES = tuple(LAYOUTS)
REFUSED_FAMILIES = NO_FLAX_MODEL


# --- finding the files ----------------------------------------------------------------------


def candidates(directory: Path) -> list[Path]:
    """The Flax checkpoints a directory holds: the shard index, or `flax_model.msgpack`."""
    return [directory / name for name in DIRECTORY_FILES if (directory / name).is_file()]


def sniff(path: Path) -> str | None:
    """FORMAT for a shard index whose shards are `.msgpack`, or a file that starts as a flax
    parameter dict: of a family read here (a msgpack map whose first key is one of TOP_KEYS), or
    of any model under transformers' file names; else None."""
    path = Path(path)
    if path.name.endswith(hf_files.INDEX_SUFFIX):
        return FORMAT if hf_files.index_shards_end_with(path, ".msgpack") else None
    named = path.name == FLAX_FILE or _SHARD_FILE.fullmatch(path.name)
    return FORMAT if msgpack_file.looks_like_flax_msgpack(path, None if named else TOP_KEYS) else None


# --- reading --------------------------------------------------------------------------------


def read(path: Path, *, config_path: Path | None = None, num_heads: int | None = None) -> ParameterTree:
    """Read a `flax_model.msgpack` or its shard index into a canonical tree.

    Walks the file's structure (keys, array headers); no tensor data is read.
    """
    path = Path(path)
    if path.name.endswith(hf_files.INDEX_SUFFIX):
        mapping = hf_files.weight_map(path)
        files = list(dict.fromkeys(mapping.values()))
        entries = [entry for shard in files for entry in _entries(shard)]
        found = {(entry.file, entry.name) for entry in entries}
        for name, shard in mapping.items():
            if (shard, name) not in found:
                raise bad_input(path, f"weight_map puts {name!r} in {shard.name}, but that shard does not hold it")
    else:
        files, entries = [path], _entries(path)
    config = hf_files.config_beside(path, config_path)
    names = [entry.name for entry in entries]
    layout = layout_of(path, names, config)
    _refuse_computed_positions(path, config_path, layout, names)
    return assemble(
        format_name=FORMAT, path=path, entries=entries, table=layout.table, config=config,
        default_activation=hf_files.DEFAULT_ACTIVATION, num_heads=num_heads, files=files,
        vocab=hf_files.vocab_beside(path), rename=_renamer(path, layout, config, names), family=layout.model_type,
    )


def layout_of(path: Path, names: list[str], config: BertConfig | None) -> FlaxLayout:
    """The family layout whose base or head keys the file's top-level keys are; for a base model's
    file, the config's family, else the layout whose table matches the most names. A file of no
    family read here, or with a top-level key none has, is refused, naming its keys."""
    keys = {name.split("/", 1)[0] for name in names}
    if not keys & TOP_KEYS or keys - TOP_KEYS:  # RoFormer's `roformer` beside BERT's `cls`: not BERT
        raise bad_input(path, f"a Flax model whose top-level keys are {', '.join(sorted(keys)) or 'none'}; hf-flax "
                              f"reads the families {', '.join(LAYOUTS)} (top-level keys "
                              f"{', '.join(layout.base for layout in LAYOUTS.values())}, or a base model's "
                              f"embeddings and encoder)")
    found = [layout for layout in LAYOUTS.values() if keys & {layout.base, *layout.head_keys}] or list(LAYOUTS.values())
    if config is not None:
        chosen = next((layout for layout in found if layout.model_type == config.model_type), None)
        if chosen is not None:
            return chosen
    return max(found, key=lambda layout: sum(layout.table.match(_renamer(path, layout, config, names)(name)) is not None
                                             for name in names))


def _refuse_computed_positions(path: Path, config_path: Path | None, layout: FlaxLayout, names: list[str]) -> None:
    """A Flax model whose config says its positions are computed (DistilBERT's
    `sinusoidal_pos_embds`) stores no position table: it computes fixed sinusoids
    (FlaxEmbeddings), which bertconv does not; such a file is refused."""
    key = layout.computed_positions_key
    if key is None or any(name.endswith("position_embeddings/embedding") for name in names):
        return
    config_file = config_path or Path(path).parent / hf_files.CONFIG_FILE
    try:
        computed = json_text.loads(Path(config_file).read_text(encoding="utf-8")).get(key)
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return  # no readable config: the missing table is reported as any missing parameter is
    if computed:
        raise bad_input(path, f"a Flax DistilBERT with {key}: it stores no position table and "
                              "computes fixed sinusoidal positions, which bertconv does not compute; load it with "
                              "transformers 4.57 and save it from PyTorch, whose file holds the table")


def _renamer(path: Path, layout: FlaxLayout, config: BertConfig | None, names: list[str]):
    """File path -> the layout table's spelling: the base level added where a base model's file
    lacks it, grouped stored layers (ALBERT) flat."""
    groups = layout.layer_groups
    if groups is None:
        return layout.with_base
    inner = (config.inner_group_num or 1) if config is not None and config.shares_layers else groups.inner_count(names)
    return lambda name: groups.flatten(path, layout.with_base(name), inner)


def _entries(file: Path) -> list[Entry]:
    return [Entry("/".join(array.path), array.tensor, file) for array in msgpack_file.read_file(file)]


# --- writing --------------------------------------------------------------------------------


def arrays_to_write(tree: ParameterTree) -> list[tuple[tuple[str, ...], object]]:
    """(key path, lazy tensor) of every parameter a Flax file of `tree` holds, in creation order.

    Tied copies are not written; an untied decoder is (transposed to `[H, V]`). Its own bias
    has no place in transformers' Flax models (their heads apply one output bias).
    """
    if tree.conditional:
        raise bad_input(tree.path, "conditional LayerNorm (bert4keras layer_norm_cond) has no Hugging Face "
                                   "equivalent; convert it --to bert4keras instead")
    layout, _ = layout_for_tree(tree, LAYOUTS, "hf-flax")
    if tree.has_untied_decoder_bias:
        raise bad_input(tree.path, f"has an untied decoder with a bias of its own ({tree['mlm.decoder_bias'].source} "
                                   f"differs from the output bias); transformers' Flax {layout.model_type} applies "
                                   f"one bias only")
    prefix = layout.base + "/" if is_base_model(tree) else ""
    arrays, written = [], set()
    for row in expanded_rows(layout.rows, tree, layout.layer_groups):
        if row.canonical not in tree or not tree.is_counted(row.canonical):
            continue
        name = row.name.removeprefix(prefix) if prefix else row.name
        arrays.append((tuple(name.split("/")), row.layout.to_format(tree[row.canonical].tensor)))
        written.add(row.canonical)
    refuse_unwritten(tree, written, f"transformers' Flax {layout.model_type}")
    return arrays


def write(tree: ParameterTree, directory: Path, *, options) -> list[Path]:
    """Write `tree` as `flax_model.msgpack` + `config.json` into the new `directory`.

    `options` is a `conversion.WriteOptions` (on_tensor).
    """
    arrays = arrays_to_write(tree)
    target = Path(directory) / FLAX_FILE
    msgpack_file.write_file(target, arrays, on_tensor=options.on_tensor)
    dtype = tree["embeddings.word"].tensor.dtype.name if "embeddings.word" in tree else arrays[0][1].dtype.name
    return [target, *hf_files.write_config(tree, Path(directory), dtype=dtype)]
