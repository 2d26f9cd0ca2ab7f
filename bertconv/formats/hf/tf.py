"""Hugging Face TensorFlow models of the BERT family: the `tf_model.h5` that transformers 4.x's
`save_pretrained` writes for its TF classes of BERT, RoBERTa, XLM-RoBERTa, CamemBERT, ALBERT,
ELECTRA and DistilBERT (pre-training, masked-LM, base and task models), single or sharded.
transformers 5 no longer reads them. Each family's names are its `TfLayout` (formats/hf/tf_tables.py).

A single `tf_model.h5` is Keras 2 HDF5 (`model.save_weights`): the root `layer_names` lists the
model's main layers (`bert`, `nsp___cls`, `mlm___cls`; `roberta`, `lm_head`; ...), each a group
whose `weight_names` start with the model's name: `tf_bert_for_pre_training/bert/embeddings/
word_embeddings/weight:0`. transformers matches weights by that name minus the model's (which
varies: `tf_bert_model`, `tf_bert_for_pre_training_1` for a second model in one session), and so
do the tables. The main layer says the family; a config naming another family is refused, and
so is a transformers model of a family bertconv does not read, naming its main layers.

The head that ties the decoder to the word embeddings (`mlm___cls`, `lm_head`, `predictions`,
`generator_lm_head`, `vocab_projector`) holds the embeddings layer, so its group lists the embedding
weights again (`tf_bert_for_pre_training/bert/embeddings/...`), stored a second time under it. Both
copies load into the one variable: transformers 4.57's `load_tf_weights_from_h5` walks
`model.layers` in order (base model first, then the heads) and `batch_set_value` assigns in that
order, so the head's copies win, and the model computes with them for the input embeddings and the
decoder alike. They are what this reader reads; the base model's copies are ignored entries that
name the parameter they copy (`Ignored.copy_of`), which `checks.copies` compares by value for the
notes of inspect and convert and the problems of verify. A weight a head stores but never computes
with (TF ALBERT's `predictions/bias:0`) is such an ignored copy too.

Sharded (`tf_model.h5.index.json`, `weight_map`: full name -> shard): each shard's root
`layer_names` lists its datasets by name minus the model's (`bert/encoder/layer_._0/...`), each
weight once (the held copies are not written again).

Header-only: reading lists datasets and their offsets; no tensor data is read until asked.

Writing (`--to hf-tf`): one `tf_model.h5` laid out as `save_pretrained` writes it for the class
that has the tree's heads (TFBertForPreTraining, TFRobertaForMaskedLM, TFAlbertModel,
TFElectraForPreTraining, ...), with `config.json`. TF ties the decoder by construction: an
untied decoder is refused unless dropped. Keras HDF5 has no bfloat16: bfloat16 tensors are
widened (exactly) to float32.
"""

from __future__ import annotations

import re
from pathlib import Path

from ...config import BertConfig
from ...containers.hdf5 import keras as keras_h5, keras_listing
from ...dtypes import BFLOAT16
from ...errors import bad_input
from ...lazy import lazy_module
from ...tensor import Bfloat16Widened, LazyTensor
from ...tree import Ignored, ParameterTree, canonical_names
from . import files as hf_files
from ..assemble import Entry, assemble
from .tf_tables import LAYOUTS, MAIN_LAYERS, Copy, TfLayout, expanded_rows, keras_model_name, layout_for_tree
from ..table import (
    UNTIED_DECODER,
    refuse_sentence_head_without_pooler,
    refuse_untied_decoder,
    refuse_unwritten,
)

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from ...containers.hdf5 import keras_write as keras_h5_write
    from ...containers.hdf5.keras_write import LayerToWrite
else:  # imported on first use: reading a tf_model.h5 writes nothing
    keras_h5_write = lazy_module("bertconv.containers.hdf5.keras_write")

