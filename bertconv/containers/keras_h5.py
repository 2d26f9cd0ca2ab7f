"""Keras HDF5 weight files (`model.save_weights('x.h5')`), read and written with h5py alone.

Model-agnostic: this module knows Keras' file layout, not any model's layer names.

Keras 2 layout (Keras 2.x, tf-keras 2.x; what `save_weights` writes for a path ending in `.h5`,
`.hdf5` or `.keras`, and what `model.save` nests under a `model_weights` group):

    /                         attrs: layer_names (every layer of `model.layers`, weightless
                              ones too, in that order; split over layer_names0, layer_names1,
                              ... when longer than HDF5_OBJECT_HEADER_LIMIT bytes),
                              backend, keras_version
    /<layer>                  attrs: weight_names (ordered, split like layer_names)
    /<layer>/<weight name>    one dataset per weight, the weight name being the variable's
                              name, e.g. `Transformer-0-FeedForward/dense_1/kernel:0`
    /top_level_model_weights  tf-keras 2.x: weights owned by the model itself (usually none)

A nested model (a `Model` used as a layer) is one group named after it whose `weight_names`
start with its inner layers' names (`Embedding-Token/embeddings:0`): `read_weights_file`
expands it into those inner layers, in order, grouped by the first path component.

Keras 3 layout (what `save_weights` writes for any `*.weights.h5`, even under tf-keras 2.x;
tf_keras/src/saving/saving_lib.py), with no layer names at all:

    /layers/<group>/vars/<n>          a layer's own variables, n = 0, 1, ... in creation order
    /layers/<group>/<attr>/vars/<n>   the variables of a sub-layer held in attribute <attr>
    /layers/<group>/layers/...        a nested model's own `layers` container, likewise
    /vars, /optimizer/vars/<n>, ...   the model's own variables; a compiled model's optimizer

where <group> is the layer's class in snake_case, with `_k` appended for the k-th (k >= 1) layer
of that class in `model.layers` order (`dense`, `dense_1`, ...; `keras3_group_names`).
`read_keras3_file` lists the groups and their datasets; which group is which layer is the
format's business (it needs the model's layer order).

Reading touches no tensor data: a contiguous, unfiltered dataset becomes a `MappedTensor` at
its file offset; any other dataset (chunked, compressed, compact, big-endian) a `H5Tensor` read
through h5py when asked, once its stored size is known to back its shape. Data kept outside the
file (external links, external storage, virtual datasets) is refused. HDF5 is C code that can
loop or crash on a damaged file, so what it would trip on is checked first (`check_global_heaps`
before any name is read; the writer's two passes, see `write_weights_file`). Every malformation
is a `BadInput` naming the file, layer and weight.
"""

from __future__ import annotations

import errno
import math
import mmap
import os
import re
import struct
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from .. import dtypes
from ..dtypes import DType
from ..errors import BadInput, bad_input
from ..lazy import lazy_module
from ..tensor import ArrayTensor, LazyTensor, MappedTensor, check_span, file_size

if TYPE_CHECKING:
    import h5py
    import numpy as np
else:  # imported on first use: most commands read no HDF5 file, and headers need no NumPy
    h5py = lazy_module("h5py")
    np = lazy_module("numpy")

#: The HDF5 file signature; the superblock sits at byte 0 or at 512 * 2**k (after a user block).
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
FIRST_USERBLOCK_SIZE = 512
#: Keras splits a list attribute whose array is larger than this over `name0`, `name1`, ...
#: (tf_keras/src/saving/legacy/hdf5_format.py, HDF5_OBJECT_HEADER_LIMIT).
HDF5_OBJECT_HEADER_LIMIT = 64512
LAYER_NAMES = "layer_names"
WEIGHT_NAMES = "weight_names"
TOP_LEVEL_WEIGHTS = "top_level_model_weights"
#: `model.save('x.h5')` puts the weights file under this group, optimizer state beside it.
MODEL_WEIGHTS = "model_weights"
OPTIMIZER_WEIGHTS = "optimizer_weights"
#: The Keras 3 layout's container of a model's layers, and the group of an object's own variables.
KERAS3_LAYERS = "layers"
KERAS3_VARS = "vars"
#: The most a filter (compression) may expand stored bytes: deflate's own bound is 1032.
MAX_FILTER_EXPANSION = 1100
#: Copy granularity when writing: bounds the scratch a transposed source needs.
CHUNK_BYTES = 16 << 20
#: HDF5 global heap collections hold variable-length strings (Keras' layer and weight names).
#: Layout: "GCOL", version 1, 3 reserved bytes, collection size (8 bytes), then objects of
#: index (2), reference count (2), reserved (4), size (8), data padded to 8 bytes; index 0 is
#: the free space. HDF5 1.14 loops forever on a collection whose free space claims 0 bytes
#: (H5HG__cache_heap_deserialize never advances), so collections are walked here first.
GLOBAL_HEAP_SIGNATURE = b"GCOL"
GLOBAL_HEAP_VERSION = 1
GLOBAL_HEAP_MIN_SIZE = 4096
_HEAP_HEADER_BYTES = 16
_HEAP_OBJECT_HEADER_BYTES = 16
#: What h5py raises for a damaged or unexpected file.
_H5_ERRORS = (OSError, KeyError, ValueError, RuntimeError, TypeError, IndexError)


