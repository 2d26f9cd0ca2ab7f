"""keras-hub presets: the directory `task.save_to_preset(dir)` writes for a masked LM
(`BertMaskedLM`, `AlbertMaskedLM`, `RobertaMaskedLM`, `XLMRobertaMaskedLM`, `DistilBertMaskedLM`,
`DebertaV3MaskedLM`)
and `backbone.save_to_preset(dir)` for its backbone (and ELECTRA's, which has no masked-LM task).

    config.json          the backbone, serialized by Keras (`registered_name` keras_hub>BertBackbone)
    model.weights.h5     the backbone's weights, Keras 3 layout (containers/hdf5/keras.py reads it)
    task.json            the task, serialized (absent in a backbone preset)
    task.weights.h5      the task's own weights: the MLM head (its decoder is the token embedding),
                         the optimizer's state
    metadata.json, preprocessor.json, tokenizer.json, assets/tokenizer/...

A backbone past `save_to_preset`'s `max_shard_size` is saved in shards instead of
model.weights.h5: model.weights.json and model_00000.weights.h5, ... (`containers/hdf5/
keras3_shards.py`), read as keras-hub loads them (model.weights.h5 first, where both are).

The families' tables, config keys and hard-coded numerics are `formats/keras_hub/table.py`; the
writer is `formats/keras_hub/write.py`. A backbone config key no table knows is refused (its
computation would be unknown).
"""

from __future__ import annotations

import json
from pathlib import Path

from ... import families
from ...config import BertConfig
from ...containers.hdf5 import keras_listing
from ...containers.hdf5 import keras3 as keras3_h5
from ...containers.hdf5.keras3_shards import SHARD_NAME, read_sharded
from ...errors import bad_input
from ...records import replace
from ...tensor import LazyTensor, ReshapedTensor
from ...tree import ParameterTree
from ..assemble import Entry, assemble
from .positions import from_preset
from .table import (
    BY_BACKBONE,
    CONFIG_FILE,
    FAMILIES,
    HEADWISE,
    KERAS_INERT,
    MODEL_PREFIX,
    MODEL_WEIGHTS,
    SHARDED_INDEX,
    TASK_PREFIX,
    TASK_WEIGHTS,
    TOKENIZER_ASSETS,
    KerasHubFamily,
)

FORMAT = "keras-hub-preset"
#: The families this format writes (`convert` refuses a tree of any other).
WRITES_FAMILIES = tuple(FAMILIES)
#: The weights' dtype policies read; a mixed or quantized policy computes otherwise.
DTYPE_POLICIES = ("float32", "float16", "bfloat16")
#: The files `candidates` looks for in a directory: the backbone's weights, or their shards' index.
DIRECTORY_FILES = (MODEL_WEIGHTS, SHARDED_INDEX)


# --- the registry's writer, imported with HDF5's writing machinery when a conversion writes --


def write(tree: ParameterTree, directory: Path, *, options) -> list[Path]:
    """`write.write`: `tree` as a keras-hub preset in the new `directory`."""
    from .write import write as write_preset  # noqa: PLC0415

    return write_preset(tree, directory, options=options)


def write_caveats(tree: ParameterTree) -> list[str]:
    """`write.write_caveats`: what the preset computes otherwise than the source."""
    from .write import write_caveats as preset_caveats  # noqa: PLC0415

    return preset_caveats(tree)


# --- finding the files ----------------------------------------------------------------------


def _backbone_class(directory: Path) -> str | None:
    """config.json's `registered_name` when it is a keras-hub object's; never raises."""
    try:
        data = json.loads((directory / CONFIG_FILE).read_text(encoding="utf-8"))
        name = data.get("registered_name") if isinstance(data, dict) else None
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return name if isinstance(name, str) and name.startswith("keras_hub>") else None


def candidates(directory: Path) -> list[Path]:
    """A keras-hub preset's backbone weights, or their shards' index (the reader finds the
    task's beside them)."""
    directory = Path(directory)
    path = next((directory / name for name in DIRECTORY_FILES if (directory / name).is_file()), None)
    return [path] if path is not None and _backbone_class(directory) else []