FORMAT = "hf-tf-h5"
TF_FILE = "tf_model.h5"
INDEX_FILE = TF_FILE + hf_files.INDEX_SUFFIX
#: The files `candidates` looks for in a directory, the index first (it stands for its shards).
DIRECTORY_FILES = (INDEX_FILE, TF_FILE)
#: transformers' shard files: `tf_model-00001-of-00002.h5`.
_SHARD_FILE = re.compile(r"tf_model-\d+-of-\d+\.h5")
#: What the writer records as the file's producer: the layout is tf-keras 2.21's.
BACKEND = "tensorflow"
KERAS_VERSION = "2.21.0"
#: BERT's layer names and table, which tests and the other BERT modules use.
BERT, MLM, NSP = "bert", "mlm___cls", "nsp___cls"
HELD = MLM + "/"
EMBEDDING_ROWS = LAYOUTS["bert"].embedding_rows
TABLE = LAYOUTS["bert"].table
#: The families this module writes (`convert` refuses a tree of any other).
WRITES_FAMILIES = tuple(LAYOUTS)
OVERWRITTEN_REASON = ("the base model's copy of an embedding weight; TensorFlow (transformers 4.x) loads the "
                      "head's copy {copy} over it and computes with that one")


# --- finding the files ----------------------------------------------------------------------


def candidates(directory: Path) -> list[Path]:
    """The TF checkpoints a directory holds: `tf_model.h5.index.json` (for its shards) or
    `tf_model.h5`."""
    return [directory / name for name in DIRECTORY_FILES if (directory / name).is_file()]


def sniff(path: Path) -> str | None:
    """FORMAT for a shard index whose shards are `.h5`, or a Keras 2 HDF5 file that transformers'
    names (`tf_model.h5`, its shards) or whose layers are a family's main layers (`bert`,
    `mlm___cls`, `roberta`, ..., or a shard's datasets under them); None otherwise. Must be
    tried before the bert4keras sniffer, which claims every Keras 2 HDF5 file, and the Hugging
    Face one, which claims every `*.index.json`."""
    path = Path(path)
    if path.name.endswith(hf_files.INDEX_SUFFIX):
        return FORMAT if hf_files.index_shards_end_with(path, ".h5") else None
    if keras_listing.layout(path) != "keras2":
        return None
    if path.name == TF_FILE or _SHARD_FILE.fullmatch(path.name):
        return FORMAT
    names = keras_listing.layer_names(path)
    return FORMAT if any(name.split("/", 1)[0] in MAIN_LAYERS for name in names) else None


# --- reading --------------------------------------------------------------------------------


def read(path: Path, *, config_path: Path | None = None, num_heads: int | None = None) -> ParameterTree:
    """Read a `tf_model.h5` or its shard index into a canonical tree (headers only)."""
    path = Path(path)
    if path.name.endswith(hf_files.INDEX_SUFFIX):
        entries, files = _sharded_entries(path)
    elif _is_shard(path):
        entries, files = _shard_entries(path), [path]
    else:
        entries, files = _single_entries(path), [path]
    config = hf_files.config_beside(path, config_path)
    layout = layout_of(path, [entry.name for entry in entries], config)
    entries, ignored = _held_copies_win(layout, entries)
    entries, copies = _unread_copies(layout, entries)
    return assemble(
        format_name=FORMAT, path=path, entries=entries, table=layout.table, config=config,
        default_activation=hf_files.DEFAULT_ACTIVATION, num_heads=num_heads, files=files,
        vocab=hf_files.vocab_beside(path), extra_ignored=ignored + copies,
        rename=_renamer(path, layout, config, [entry.name for entry in entries]), family=layout.model_type,
    )