# --- what a file holds ----------------------------------------------------------------------


@dataclass(frozen=True)
class KerasWeight:
    """One weight as a layer lists it: `name` exactly as in `weight_names`."""

    name: str
    tensor: LazyTensor


@dataclass(frozen=True)
class KerasLayer:
    """One layer, its weights in `weight_names` order.

    `parent` is the nested model group it was expanded from, or None for a top-level layer.
    """

    name: str
    weights: tuple[KerasWeight, ...]
    parent: str | None = None


@dataclass(frozen=True)
class KerasWeightsFile:
    """A Keras 2 weights file.

    Attributes:
      layers: every layer in `layer_names` order (nested models expanded), weightless ones too.
      extra: weights that belong to no layer: the model's own top-level weights and, in a
        `model.save` file, the optimizer's state; each named by its path in the file.
      backend, keras_version: the root attributes, when present.
    """

    path: Path
    layers: tuple[KerasLayer, ...]
    extra: tuple[KerasWeight, ...]
    backend: str | None
    keras_version: str | None


@dataclass(frozen=True)
class Keras3Layer:
    """One group of a Keras 3 layout's `layers` container.

    `group` is its name there (`multi_head_attention_1`); `weights` every dataset below it, each
    named by its path under the group (`vars/0`, `q_dense/vars/1`), sorted by name.
    """

    group: str
    weights: tuple[KerasWeight, ...]


@dataclass(frozen=True)
class Keras3WeightsFile:
    """A Keras 3 layout weights file.

    Attributes:
      container: the path of the `layers` group holding the model's layers: `layers`, or
        `layers/<group>/layers` when the file's model has one nested model and nothing else with
        weights (`nested` is then that group's name).
      layers: the container's groups, weightless ones too, sorted by name.
      extra: datasets outside the container (the model's own `vars`, an optimizer's state), each
        named by its path in the file.
    """

    path: Path
    container: str
    layers: tuple[Keras3Layer, ...]
    extra: tuple[KerasWeight, ...]
    nested: str | None = None


class H5Tensor(LazyTensor):
    """A dataset read through h5py when asked (chunked, filtered, compact or big-endian storage).

    `read()` returns the values in `dtype.storage` (little-endian), as every `LazyTensor` does.
    """

    def __init__(self, path: Path, dataset: str, dtype: DType, shape: tuple[int, ...], what: str):
        self.path = Path(path)
        self.dataset = dataset
        self.dtype = dtype
        self.shape = tuple(shape)
        self.what = what

    def read(self) -> np.ndarray:
        try:
            with h5py.File(self.path, "r") as f:
                values = f[self.dataset][()]
        except _H5_ERRORS as exc:
            raise bad_input(self.path, f"{self.what}: cannot read its data: {exc}") from None
        values = np.asarray(values)
        if values.shape != self.shape:
            raise bad_input(self.path, f"{self.what}: read shape {list(values.shape)}, header says {list(self.shape)}")
        return values.astype(self.dtype.numpy, copy=False)


# --- sniffing -------------------------------------------------------------------------------