def sniff(path: Path) -> str | None:
    """FORMAT for a preset's `model.weights.h5`, `task.weights.h5` or a backbone shard (Keras 3
    layout), or its shards' index, beside a keras-hub config.json; None otherwise."""
    path = Path(path)
    index = path.name == SHARDED_INDEX
    shard = bool(SHARD_NAME.fullmatch(path.name)) and (path.parent / SHARDED_INDEX).is_file()
    if not (index or shard or path.name in (MODEL_WEIGHTS, TASK_WEIGHTS)) or _backbone_class(path.parent) is None:
        return None
    return FORMAT if index or keras_listing.layout(path) == "keras3" else None


# --- reading --------------------------------------------------------------------------------


def read(path: Path, *, config_path: Path | None = None, num_heads: int | None = None) -> ParameterTree:
    """Read a keras-hub preset (its backbone's and, when there, its task's weights) into a tree."""
    directory = Path(path).parent
    model_path, task_path = directory / MODEL_WEIGHTS, directory / TASK_WEIGHTS
    if config_path is not None:
        raise bad_input(config_path, "a keras-hub preset's config is its config.json; --config does not apply")
    family, config = read_config(directory / CONFIG_FILE)
    if model_path.is_file():  # keras-hub's order: the single file, else the shards
        backbone = [keras3_h5.read_keras3_file(model_path)]
    elif (directory / SHARDED_INDEX).is_file():
        model_path = directory / SHARDED_INDEX
        backbone = read_sharded(model_path)
    else:
        raise bad_input(directory / MODEL_WEIGHTS, "is missing: a keras-hub preset keeps its backbone's weights there "
                                                   f"(or in shards listed by {SHARDED_INDEX})")
    # Each tensor named by the file it is in (a shard's own name), matched as model.weights.h5's.
    entries = [entry for weights in backbone for entry in _entries(weights, f"{weights.path.name}:", config)]
    files = [model_path, *(weights.path for weights in backbone if weights.path != model_path)]
    if task_path.is_file():
        entries += _entries(keras3_h5.read_keras3_file(task_path), TASK_PREFIX, config)
        files.append(task_path)
    else:  # a backbone preset: no head computes with the task's numerics
        config = replace(config, mlm_hidden_act=None, mlm_layer_norm_eps=None)
    vocab = directory / TOKENIZER_ASSETS / "vocabulary.txt"
    first = f":layers/{family.encoder_group}/"  # the first encoder layer's group has no index; the table's has
    tree = assemble(format_name=FORMAT, path=model_path, entries=entries, table=family.table_for(config.embedding_projection),
                    config=config, default_activation=config.hidden_act, num_heads=num_heads, files=files,
                    vocab=vocab if vocab.is_file() else None,
                    rename=lambda name: _backbone_name(name).replace(first, first[:-1] + "_0/", 1),
                    family=family.model_type)
    return from_preset(tree, family.position_offset)


def _backbone_name(name: str) -> str:
    """`name` ("<file>:<path in file>") as the table knows it: a backbone tensor's under
    model.weights.h5, whichever shard holds it; a task tensor's as it is."""
    file, _, inside = name.partition(":")
    return name if file == TASK_WEIGHTS else MODEL_PREFIX + inside