def layout_of(path: Path, names: list[str], config: BertConfig | None) -> TfLayout:
    """The family layout whose main layer the file's names start with; among families sharing it,
    the config's. A file of no family read here is refused, naming its layers."""
    layers = {name.split("/", 1)[0] for name in names}
    found = [layout for layout in LAYOUTS.values() if layout.base in layers]
    if not found:
        raise bad_input(path, f"a transformers TF model whose main layers are {', '.join(sorted(layers)) or 'none'}; "
                              f"hf-tf reads the families {', '.join(LAYOUTS)} (main layers "
                              f"{', '.join(layout.base for layout in LAYOUTS.values())})")
    if config is not None:
        return next((layout for layout in found if layout.model_type == config.model_type), found[0])
    return found[0]


def _renamer(path: Path, layout: TfLayout, config: BertConfig | None, names: list[str]):
    """File name -> the layout table's spelling: the holding head's copies under the base
    model's names, grouped stored layers (ALBERT) flat."""
    held = f"{layout.holder}/{layout.base}/embeddings/" if layout.holder else None

    def unheld(name: str) -> str:
        return name.removeprefix(layout.holder + "/") if held and name.startswith(held) else name

    groups = layout.layer_groups
    if groups is None:
        return unheld
    inner = (config.inner_group_num or 1) if config is not None and config.shares_layers else groups.inner_count(names)
    return lambda name: groups.flatten(path, unheld(name), inner)


def _held_copies_win(layout: TfLayout, entries: list[Entry]) -> tuple[list[Entry], list[Ignored]]:
    """The entries the model computes with, and the base model's embedding weights the holding
    head's copies overwrite at load (module docstring), as ignored copies of their parameter."""
    if layout.holder is None:
        return entries, []
    prefix = layout.holder + "/"
    held = {entry.name.removeprefix(prefix) for entry in entries if entry.name.startswith(prefix)}
    canonical = {row.name: row.canonical for row in layout.embedding_rows}
    kept, overwritten = [], []
    for entry in entries:
        if entry.name in canonical and entry.name in held:
            overwritten.append(_ignored_copy(entry, canonical[entry.name],
                                             OVERWRITTEN_REASON.format(copy=prefix + entry.name)))
        else:
            kept.append(entry)
    return kept, overwritten


def _unread_copies(layout: TfLayout, entries: list[Entry]) -> tuple[list[Entry], list[Ignored]]:
    """The entries, less the weights a head stores but never computes with (`Copy`), which are
    ignored copies of the parameter whose values they hold."""
    kept, copies = [], []
    for entry in entries:
        copy: Copy | None = layout.copies.get(entry.name)
        if copy is None:
            kept.append(entry)
        else:
            copies.append(_ignored_copy(entry, copy.canonical, copy.reason))
    return kept, copies


def _ignored_copy(entry: Entry, canonical: str, reason: str) -> Ignored:
    tensor = entry.tensor
    return Ignored(entry.name, reason, tensor.numel, str(tensor.dtype), tuple(tensor.shape), copy_of=canonical,
                   tensor=tensor)


def _is_shard(path: Path) -> bool:
    """A shard lists datasets by path in `layer_names` (`bert/...:0`); a whole file lists layers."""
    return any("/" in name for name in keras_listing.layer_names(path))


def _single_entries(path: Path) -> list[Entry]:
    weights_file = keras_h5.read_layers_unexpanded(path)
    entries = []
    for layer in weights_file.layers:
        for weight in layer.weights:
            model_name, _, key = weight.name.partition("/")
            if not model_name or not key:
                raise bad_input(path, f"layer {layer.name!r} weight {weight.name!r}: transformers names every "
                                      f"weight <model name>/<layer>/..., this one has no model name")
            # A weight another layer owns (the embeddings a head holds) is named under this one.
            owned = key.startswith(layer.name + "/")
            entries.append(Entry(key if owned else f"{layer.name}/{key}", weight.tensor, path))
    for weight in weights_file.extra:
        entries.append(Entry(weight.name, weight.tensor, path))
    return entries


def _shard_entries(shard: Path) -> list[Entry]:
    return [Entry(weight.name, weight.tensor, shard) for weight in keras_h5.read_listed_datasets(shard)]