def is_hdf5(path: Path) -> bool:
    """True when the file carries the HDF5 signature at byte 0 or after a user block."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            offset = 0
            while offset + len(HDF5_SIGNATURE) <= size:
                f.seek(offset)
                if f.read(len(HDF5_SIGNATURE)) == HDF5_SIGNATURE:
                    return True
                offset = FIRST_USERBLOCK_SIZE if offset == 0 else offset * 2
    except OSError:
        return False
    return False


def layout(path: Path) -> str | None:
    """"keras2" for a file with Keras 2 `layer_names`, "keras3" for the `/layers/*/vars` layout,
    None for anything else (another HDF5 file, or not HDF5 at all). Never raises."""
    if not is_hdf5(path):
        return None
    try:
        with h5py.File(path, "r") as f:
            if _weights_group(f) is not None:
                return "keras2"
            if _is_keras3(f):
                return "keras3"
    except Exception:  # noqa: BLE001 - sniffing answers "not mine" for any unreadable file
        return None
    return None


def layer_names(path: Path) -> list[str]:
    """The root `layer_names` of a Keras 2 file, plus the first path component of every weight
    of a nested model group; [] for a file that is not one. Reads attributes only; never raises."""
    try:
        check_global_heaps(path)
        with h5py.File(path, "r") as f:
            group = _weights_group(f)
            if group is None:
                return []
            names = _string_list(path, group.attrs, LAYER_NAMES, "the root") or []
            inner = []
            for name in names:
                child = group.get(name)
                if isinstance(child, h5py.Group):
                    weights = _string_list(path, child.attrs, WEIGHT_NAMES, f"layer {name!r}") or []
                    inner.extend(w.split("/", 1)[0] for w in weights if not w.startswith(name + "/"))
            return list(dict.fromkeys(names + inner))
    except Exception:  # noqa: BLE001 - a listing for sniffing; `read_weights_file` reports errors
        return []


def check_global_heaps(path: Path) -> None:
    """Refuse a file holding a global heap collection HDF5 would loop forever on.

    Every "GCOL" signature followed by a plausible header (version 1, zero reserved bytes, a
    size of at least 4096 bytes inside the file) is walked object by object as HDF5 walks it;
    an object that does not advance the walk is corruption. Only the metadata is searched, not
    the tensors' bytes, so checking a multi-GB file reads kilobytes.
    """
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                data.madvise(mmap.MADV_RANDOM)
                for begin, end in _metadata_ranges(path, size):
                    start = data.find(GLOBAL_HEAP_SIGNATURE, begin, end)
                    while start >= 0:
                        _walk_global_heap(path, data, start, size)
                        start = data.find(GLOBAL_HEAP_SIGNATURE, start + 1, end)
    except OSError as exc:
        raise bad_input(path, f"cannot read: {exc.strerror or exc}") from None


def _metadata_ranges(path: Path, size: int) -> list[tuple[int, int]]:
    """The byte ranges of the file outside its datasets' contiguous storage: where HDF5 keeps
    metadata, global heaps included. Listing datasets reads no attribute (no global heap); if the
    file is too damaged to list them, the whole file is searched."""
    spans: list[tuple[int, int]] = []

    def collect(_name: str, node) -> None:
        if isinstance(node, h5py.Dataset):
            offset = node.id.get_offset()
            if offset is not None:
                spans.append((offset, node.id.get_storage_size()))

    try:
        with h5py.File(path, "r") as f:
            f.visititems(collect)
    except Exception:  # noqa: BLE001 - damaged structure: fall back to searching everything
        return [(0, size)]
    ranges, position = [], 0
    for offset, length in sorted(spans):
        if offset > position:
            ranges.append((position, offset))
        position = max(position, offset + length)
    ranges.append((position, size))
    return ranges


def _walk_global_heap(path: Path, data: mmap.mmap, start: int, size: int) -> None:
    if start + _HEAP_HEADER_BYTES > size:
        return
    version, reserved, length = struct.unpack_from("<B3sQ", data, start + 4)
    if version != GLOBAL_HEAP_VERSION or reserved != bytes(3) or not GLOBAL_HEAP_MIN_SIZE <= length <= size - start:
        return  # not a collection HDF5 would accept; it reports its own error if one is used
    position, end = start + _HEAP_HEADER_BYTES, start + length
    while position + _HEAP_OBJECT_HEADER_BYTES <= end:
        index, _, _, object_size = struct.unpack_from("<HH4sQ", data, position)
        # HDF5's step, in its size_t arithmetic: the free space (index 0) spans `size` bytes,
        # any other object its header plus its size rounded up to 8.
        step = object_size if index == 0 else (_HEAP_OBJECT_HEADER_BYTES + ((object_size + 7) & ~7)) % 2**64
        if step == 0 or step >= 2**63:
            raise bad_input(path, f"HDF5 global heap collection at byte {start} is corrupt: object {index} at "
                                  f"byte {position} claims {object_size} bytes, which HDF5 cannot step over "
                                  f"(the names this file stores are damaged)")
        position += step


def _is_keras3(f: h5py.File) -> bool:
    layers = f.get(KERAS3_LAYERS)
    return isinstance(layers, h5py.Group) and any(
        isinstance(child, h5py.Group) and KERAS3_VARS in child for child in layers.values())


def _weights_group(f: h5py.File) -> h5py.Group | None:
    """The group holding `layer_names`: the root, or `model_weights` in a `model.save` file."""
    if _has_list_attr(f.attrs, LAYER_NAMES):
        return f
    nested = f.get(MODEL_WEIGHTS)
    if isinstance(nested, h5py.Group) and _has_list_attr(nested.attrs, LAYER_NAMES):
        return nested
    return None


def _has_list_attr(attrs, name: str) -> bool:
    return name in attrs or f"{name}0" in attrs


# --- reading --------------------------------------------------------------------------------


def read_weights_file(path: Path) -> KerasWeightsFile:
    """Parse a Keras 2 weights file: layers, their ordered weights, lazy tensors (no data read)."""
    return _read_guarded(Path(path), _read_open)


def _read_open(path: Path, f: h5py.File) -> KerasWeightsFile:
    group = _weights_group(f)
    if group is None:
        if _is_keras3(f):
            raise bad_input(path, "is in the Keras 3 weights layout (/layers/<class name>/vars/<n>, what "
                                  "save_weights writes for a path ending in .weights.h5), not the Keras 2 "
                                  "layout with layer names that this reader expects")
        roots = ", ".join(sorted(f.keys())[:8]) or "nothing"
        raise bad_input(path, f"an HDF5 file without Keras' layer_names attribute (root holds: {roots}); "
                              f"not a Keras weights file")
    size = file_size(path)
    names = _string_list(path, group.attrs, LAYER_NAMES, "the root")
    _check_layer_names(path, names)
    layers: list[KerasLayer] = []
    for name in names:
        layers.extend(_read_layer(path, group, name, size))
    seen: set[str] = set()
    for layer in layers:
        if layer.name in seen:
            raise bad_input(path, f"layer {layer.name!r} appears twice (once inside nested model "
                                  f"{layer.parent!r}?); layer names must be unique")
        seen.add(layer.name)
    extra = _extra_weights(path, f, group, size)
    return KerasWeightsFile(path, tuple(layers), tuple(extra), _string_attr(group.attrs, "backend"),
                            _string_attr(group.attrs, "keras_version"))


def read_layers_unexpanded(path: Path) -> KerasWeightsFile:
    """A Keras 2 weights file with each `layer_names` group as one layer, its `weight_names` in
    order, nothing expanded (no data read).

    For transformers' TF models (`TFBertForPreTraining.save_pretrained` -> `save_weights`): each
    main layer (`bert`, `mlm___cls`, ...) is one group whose weight names start with the model's
    name (`tf_bert_for_pre_training/bert/...`), which `read_weights_file` would take for a
    nested model; and a layer may list weights another layer owns (the MLM head holds the
    embeddings layer for its decoder), so one weight name can appear under two layers.
    """
    return _read_guarded(Path(path), _read_unexpanded_open)


def _read_unexpanded_open(path: Path, f: h5py.File) -> KerasWeightsFile:
    group = _weights_group(f)
    if group is None:
        roots = ", ".join(sorted(f.keys())[:8]) or "nothing"
        raise bad_input(path, f"an HDF5 file without Keras' layer_names attribute (root holds: {roots}); "
                              f"not a Keras weights file")
    size = file_size(path)
    names = _string_list(path, group.attrs, LAYER_NAMES, "the root")
    _check_layer_names(path, names)
    layers = []
    for name in names:
        child = group.get(name)
        if not isinstance(child, h5py.Group):
            found = "nothing" if child is None else "a dataset"
            raise bad_input(path, f"layer {name!r} is listed in layer_names but the file holds {found} under that name")
        weight_names = _string_list(path, child.attrs, WEIGHT_NAMES, f"layer {name!r}")
        if weight_names is None:
            raise bad_input(path, f"layer {name!r} has no weight_names attribute")
        repeated = sorted(n for n, count in Counter(weight_names).items() if count > 1)
        if repeated:
            raise bad_input(path, f"layer {name!r} lists weight(s) {', '.join(map(repr, repeated))} more than once")
        layers.append(KerasLayer(name, tuple(_read_weight(path, child, name, w, size) for w in weight_names)))
    return KerasWeightsFile(path, tuple(layers), tuple(_extra_weights(path, f, group, size)),
                            _string_attr(group.attrs, "backend"), _string_attr(group.attrs, "keras_version"))


def read_listed_datasets(path: Path) -> tuple[KerasWeight, ...]:
    """The datasets a file's root `layer_names` lists by their paths, in that order (no data read).

    The layout of transformers' TF shards (`tf_model-00001-of-00003.h5`, modeling_tf_utils
    `save_pretrained` with a `max_shard_size`): each weight a dataset at its name minus the
    model's (`bert/embeddings/LayerNorm/beta:0`), the root `layer_names` listing those paths.
    """
    return _read_guarded(Path(path), _read_listed_open)


def _read_listed_open(path: Path, f: h5py.File) -> tuple[KerasWeight, ...]:
    names = _string_list(path, f.attrs, LAYER_NAMES, "the root")
    if names is None:
        raise bad_input(path, "an HDF5 file without a layer_names attribute listing its datasets")
    repeated = sorted(n for n, count in Counter(names).items() if count > 1)
    if repeated:
        raise bad_input(path, f"layer_names lists {', '.join(map(repr, repeated))} more than once")
    size = file_size(path)
    weights = []
    for name in names:
        if not name or name.startswith("/") or any(part in ("", ".", "..") for part in name.split("/")):
            raise bad_input(path, f"layer_names holds {name!r}, not a relative dataset path")
        found = f.get(name)
        if not isinstance(found, h5py.Dataset):
            what = "nothing" if found is None else "a group"
            raise bad_input(path, f"layer_names lists dataset {name!r} but the file holds {what} there")
        weights.append(KerasWeight(name, _keras3_weight(path, f, name, size)))
    return tuple(weights)


def read_keras3_file(path: Path) -> Keras3WeightsFile:
    """Parse a Keras 3 layout weights file: its layer groups and their datasets, as lazy tensors
    (no data read). Which group is which layer the file does not say (see the module docstring)."""
    return _read_guarded(Path(path), _read_keras3_open)


def _read_guarded(path: Path, read):
    """`read(path, open_file)` on an HDF5 file checked first for what would hang HDF5, with any
    HDF5 error turned into `BadInput` naming the file."""
    if not is_hdf5(path):
        raise bad_input(path, "not an HDF5 file (no HDF5 signature), so not a Keras weights file")
    check_global_heaps(path)
    try:
        with h5py.File(path, "r") as f:
            return read(path, f)
    except BadInput:
        raise
    except _H5_ERRORS as exc:
        raise bad_input(path, f"cannot read as HDF5: {type(exc).__name__}: {exc}") from None


def _read_keras3_open(path: Path, f: h5py.File) -> Keras3WeightsFile:
    if not _is_keras3(f):
        roots = ", ".join(sorted(f.keys())[:8]) or "nothing"
        raise bad_input(path, f"not in the Keras 3 weights layout (no /{KERAS3_LAYERS}/<group>/"
                              f"{KERAS3_VARS}; the root holds: {roots})")
    size = file_size(path)
    datasets: list[str] = []
    f.visititems(lambda name, obj: datasets.append(name) if isinstance(obj, h5py.Dataset) else None)
    weights = {name: _keras3_weight(path, f, name, size) for name in sorted(datasets)}
    container, nested = _keras3_container(f, weights)
    prefix = container + "/"
    groups: dict[str, list[KerasWeight]] = {
        name: [] for name, child in sorted(f[container].items()) if isinstance(child, h5py.Group)}
    extra = []
    for name, tensor in weights.items():
        group, _, relative = name[len(prefix):].partition("/")
        if name.startswith(prefix) and relative:
            groups[group].append(KerasWeight(relative, tensor))
        else:
            extra.append(KerasWeight(name, tensor))
    layers = tuple(Keras3Layer(group, tuple(ws)) for group, ws in groups.items())
    return Keras3WeightsFile(path, container, layers, tuple(extra), nested)


def _keras3_container(f: h5py.File, weights: dict[str, LazyTensor]) -> tuple[str, str | None]:
    """The `layers` group holding the model's layers, and the nested model's group if it is one
    level down: a root container whose only group with weights is a model with a container of
    its own (a model called as a layer inside another)."""
    weighted = sorted({name.split("/")[1] for name in weights if name.startswith(KERAS3_LAYERS + "/")})
    only = f[KERAS3_LAYERS].get(weighted[0]) if len(weighted) == 1 else None
    if isinstance(only, h5py.Group) and isinstance(only.get(KERAS3_LAYERS), h5py.Group):
        return f"{KERAS3_LAYERS}/{weighted[0]}/{KERAS3_LAYERS}", weighted[0]
    return KERAS3_LAYERS, None


def _keras3_weight(path: Path, f: h5py.File, name: str, size: int) -> LazyTensor:
    dataset = f[name]
    if not os.path.samefile(dataset.file.filename, path):
        raise bad_input(path, f"dataset {name!r} is an external link into {dataset.file.filename}; refused")
    return _tensor(path, dataset, size, f"dataset {name!r}")


def snake_case(class_name: str) -> str:
    """A Keras class name as Keras names its group in the Keras 3 layout
    (tf_keras/src/utils/generic_utils.py `to_snake_case`): `MultiHeadAttention` ->
    `multi_head_attention`; a private class (`_Foo`) gets the prefix `private`."""
    intermediate = re.sub(r"(.)([A-Z][a-z0-9]+)", r"\1_\2", class_name)
    name = re.sub(r"([a-z])([A-Z])", r"\1_\2", intermediate).lower()
    return name if not name.startswith("_") else "private" + name


def keras3_group_names(classes: Sequence[str]) -> list[str]:
    """The Keras 3 group of each layer, for the Keras class names of `model.layers` in order:
    the snake_case class, then `_1`, `_2`, ... for later layers of the same class
    (saving_lib `_save_container_state`)."""
    seen: Counter[str] = Counter()
    names = []
    for class_name in classes:
        base = snake_case(class_name)
        names.append(base if not seen[base] else f"{base}_{seen[base]}")
        seen[base] += 1
    return names


def _check_layer_names(path: Path, names: list[str]) -> None:
    duplicates = sorted(n for n, count in Counter(names).items() if count > 1)
    if duplicates:
        raise bad_input(path, f"layer_names lists {', '.join(map(repr, duplicates))} more than once")
    for name in names:
        if not name or "/" in name or name in (".", ".."):
            raise bad_input(path, f"layer_names holds {name!r}, which is not a Keras layer name")


def _read_layer(path: Path, root: h5py.Group, name: str, size: int) -> list[KerasLayer]:
    where = f"layer {name!r}"
    group = root.get(name)
    if not isinstance(group, h5py.Group):
        found = "nothing" if group is None else "a dataset"
        raise bad_input(path, f"{where} is listed in layer_names but the file holds {found} under that name")
    weight_names = _string_list(path, group.attrs, WEIGHT_NAMES, where)
    if weight_names is None:
        raise bad_input(path, f"{where} has no weight_names attribute")
    repeated = sorted(n for n, count in Counter(weight_names).items() if count > 1)
    if repeated:
        raise bad_input(path, f"{where} lists weight(s) {', '.join(map(repr, repeated))} more than once")
    weights = tuple(_read_weight(path, group, name, w, size) for w in weight_names)
    if not _is_nested_model(name, weight_names):
        return [KerasLayer(name, weights)]
    inner: dict[str, list[KerasWeight]] = {}
    for weight in weights:
        inner.setdefault(weight.name.split("/", 1)[0], []).append(weight)
    return [KerasLayer(inner_name, tuple(ws), parent=name) for inner_name, ws in inner.items()]


def _is_nested_model(name: str, weight_names: Sequence[str]) -> bool:
    """A group whose weights all start with other layers' names is a nested model."""
    return bool(weight_names) and not any(w.startswith(name + "/") for w in weight_names)


