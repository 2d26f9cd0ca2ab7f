"""`convert --to keras-hub`: a preset directory that keras-hub 0.32's `from_preset` loads, as its
`save_to_preset` writes one (keras_hub/src/utils/preset_utils.py `KerasPresetSaver`):
config.json, metadata.json, model.weights.h5 and, for a model with its MLM head, task.json and
task.weights.h5; the backbone in shards past `--max-shard-size` (model.weights.json and
model_00000.weights.h5, ..., as `save_to_preset(max_shard_size=...)` writes them); with the
source's vocabulary, its tokenizer's assets, tokenizer.json and preprocessor.json (the task's
preprocessor), so that the preset tokenizes too.

keras-hub's code fixes what transformers' configs state: its BERT runs a tanh-GELU encoder under
an erf-GELU head, every head normalizes with epsilon 1e-5. A source computed otherwise reads back
with other values of those fields, which `convert` refuses unless the loss is accepted by name.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ...destination import companions
from ...containers.hdf5.keras3_shards import total_bytes, write_sharded
from ...containers.hdf5.keras3_write import Keras3Object, write_keras3_file
from ...records import replace
from . import positions as hub_positions
from .deberta import caveats as relative_caveats, refuse_unrepresented
from ...errors import bad_input
from ...tensor import ArrayTensor, LazyTensor, ReshapedTensor
from ...tree import ParameterTree, role_of
from .table import (
    CONFIG_FILE,
    FAMILIES,
    HEADWISE,
    METADATA_FILE,
    MODEL_WEIGHTS,
    PREPROCESSOR_FILE,
    SHARDED_INDEX,
    TASK_FILE,
    TASK_WEIGHTS,
    TOKENIZER_ASSETS,
    TOKENIZER_FILE,
    KerasHubFamily,
)
from ..table import Table, refuse_unwritten

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

#: The keras-hub release whose layout this writes (metadata.json states it).
KERAS_HUB_VERSION = "0.32.0"
#: The backbone's weights past this many bytes are sharded (`--max-shard-size`; Hugging Face's default).
DEFAULT_MAX_SHARD_BYTES = 5 * 10**9
#: What a masked LM preprocessor masks when training (keras-hub's defaults).
PREPROCESSOR_DEFAULTS = {"sequence_length": 512, "truncate": "round_robin", "mask_selection_rate": 0.15,
                         "mask_selection_length": 96, "mask_token_rate": 0.8, "random_token_rate": 0.1}
_LOWER_CASE_KEY = "do_lower_case"


def write_caveats(tree: ParameterTree) -> list[str]:
    """What the preset computes otherwise than the source: a pooler the source lacks (BERT's,
    ALBERT's and ELECTRA's backbones have one), RoBERTa's positions (`hub_positions`)."""
    family = FAMILIES[tree.config.model_type]
    notes = [*family.caveats, *relative_caveats(tree)]
    if not family.segments:
        notes += hub_positions.caveats(tree, family.position_offset)
    if not family.masked_lm and _heads(tree):
        notes.append(f"the {' and '.join(_heads(tree))} head is not in the preset: keras-hub {KERAS_HUB_VERSION} has "
                     f"{family.backbone} and no task that computes it")
    if not tokenizer_assets(tree, family):
        notes.append(f"the source has no {' and '.join(family.vocabulary.values())}: the preset has no tokenizer "
                     f"(from_preset loads the model without a preprocessor)")
    if not tree.heads.pooler and any(row.canonical.startswith("pooler.") for row in family.table.rows):
        notes.append("the source has no pooler and keras-hub's backbone has one: it is written as zeros (its "
                     "pooled output is 0; no head reads it)")
    return notes


def _dtype_policy(name: str) -> dict[str, Any]:
    return {"module": "keras", "class_name": "DTypePolicy", "config": {"name": name}, "registered_name": None}


def backbone_config(tree: ParameterTree, family: KerasHubFamily, dtype: str) -> dict[str, Any]:
    """config.json: the backbone as Keras serializes it."""
    sizes = {key: getattr(tree.config, field) for key, field in family.config_keys.items()}
    try:  # RoFormer-v2's activation, head size, biases and rotary base
        extra = family.write_extra(tree.config) if family.write_extra else {}
    except ValueError as exc:
        raise bad_input(tree.path, f"{exc}; nothing was written") from None
    return {"module": f"keras_hub.src.models.{family.package}.{family.package}_backbone",
            "class_name": family.backbone,
            "config": {"name": f"{family.package}_backbone", "trainable": True, "dtype": _dtype_policy(dtype),
                       **sizes, "dropout": 0.1, **extra},
            "registered_name": f"keras_hub>{family.backbone}"}