def _sharded_entries(index_path: Path) -> tuple[list[Entry], list[Path]]:
    mapping = hf_files.weight_map(index_path)
    shards = list(dict.fromkeys(mapping.values()))
    entries = [entry for shard in shards for entry in _shard_entries(shard)]
    found = {(entry.file, entry.name) for entry in entries}
    for full_name, shard in mapping.items():
        name = full_name.partition("/")[2] or full_name
        if (shard, name) not in found:
            raise bad_input(index_path, f"weight_map puts {full_name!r} in {shard.name}, but that shard holds no "
                                        f"dataset {name!r}")
    return entries, shards


# --- writing --------------------------------------------------------------------------------


def layers_to_write(tree: ParameterTree, *, drop_untied_decoder: bool = False) -> list[LayerToWrite]:
    """The main layers of the transformers TF model for `tree`'s heads, in `model.layers` order,
    each with its weights named and ordered as `save_weights` writes them."""
    layout, architecture = layout_for_tree(tree, LAYOUTS, "hf-tf")
    refuse_sentence_head_without_pooler(tree, ("nsp", "sop"), "transformers' TF sentence head sits on the pooler, "
                                                              "so it cannot be written --to hf-tf")
    refuse_untied_decoder(tree, drop_untied_decoder, f"transformers' TF {layout.model_type} ties the decoder to the "
                                                     f"word embeddings by construction")
    model = keras_model_name("TF" + architecture)
    required = set(canonical_names(tree.config, tree.heads))
    written: set[str] = set()
    missing: list[str] = []

    def weights(rows, *, held: bool = False) -> list[tuple[str, LazyTensor]]:
        out = []
        for row in rows:
            if row.canonical not in tree:
                if row.canonical in required:
                    missing.append(row.canonical)
                continue
            tensor = tree[row.canonical].tensor
            out.append((f"{model}/{row.name}", Bfloat16Widened(tensor) if tensor.dtype is BFLOAT16 else tensor))
            if not held and not isinstance(row, Copy):
                written.add(row.canonical)
        return out

    base_weights = weights(expanded_rows(layout.base_rows, tree, layout.layer_groups))
    layers = [keras_h5_write.LayerToWrite(layout.base, tuple(base_weights))]
    for head in layout.heads:
        if getattr(tree.heads, head.head):
            # A head holding the embeddings layer lists its weights after its own.
            held = weights(layout.embedding_rows, held=True) if head.holds_embeddings else []
            layers.append(keras_h5_write.LayerToWrite(head.layer, tuple(weights(head.rows) + held)))
    if missing:
        raise bad_input(tree.path, f"cannot write --to hf-tf: missing {', '.join(sorted(set(missing)))}")
    refuse_unwritten(tree, written, f"transformers' TF {layout.model_type}",
                     dropped=UNTIED_DECODER if drop_untied_decoder else frozenset())
    return layers


def write(tree: ParameterTree, directory: Path, *, options) -> list[Path]:
    """Write `tree` as `tf_model.h5` + `config.json` into the new `directory`.

    `options` is a `conversion.WriteOptions` (drop_untied_decoder, on_tensor).
    """
    if tree.conditional:
        raise bad_input(tree.path, "conditional LayerNorm (bert4keras layer_norm_cond) has no Hugging Face "
                                   "equivalent; convert it --to bert4keras instead")
    layers = layers_to_write(tree, drop_untied_decoder=options.drop_untied_decoder)
    target = Path(directory) / TF_FILE
    keras_h5_write.write_weights_file(target, layers, backend=BACKEND, keras_version=KERAS_VERSION,
                                on_tensor=options.on_tensor)
    word = tree["embeddings.word"].tensor.dtype if "embeddings.word" in tree else layers[0].weights[0][1].dtype
    dtype = "float32" if word is BFLOAT16 else word.name  # bfloat16 was widened
    return [target, *hf_files.write_config(tree, Path(directory), dtype=dtype)]