def _read_weight(path: Path, group: h5py.Group, layer: str, name: str, size: int) -> KerasWeight:
    where = f"layer {layer!r} weight {name!r}"
    if not name or name.startswith("/") or any(part in ("", ".", "..") for part in name.split("/")):
        raise bad_input(path, f"{where}: not a relative dataset name")
    dataset = group.get(name)
    if not isinstance(dataset, h5py.Dataset):
        found = "nothing" if dataset is None else "a group"
        raise bad_input(path, f"{where} is listed in weight_names but the file holds {found} at "
                              f"{group.name}/{name}")
    if not os.path.samefile(dataset.file.filename, path):
        raise bad_input(path, f"{where} is an external link into {dataset.file.filename}; refused")
    return KerasWeight(name, _tensor(path, dataset, size, where))


def _tensor(path: Path, dataset: h5py.Dataset, size: int, where: str) -> LazyTensor:
    try:
        dtype = dtypes.from_numpy(dataset.dtype)
    except (KeyError, TypeError):
        raise bad_input(path, f"{where} has dtype {dataset.dtype}, not a numeric type bertconv reads") from None
    if dataset.shape is None:
        raise bad_input(path, f"{where} is an empty (null-dataspace) dataset")
    shape = tuple(int(d) for d in dataset.shape)
    numel = math.prod(shape)
    plist = dataset.id.get_create_plist()
    if plist.get_layout() == h5py.h5d.VIRTUAL or plist.get_external_count() > 0:
        raise bad_input(path, f"{where} keeps its data outside this file (a virtual dataset or external "
                              f"storage); refused")
    if _is_plain(dataset, dtype):
        offset = dataset.id.get_offset()
        if offset is None:
            if numel == 0:
                return ArrayTensor(np.empty(shape, dtype=dtype.numpy), dtype)
            raise bad_input(path, f"{where} has no data stored (the save was interrupted?)")
        check_span(path, offset, numel * dtype.itemsize, size, where)
        return MappedTensor(path, offset, dtype, shape, name=where)
    _check_stored_size(path, dataset, plist, numel * dtype.itemsize, where)
    return H5Tensor(path, dataset.name, dtype, shape, where)