def _objects(tree: ParameterTree, family: KerasHubFamily) -> tuple[list[Keras3Object], list[Keras3Object]]:
    """The backbone's and the task's objects with variables, each variable in creation order."""
    by_path: dict[tuple[str, str], list[tuple[int, LazyTensor]]] = {}
    written = set()
    dtype = tree["embeddings.word"].tensor.dtype
    for row_name, canonical in _rows(tree, family.table_for(tree.config.embedding_projection)):
        if canonical in tree:
            tensor = tree[canonical].tensor
            written.add(canonical)
        elif canonical.startswith("pooler.") or canonical.endswith(".gamma") and not tree.config.norm_scale:
            # keras-hub's backbone always has a pooler (zeros) or, RoFormer-v2's, norm scales (ones).
            import numpy as np

            shape = role_of(canonical).expected_shape(tree.config)
            tensor = ArrayTensor(np.full(shape, canonical.endswith(".gamma"), dtype=dtype.numpy), dtype)
        else:
            continue
        file, _, location = row_name.partition(":")
        group, _, index = location.rpartition("/vars/")
        group = group.replace(f"/{family.encoder_group}_0/", f"/{family.encoder_group}/")
        by_path.setdefault((file, group), []).append((int(index), _keras_shape(row_name, tensor, tree)))
    refuse_unwritten(tree, written, "a keras-hub preset")
    backbone, task = [], []
    for (file, group), variables in by_path.items():
        obj = Keras3Object(group, _object_name(family, group, tree), tuple(t for _, t in sorted(variables)))
        (backbone if file == MODEL_WEIGHTS else task).append(obj)
    return backbone, task


def _rows(tree: ParameterTree, table: Table):
    """(file name, canonical name) of every row, per stored layer."""
    for row in table.rows:
        if "{i}" in row.canonical:
            for i in range(tree.config.stored_layers):
                yield row.name.format(i=i), row.canonical.format(i=i)
        else:
            yield row.name, row.canonical


def _keras_shape(name: str, tensor: LazyTensor, tree: ParameterTree) -> LazyTensor:
    """A canonical attention variable in keras-hub's per-head shape."""
    if not HEADWISE.search(name):
        return tensor
    heads, head_size, hidden = tree.config.num_attention_heads, tree.config.head_size, tree.config.hidden_size
    if "/output_dense/" in name:
        return ReshapedTensor(tensor, (heads, head_size, hidden)) if name.endswith("/0") else tensor
    return ReshapedTensor(tensor, (hidden, heads, head_size) if name.endswith("/0") else (heads, head_size))


_SUBLAYER_NAMES = {"_self_attention_layer/query_dense": "query", "_self_attention_layer/key_dense": "key",
                   "_self_attention_layer/value_dense": "value", "_self_attention_layer/output_dense": "attention_output",
                   "_self_attention_layer_norm": "self_attention_layer_norm",
                   "_feedforward_intermediate_dense": "feedforward_intermediate_dense",
                   "_feedforward_output_dense": "feedforward_output_dense",
                   "_feedforward_layer_norm": "feedforward_layer_norm",
                   "_intermediate_dense": "intermediate_dense", "_intermediate_layer_norm": "intermediate_layer_norm",
                   "token_embedding": "token_embedding", "position_embedding": "position_embedding",
                   # DeBERTa-v3's attention and relative embeddings' LayerNorm
                   "_self_attention_layer/_query_dense": "query", "_self_attention_layer/_key_dense": "key",
                   "_self_attention_layer/_value_dense": "value",
                   "_self_attention_layer/_output_dense": "attention_output", "layer_norm": "rel_embeddings_layer_norm",
                   # RoFormer-v2's encoder
                   **{f"attention_layer/{part}_dense": f"{part}_dense_layer" for part in "qkvo"},
                   "attention_norm": "attention_norm", "feedforward_norm": "feedforward_norm",
                   "feedforward_intermediate_dense": "feedforward_intermediate_dense",
                   "feedforward_output_dense": "feedforward_output_dense"}