def read_config(path: Path) -> tuple[KerasHubFamily, BertConfig]:
    """The family and config a preset's config.json states, with what its code hard-codes."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        registered, values = data["registered_name"], data["config"]
        if not isinstance(values, dict):
            raise TypeError("its config is not an object")
    except FileNotFoundError:
        raise bad_input(path, "is missing: a keras-hub preset's backbone config") from None
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise bad_input(path, f"is not a keras-hub backbone config (registered_name and config): {exc}") from None
    family = BY_BACKBONE.get(registered)
    if family is None:
        known = ", ".join(BY_BACKBONE)
        raise bad_input(path, f"holds a {registered}; bertconv reads keras-hub presets of {known}")
    unknown = sorted(set(values) - set(family.config_keys) - set(family.extra_keys) - set(KERAS_INERT) - {"dtype"})
    if unknown:
        raise bad_input(path, f"states {', '.join(unknown)}, which bertconv does not know {family.backbone} to read: "
                              f"its computation with them is unknown; nothing was read")
    missing = sorted({*family.config_keys, *family.extra_keys} - set(values))
    if missing:
        raise bad_input(path, f"lacks {', '.join(missing)}, which a {family.backbone} config states")
    policy = _policy(path, values.get("dtype", "float32"))
    fields = {}
    for key, field_name in family.config_keys.items():
        value = values[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise bad_input(path, f"{key} is {json.dumps(value)}, expected a non-negative integer")
        fields[field_name] = value
    stated = {name: value for name, value in family.stated.items() if value is not None}
    derived = {name: fields[source] for name, source in family.derived.items()}
    provenance = {**{name: "file" for name in fields}, **{name: "format" for name in (*stated, *derived)},
                  "model_type": "format", "tie_word_embeddings": "format"}
    if "embedding_size" in fields:  # ALBERT projects always, ELECTRA when E < H (as bertconv's families)
        fields["embedding_projection"] = "num_groups" in family.config_keys or fields["embedding_size"] != fields["hidden_size"]
    try:  # RoFormer-v2's activation, head size, biases and rotary base
        extra = family.read_extra(values) if family.read_extra else {}
    except ValueError as exc:
        raise bad_input(path, f"{exc}; nothing was read") from None
    provenance.update({**{name: "file" for name in extra}, **{name: "default" for name in family.defaults}})
    config = BertConfig(**{**families.named(family.model_type).fields, **fields, **stated, **derived, **extra,
                           **family.defaults}, model_type=family.model_type, provenance=provenance, source=path)
    if policy not in DTYPE_POLICIES:
        raise bad_input(path, f"dtype policy {policy!r}: a mixed or quantized model computes otherwise than its "
                              f"weights' dtype; bertconv reads {', '.join(DTYPE_POLICIES)}")
    return family, config


def _policy(path: Path, dtype) -> str:
    if isinstance(dtype, str):
        return dtype
    try:
        return str(dtype["config"]["name"])
    except (TypeError, KeyError):
        raise bad_input(path, f"dtype is {json.dumps(dtype)[:80]}, not a Keras dtype policy") from None


def _entries(weights: keras3_h5.Keras3WeightsFile, prefix: str, config: BertConfig) -> list[Entry]:
    """A Keras 3 file's variables named `<prefix><path in file>`, attention kernels reshaped to
    [H, H]; what lies outside its layers (an optimizer's state) as entries too, for the skips."""
    path = weights.path
    if weights.nested:
        raise bad_input(path, f"holds one nested model ({weights.nested}), not a keras-hub preset's layers")
    entries = [Entry(f"{prefix}{weights.container}/{layer.group}/{w.name}",
                     _canonical_shape(path, f"{weights.container}/{layer.group}/{w.name}", w.tensor, config), path)
               for layer in weights.layers for w in layer.weights]
    return entries + [Entry(prefix + w.name, w.tensor, path) for w in weights.extra]


def _canonical_shape(path: Path, name: str, tensor: LazyTensor, config: BertConfig) -> LazyTensor:
    """An attention variable stored per head ([H, A, D], [A, D], [A, D, H]) as [H, H] or [H]."""
    if not HEADWISE.search(name):
        return tensor
    heads, head_size = config.num_attention_heads, config.head_size
    output = "/output_dense/" in name
    expected = {(True, True): (heads, head_size, config.hidden_size), (True, False): (config.hidden_size,),
                (False, True): (config.hidden_size, heads, head_size), (False, False): (heads, head_size)}
    kernel = name.endswith("/0")
    shape = expected[(output, kernel)]
    if tuple(tensor.shape) != shape:
        raise bad_input(path, f"{name} has shape {list(tensor.shape)}, expected {list(shape)} (num_heads "
                              f"{heads} x head size {head_size}, hidden_dim {config.hidden_size}, from config.json)")
    if kernel:
        return ReshapedTensor(tensor, (config.hidden_size, config.hidden_size))
    return ReshapedTensor(tensor, (config.hidden_size,)) if len(shape) == 2 else tensor