def _check_stored_size(path: Path, dataset: h5py.Dataset, plist, nbytes: int, where: str) -> None:
    """A dataset read through h5py must store what its shape claims: every byte when it is not
    compressed (unwritten chunks would read as fill values), and a plausible share when it is."""
    stored = dataset.id.get_storage_size()
    if plist.get_nfilters() == 0 and stored < nbytes:
        raise bad_input(path, f"{where}: shape {list(dataset.shape)} needs {nbytes:,} bytes but the file stores "
                              f"{stored:,} of them (unwritten data?)")
    if plist.get_nfilters() and nbytes > MAX_FILTER_EXPANSION * max(stored, 1):
        raise bad_input(path, f"{where}: shape {list(dataset.shape)} needs {nbytes:,} bytes, more than "
                              f"{MAX_FILTER_EXPANSION} times the {stored:,} compressed bytes stored; refused")


def _is_plain(dataset: h5py.Dataset, dtype: DType) -> bool:
    """Stored as one contiguous little-endian run in this file: mappable at its offset."""
    plist = dataset.id.get_create_plist()
    return (dataset.chunks is None and plist.get_nfilters() == 0 and plist.get_layout() == h5py.h5d.CONTIGUOUS
            and dataset.dtype == dtype.numpy)


def _extra_weights(path: Path, f: h5py.File, group: h5py.Group, size: int) -> list[KerasWeight]:
    extra = []
    top = group.get(TOP_LEVEL_WEIGHTS)
    if isinstance(top, h5py.Group):
        names = _string_list(path, top.attrs, WEIGHT_NAMES, TOP_LEVEL_WEIGHTS) or []
        extra.extend(_read_weight(path, top, TOP_LEVEL_WEIGHTS, n, size) for n in names)
    optimizer = f.get(OPTIMIZER_WEIGHTS) if group is not f else None
    if isinstance(optimizer, h5py.Group):
        datasets: list[str] = []
        optimizer.visititems(lambda n, obj: datasets.append(n) if isinstance(obj, h5py.Dataset) else None)
        extra.extend(KerasWeight(f"{OPTIMIZER_WEIGHTS}/{n}",
                                 _tensor(path, optimizer[n], size, f"{OPTIMIZER_WEIGHTS}/{n}"))
                     for n in datasets)
    return extra