def _object_name(family: KerasHubFamily, group: str, tree: ParameterTree) -> str:
    """The Keras name keras-hub gives the object at `group` (the `vars` group's attribute)."""
    parts = group.split("/")[1:]  # below `layers/`
    if len(parts) > 1:
        return _SUBLAYER_NAMES["/".join(parts[1:])]
    layer = parts[0]
    if layer == "masked_lm_head":
        return "mlm_head"
    if layer.startswith(family.encoder_group):
        index = int(layer.rpartition("_")[2]) if layer != family.encoder_group else 0
        return family.encoder_name(index, tree.config.inner_group_num or 1)
    return family.object_names[layer]


def write(tree: ParameterTree, directory: Path, *, options) -> list[Path]:
    """Write `tree` as a keras-hub preset into the new `directory`; the files written."""
    family = FAMILIES[tree.config.model_type]  # `convert` refused any other (the registry's WRITES_FAMILIES)
    directory = Path(directory)
    if tree.conditional:
        raise bad_input(tree.path, "conditional LayerNorm (bert4keras layer_norm_cond) has no keras-hub equivalent")
    if tree.has_untied_decoder:
        raise bad_input(tree.path, f"{tree['mlm.decoder'].source} is an MLM decoder of its own; keras-hub's "
                                   f"{family.task} decodes with the token embedding; nothing was written")
    refuse_unrepresented(tree, family)
    source = tree
    tree = _heads_it_holds(tree, family, getattr(options, "accept_loss", ()))
    if not family.segments:
        tree = hub_positions.to_preset(tree, family.position_offset)
    backbone, task = _objects(tree, family)
    dtype = _one_dtype(tree, backbone + task)
    max_shard_bytes = options.max_shard_bytes or DEFAULT_MAX_SHARD_BYTES
    if total_bytes(backbone) > max_shard_bytes:  # as save_to_preset past its max_shard_size
        written = write_sharded(directory / SHARDED_INDEX, backbone, max_shard_bytes, on_tensor=options.on_tensor)
    else:
        written = [directory / MODEL_WEIGHTS]
        write_keras3_file(directory / MODEL_WEIGHTS, backbone, on_tensor=options.on_tensor)
    config = backbone_config(tree, family, dtype)
    written.append(_write_json(directory / CONFIG_FILE, config))
    parameters = sum(t.numel for obj in backbone for t in obj.variables)
    written.append(_write_json(directory / METADATA_FILE, {
        "keras_version": None, "keras_hub_version": KERAS_HUB_VERSION, "parameter_count": parameters,
        "saved_by": "bertconv", "tasks": ["MaskedLM"] if family.masked_lm else []}))
    preprocessor = _write_tokenizer(source, family, directory, written)
    if task or family.masked_lm and tree.heads.mlm:  # RoFormer-v2's head has no weights: task.json alone
        if task:
            write_keras3_file(directory / TASK_WEIGHTS, task, on_tensor=options.on_tensor)
            written.append(directory / TASK_WEIGHTS)
        written.append(_write_json(directory / TASK_FILE, {
            "module": f"keras_hub.src.models.{family.package}.{family.package}_masked_lm",
            "class_name": family.task,
            "config": {"backbone": config, "preprocessor": preprocessor, "name": f"{family.package}_masked_lm"},
            "registered_name": f"keras_hub>{family.task}"}))
    return written


def _one_dtype(tree: ParameterTree, objects: list[Keras3Object]) -> str:
    """The dtype of every variable: a keras-hub dtype policy gives all of them one, and would
    round a tensor of another into it on loading."""
    found = sorted({t.dtype.name for obj in objects for t in obj.variables})
    if len(found) > 1:
        raise bad_input(tree.path, f"its tensors are {' and '.join(found)}; a keras-hub preset's dtype policy holds "
                                   f"every weight in one dtype, and keras-hub would round the others into it on "
                                   f"loading; nothing was written")
    return found[0]