def _string_list(path: Path, attrs, name: str, where: str) -> list[str] | None:
    """Keras' list attribute `name`, joined from `name0`, `name1`, ... when split; None if absent."""
    if name in attrs:
        chunks = [attrs[name]]
    else:
        chunks = []
        while f"{name}{len(chunks)}" in attrs:
            chunks.append(attrs[f"{name}{len(chunks)}"])
        if not chunks:
            return None
    values: list[str] = []
    for chunk in chunks:
        array = np.atleast_1d(np.asarray(chunk))
        if array.size == 0:
            continue
        for item in array.reshape(-1):
            values.append(_decode(path, item, f"{where}: attribute {name!r}"))
    return values


def _decode(path: Path, item, where: str) -> str:
    if isinstance(item, (bytes, np.bytes_)):
        try:
            return bytes(item).decode("utf-8")
        except UnicodeDecodeError:
            raise bad_input(path, f"{where} holds {bytes(item)[:40]!r}, which is not UTF-8") from None
    if isinstance(item, (str, np.str_)):
        return str(item)
    raise bad_input(path, f"{where} holds {item!r} ({type(item).__name__}), expected names (strings)")


def _string_attr(attrs, name: str) -> str | None:
    value = attrs.get(name)
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value).decode("utf-8", "replace")
    return None if value is None else str(value)


# --- writing --------------------------------------------------------------------------------


@dataclass(frozen=True)
class LayerToWrite:
    """A layer of the file to write: its name and its (Keras weight name, tensor) pairs in order.

    A weightless layer (Input, Dropout, Add, ...) has no weights but is still listed, as Keras
    lists every layer of `model.layers`.
    """

    name: str
    weights: tuple[tuple[str, LazyTensor], ...] = ()


def write_weights_file(path: Path, layers: Sequence[LayerToWrite], *, backend: str, keras_version: str,
                       on_tensor: Callable[[int], None] | None = None) -> None:
    """Write a Keras 2 weights file as `save_weights_to_hdf5_group` does, one tensor at a time.

    `layers` in `model.layers` order. Groups are created in sorted name order, datasets at
    `<layer>/<weight name>`, and an empty `top_level_model_weights` group closes the file, as
    tf-keras 2.x writes.

    Two passes, because HDF5 cannot survive a failed write: after ENOSPC, h5py's close crashes
    the process (SIGSEGV, HDF5 1.14). First h5py writes the structure alone (groups, names,
    contiguous datasets allocated at once but never filled: a sparse file of metadata), after a
    check that the disk has room for the whole file; then the tensors are written at their
    datasets' offsets with plain file writes, in row chunks (memory stays near one chunk even for
    a transposed source), where a full disk is an ordinary OSError. `on_tensor(nbytes)` is
    called after each tensor.
    """
    path = Path(path)
    _check_layer_names(path, [layer.name for layer in layers])
    for layer in layers:
        for name, tensor in layer.weights:
            if tensor.dtype is dtypes.BFLOAT16:
                raise bad_input(path, f"layer {layer.name!r} weight {name!r} is bfloat16, which Keras HDF5 "
                                      f"files cannot hold; widen it to float32 first")
    _check_free_space(path, layers)
    placed = _write_structure(path, layers, backend=backend, keras_version=keras_version)
    with open(path, "r+b") as out:
        for offset, name, tensor in placed:
            _write_tensor(out, offset, name, tensor)
            if on_tensor:
                on_tensor(tensor.nbytes)


#: A generous bound on the HDF5 metadata of one group or dataset (measured: about 850 bytes).
METADATA_BYTES_PER_OBJECT = 2048
METADATA_BYTES_BASE = 64 << 10


def _check_free_space(path: Path, layers: Sequence[LayerToWrite]) -> None:
    """OSError(ENOSPC) before HDF5 writes anything, if the file cannot fit (see write_weights_file)."""
    data = sum(tensor.nbytes for layer in layers for _, tensor in layer.weights)
    objects = sum(2 + 2 * len(layer.weights) for layer in layers)  # groups, datasets and their parents
    names = sum(len(name) for layer in layers for name, _ in layer.weights) + sum(len(l.name) for l in layers)
    need = data + METADATA_BYTES_BASE + METADATA_BYTES_PER_OBJECT * objects + 2 * names
    stat = os.statvfs(path.parent)
    free = stat.f_bavail * stat.f_frsize
    if need > free:
        raise OSError(errno.ENOSPC, f"No space left on device (the file needs about {need:,} bytes, "
                                    f"{free:,} are free)", str(path))