def tokenizer_assets(tree: ParameterTree, family: KerasHubFamily) -> dict[str, Path]:
    """The source's files that keras-hub's tokenizer of `family` takes as its assets, by asset
    name: all of them, or none (then the preset has no tokenizer); some without the others (a
    vocab.json without its merges.txt) is refused, naming what is missing."""
    source = companions.source_directory(tree.path)
    found = {companions.carried_name(path, tree.config.model_type): path for path in companions.find(source)}
    if tree.vocab is not None:
        found.setdefault("vocab.txt", tree.vocab)
    for asset, name in family.vocabulary.items():  # a preset's own (XLM-R's vocabulary.spm is no spiece.model)
        if (source / TOKENIZER_ASSETS / asset).is_file():
            found[name] = source / TOKENIZER_ASSETS / asset
    assets = {asset: found[name] for asset, name in family.vocabulary.items() if name in found}
    if assets and len(assets) != len(family.vocabulary):
        missing = [name for name in family.vocabulary.values() if name not in found]
        raise bad_input(next(iter(assets.values())), f"is there without {', '.join(missing)}, which keras-hub's "
                                                     f"{family.tokenizer} needs beside it; nothing was written")
    return assets


def _heads(tree: ParameterTree) -> list[str]:
    """The heads of `tree` beyond the pooler (mlm, rtd, ...)."""
    return sorted({role_of(name).head for name in tree.params} - {None, "pooler"})


def _heads_it_holds(tree: ParameterTree, family: KerasHubFamily, accept_loss: tuple[str, ...]) -> ParameterTree:
    """`tree` without the heads a preset has no place for: all of them for a family keras-hub has
    a backbone of and no task, all but the MLM head for one with its masked-LM task (a sentence
    head: keras-hub has none). Refused unless each such head's loss is accepted by name
    (`--accept-loss nsp`)."""
    kept = ("mlm",) if family.masked_lm else ()
    heads = [head for head in _heads(tree) if head not in kept]
    refused = [head for head in heads if head not in accept_loss]
    if refused:
        flags = " ".join(f"--accept-loss {head}" for head in refused)
        holds = (f"its {family.task} holds the encoder and its MLM head" if family.masked_lm else
                 f"it has {family.backbone} and no task for it: its preset holds the encoder alone")
        raise bad_input(tree.path, f"keras-hub {KERAS_HUB_VERSION} has no place for the {' and '.join(refused)} "
                                   f"head ({holds}); nothing was written: pass {flags} to write the rest without it")
    return replace(tree, params={name: p for name, p in tree.params.items() if role_of(name).head not in heads})


def _write_tokenizer(tree: ParameterTree, family: KerasHubFamily, directory: Path,
                     written: list[Path]) -> dict[str, Any] | None:
    """The source's vocabulary as the tokenizer's assets, with tokenizer.json and (for a family
    with a masked-LM task) preprocessor.json; the preprocessor's config (None without one)."""
    source = companions.source_directory(tree.path)
    assets = tokenizer_assets(tree, family)
    if not assets:
        return None
    (directory / TOKENIZER_ASSETS).mkdir(parents=True)
    for asset, path in assets.items():
        shutil.copyfile(path, directory / TOKENIZER_ASSETS / asset)
        written.append(directory / TOKENIZER_ASSETS / asset)
    settings = dict(family.tokenizer_config)
    if "lowercase" in settings:
        settings["lowercase"] = _lower_case(source)
    tokenizer = {"module": f"keras_hub.src.models.{family.package}.{family.package}_tokenizer",
                 "class_name": family.tokenizer,
                 "config": {"name": f"{family.package}_tokenizer", "trainable": True, "dtype": _dtype_policy("int32"),
                            "config_file": TOKENIZER_FILE, **settings},
                 "registered_name": f"keras_hub>{family.tokenizer}"}
    written.append(_write_json(directory / TOKENIZER_FILE, tokenizer))
    if not family.masked_lm:
        return None
    preprocessor = {"module": f"keras_hub.src.models.{family.package}.{family.package}_masked_lm_preprocessor",
                    "class_name": family.preprocessor,
                    "config": {"name": f"{family.package}_masked_lm_preprocessor", "trainable": True,
                               "dtype": _dtype_policy("float32"), "tokenizer": tokenizer,
                               "config_file": PREPROCESSOR_FILE, **PREPROCESSOR_DEFAULTS},
                    "registered_name": f"keras_hub>{family.preprocessor}"}
    written.append(_write_json(directory / PREPROCESSOR_FILE, preprocessor))
    return preprocessor


def _lower_case(source: Path) -> bool:
    """Whether the source's tokenizer lower-cases (its tokenizer_config.json says; else not)."""
    try:
        return bool(json.loads((source / "tokenizer_config.json").read_text(encoding="utf-8")).get(_LOWER_CASE_KEY))
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return False


def _write_json(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data, indent=4) + "\n")
    return path