def _write_structure(path: Path, layers: Sequence[LayerToWrite], *, backend: str,
                     keras_version: str) -> list[tuple[int | None, str, LazyTensor]]:
    """The file without tensor data; returns (offset, where, tensor) for every dataset."""
    placed = []
    with h5py.File(path, "w") as f:
        _save_list_attr(f, LAYER_NAMES, [layer.name for layer in layers])
        f.attrs["backend"] = backend.encode("utf-8")
        f.attrs["keras_version"] = keras_version.encode("utf-8")
        for layer in sorted(layers, key=lambda layer: layer.name):
            group = f.create_group(layer.name)
            _save_list_attr(group, WEIGHT_NAMES, [name for name, _ in layer.weights])
            for name, tensor in layer.weights:
                dataset = group.create_dataset(name, tuple(tensor.shape), dtype=tensor.dtype.numpy,
                                               dcpl=_allocated_unfilled())
                placed.append((dataset.id.get_offset(), f"layer {layer.name!r} weight {name!r}", tensor))
        top = f.create_group(TOP_LEVEL_WEIGHTS)
        _save_list_attr(top, WEIGHT_NAMES, [])
    return placed


def _allocated_unfilled() -> h5py.h5p.PropDCID:
    """Contiguous storage allocated when the dataset is created, never filled by HDF5."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.CONTIGUOUS)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
    return dcpl


def _write_tensor(out, offset: int | None, where: str, tensor: LazyTensor) -> None:
    """The tensor's values, little-endian and row-major, at `offset`, in chunks of rows."""
    if tensor.numel == 0:
        return
    if offset is None:
        raise ValueError(f"{where}: HDF5 allocated no storage for a dataset of {tensor.numel} values")
    array = tensor.read()
    if tuple(array.shape) != tuple(tensor.shape):
        raise ValueError(f"{where}: source gave shape {list(array.shape)}, expected {list(tensor.shape)}")
    out.seek(offset)
    if array.ndim == 0:
        out.write(np.asarray(array, dtype=tensor.dtype.numpy).tobytes())
        return
    rows = max(1, CHUNK_BYTES // max(1, array[0].nbytes))
    for start in range(0, array.shape[0], rows):
        out.write(np.ascontiguousarray(array[start:start + rows], dtype=tensor.dtype.numpy).data)
    del array


def _save_list_attr(group: h5py.Group, name: str, values: list[str]) -> None:
    """`save_attributes_to_hdf5_group`: one attribute, or `name0`, `name1`, ... each holding a
    contiguous part under HDF5_OBJECT_HEADER_LIMIT bytes (split as numpy.array_split does)."""
    data = [v.encode("utf-8") for v in values]
    too_long = [v for v in data if len(v) > HDF5_OBJECT_HEADER_LIMIT]
    if too_long:
        raise ValueError(f"names longer than {HDF5_OBJECT_HEADER_LIMIT} bytes cannot be stored: {too_long[:1]!r}")
    array = np.asarray(data)
    chunks = 1
    while any(part.nbytes > HDF5_OBJECT_HEADER_LIMIT for part in np.array_split(array, chunks)):
        chunks += 1
    if chunks == 1:
        group.attrs[name] = data
        return
    for index, part in enumerate(np.array_split(array, chunks)):
        group.attrs[f"{name}{index}"] = part


# --- the order of a functional model's layers -------------------------------------------------


@dataclass(frozen=True)
class Node:
    """One call of a layer in a functional graph: `parents` index the nodes of its inputs, in
    argument order (an Input layer's node has none)."""

    layer: str
    parents: tuple[int, ...] = ()


def functional_layer_order(nodes: Sequence[Node], outputs: Iterable[int], inputs: Iterable[int] = ()) -> list[str]:
    """The layer order of `Model(inputs, outputs).layers` (hence of `layer_names`) for a graph.

    As tf_keras' `functional._map_graph_network`: a depth-first walk from the outputs gives
    each layer its first-seen index; a node's depth is one more than the deepest node that
    consumes it (a shared layer takes its deepest node's depth); layers are listed by decreasing
    depth, ties by first-seen index. An input the outputs do not reach gets depth 0 and leads
    the depth-0 layers.
    """
    finished: set[int] = set()
    walk: list[int] = []
    first_seen: dict[str, int] = {}
    for output in outputs:
        if output in finished:
            continue
        first_seen.setdefault(nodes[output].layer, len(first_seen))
        stack = [(output, iter(nodes[output].parents))]
        while stack:
            node, parents = stack[-1]
            parent = next(parents, None)
            if parent is None:
                stack.pop()
                finished.add(node)
                walk.append(node)
            elif parent not in finished:
                first_seen.setdefault(nodes[parent].layer, len(first_seen))
                stack.append((parent, iter(nodes[parent].parents)))
    node_depth: dict[int, int] = {}
    layer_depth: dict[str, int] = {}
    for node in reversed(walk):
        layer = nodes[node].layer
        depth = max(node_depth.setdefault(node, 0), layer_depth.get(layer, 0))
        layer_depth[layer] = node_depth[node] = depth
        for parent in nodes[node].parents:
            node_depth[parent] = max(depth + 1, node_depth.get(parent, 0))
    for node in inputs:
        if nodes[node].layer not in layer_depth:
            layer_depth[nodes[node].layer] = 0
            first_seen[nodes[node].layer] = -1
    return sorted(layer_depth, key=lambda layer: (-layer_depth[layer], first_seen[layer]))
