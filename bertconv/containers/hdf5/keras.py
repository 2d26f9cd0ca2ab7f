"""Keras HDF5 weight files (`model.save_weights('x.h5')`), read through `nodes` (bertconv's own
reader of HDF5 metadata where it reads the file, h5py otherwise: a group or dataset of either is
asked alike, so `h5py.File` and `h5py.Group` below stand for both), written with h5py.

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
of that class in `model.layers` order (`dense`, `dense_1`, ...). `read_keras3_file` lists the
groups and their datasets; which group is which layer is the format's business (it needs the
model's layer order: `formats/keras/model.py`).

Reading touches no tensor data: a contiguous, unfiltered dataset becomes a `MappedTensor` at
its file offset; any other (chunked, compressed, compact, big-endian) a `H5Tensor` read through
h5py when asked, once its stored size backs its shape. Data outside the file (external links or
storage, virtual datasets) is refused. What HDF5 would loop on is kept from it
(`workarounds.check_global_heaps`). Every malformation is a `BadInput` naming file, layer, weight.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from ... import dtypes
from ...dtypes import DType
from ...errors import BadInput, bad_input
from ...lazy import lazy_module
from ...records import record
from ...tensor import ArrayTensor, LazyTensor, MappedTensor, check_span, file_size
from ..one_reading import known
from . import objects
from .nodes import dataset_paths, file_number, get, is_dataset, is_group, read_with
from .signature import is_hdf5

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    import h5py
    import numpy as np
else:  # imported on first use: most commands read no HDF5 file, and headers need no NumPy
    h5py = lazy_module("h5py")
    np = lazy_module("numpy")

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
#: What h5py raises for a damaged or unexpected file.
_H5_ERRORS = (OSError, KeyError, ValueError, RuntimeError, TypeError, IndexError)


# --- what a file holds ----------------------------------------------------------------------


@record
class KerasWeight:
    """One weight as a layer lists it: `name` exactly as in `weight_names`."""

    name: str
    tensor: LazyTensor


@record
class KerasLayer:
    """One layer, its weights in `weight_names` order.

    `parent` is the nested model group it was expanded from, or None for a top-level layer.
    """

    name: str
    weights: tuple[KerasWeight, ...]
    parent: str | None = None


@record
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
        return values.view(self.dtype.numpy) if values.dtype.kind == "V" else values.astype(self.dtype.numpy, copy=False)


# --- sniffing -------------------------------------------------------------------------------


def is_keras3(f: h5py.File) -> bool:
    layers = f.get(KERAS3_LAYERS)
    return is_group(layers) and any(is_group(child) and KERAS3_VARS in child for child in layers.values())


def weights_group(f: h5py.File) -> h5py.Group | None:
    """The group holding `layer_names`: the root, or `model_weights` in a `model.save` file."""
    if _has_list_attr(f.attrs, LAYER_NAMES):
        return f
    nested = f.get(MODEL_WEIGHTS)
    if is_group(nested) and _has_list_attr(nested.attrs, LAYER_NAMES):
        return nested
    return None


def _has_list_attr(attrs, name: str) -> bool:
    return name in attrs or f"{name}0" in attrs


# --- reading --------------------------------------------------------------------------------


def read_weights_file(path: Path) -> KerasWeightsFile:
    """Parse a Keras 2 weights file: layers, their ordered weights, lazy tensors (no data read)."""
    return read_guarded(Path(path), _read_open)


def _read_open(path: Path, f: h5py.File) -> KerasWeightsFile:
    group = weights_group(f)
    if group is None:
        if is_keras3(f):
            raise bad_input(path, "is in the Keras 3 weights layout (/layers/<class name>/vars/<n>, what "
                                  "save_weights writes for a path ending in .weights.h5), not the Keras 2 "
                                  "layout with layer names that this reader expects")
        raise _no_layer_names(path, f)
    size = file_size(path)
    names = string_list(path, group.attrs, LAYER_NAMES, "the root")
    check_layer_names(path, names)
    listed = _listed(path)
    layers: list[KerasLayer] = []
    for name in names:
        layers.extend(_read_layer(path, group, name, size, file_number(f), listed))
    seen: set[str] = set()
    for layer in layers:
        if layer.name in seen:
            raise bad_input(path, f"layer {layer.name!r} appears twice (once inside nested model "
                                  f"{layer.parent!r}?); layer names must be unique")
        seen.add(layer.name)
    extra = _extra_weights(path, f, group, size)
    return KerasWeightsFile(path, tuple(layers), tuple(extra), _string_attr(group.attrs, "backend"),
                            _string_attr(group.attrs, "keras_version"))


def _no_layer_names(path: Path, f: h5py.File) -> BadInput:
    """The error for an HDF5 file that names no Keras layers, saying what its root holds."""
    roots = ", ".join(sorted(f.keys())[:8]) or "nothing"
    return bad_input(path, f"an HDF5 file without Keras' layer_names attribute (root holds: {roots}); "
                           f"not a Keras weights file")


def read_layers_unexpanded(path: Path) -> KerasWeightsFile:
    """A Keras 2 weights file with each `layer_names` group as one layer, its `weight_names` in
    order, nothing expanded (no data read).

    For transformers' TF models (`TFBertForPreTraining.save_pretrained` -> `save_weights`): each
    main layer (`bert`, `mlm___cls`, ...) is one group whose weight names start with the model's
    name (`tf_bert_for_pre_training/bert/...`), which `read_weights_file` would take for a
    nested model; and a layer may list weights another layer owns (the MLM head holds the
    embeddings layer for its decoder), so one weight name can appear under two layers.
    """
    return read_guarded(Path(path), _read_unexpanded_open)


def _read_unexpanded_open(path: Path, f: h5py.File) -> KerasWeightsFile:
    group = weights_group(f)
    if group is None:
        raise _no_layer_names(path, f)
    size = file_size(path)
    names = string_list(path, group.attrs, LAYER_NAMES, "the root")
    check_layer_names(path, names)
    listed = _listed(path)
    layers = []
    for name in names:
        child, weight_names = _layer_group(path, group, name, listed)
        layers.append(KerasLayer(name, tuple(_read_weight(path, child, name, w, size, file_number(f))
                                             for w in weight_names)))
    return KerasWeightsFile(path, tuple(layers), tuple(_extra_weights(path, f, group, size)),
                            _string_attr(group.attrs, "backend"), _string_attr(group.attrs, "keras_version"))


def read_listed_datasets(path: Path) -> tuple[KerasWeight, ...]:
    """The datasets a file's root `layer_names` lists by their paths, in that order (no data read).

    The layout of transformers' TF shards (`tf_model-00001-of-00003.h5`, modeling_tf_utils
    `save_pretrained` with a `max_shard_size`): each weight a dataset at its name minus the
    model's (`bert/embeddings/LayerNorm/beta:0`), the root `layer_names` listing those paths.
    """
    return read_guarded(Path(path), _read_listed_open)


def _read_listed_open(path: Path, f: h5py.File) -> tuple[KerasWeight, ...]:
    names = string_list(path, f.attrs, LAYER_NAMES, "the root")
    if names is None:
        raise bad_input(path, "an HDF5 file without a layer_names attribute listing its datasets")
    repeated = sorted(n for n, count in Counter(names).items() if count > 1)
    if repeated:
        raise bad_input(path, f"layer_names lists {', '.join(map(repr, repeated))} more than once")
    size, home = file_size(path), file_number(f)
    weights = []
    for name in names:
        if not _is_relative_path(name):
            raise bad_input(path, f"layer_names holds {name!r}, not a relative dataset path")
        tensor = dataset_at(path, f, name, size, home, f"dataset {name!r}",
                            lambda found: f"layer_names lists dataset {name!r} but the file holds {found} there")
        weights.append(KerasWeight(name, tensor))
    return tuple(weights)


def read_guarded(path: Path, read):
    """`read(path, root)` on an HDF5 file opened by `nodes.read_with` (h5py's only when checked
    first for what would hang HDF5), with any HDF5 error turned into `BadInput` naming the file."""
    if not is_hdf5(path):
        raise bad_input(path, "not an HDF5 file (no HDF5 signature), so not a Keras weights file")
    try:
        return read_with(path, lambda f: read(path, f))
    except BadInput:
        raise
    except _H5_ERRORS as exc:
        raise bad_input(path, f"cannot read as HDF5: {type(exc).__name__}: {exc}") from None


def check_layer_names(path: Path, names: list[str]) -> None:
    duplicates = sorted(n for n, count in Counter(names).items() if count > 1)
    if duplicates:
        raise bad_input(path, f"layer_names lists {', '.join(map(repr, duplicates))} more than once")
    for name in names:
        if not name or "/" in name or name in (".", ".."):
            raise bad_input(path, f"layer_names holds {name!r}, which is not a Keras layer name")


def _read_layer(path: Path, root: h5py.Group, name: str, size: int, home: tuple,
                listed: dict[str, list[str] | None]) -> list[KerasLayer]:
    group, weight_names = _layer_group(path, root, name, listed)
    weights = tuple(_read_weight(path, group, name, w, size, home) for w in weight_names)
    if not is_nested_model(name, weight_names):
        return [KerasLayer(name, weights)]
    inner: dict[str, list[KerasWeight]] = {}
    for weight in weights:
        inner.setdefault(weight.name.split("/", 1)[0], []).append(weight)
    return [KerasLayer(inner_name, tuple(ws), parent=name) for inner_name, ws in inner.items()]


#: The `one_reading` question whose answer is each root `layer_names` entry with its group's
#: `weight_names` (None where it has no group or no such attribute): `keras_listing` asks it.
LISTED_WEIGHTS = "listed weights"


def _listed(path: Path) -> dict[str, list[str] | None]:
    """The weight names of the file's layers, as this reading's format detection already listed
    them (`keras_listing`), or {}: a reader then need not read each layer's attribute again."""
    listed = known(path, LISTED_WEIGHTS)
    return listed if isinstance(listed, dict) else {}


def _layer_group(path: Path, root: h5py.Group, name: str,
                 listed: dict[str, list[str] | None]) -> tuple[h5py.Group, list[str]]:
    """The group of layer `name` listed in `root`'s layer_names, and its weight names (`listed`'s
    when it has them: read by the same call from the same, unchanged file)."""
    where = f"layer {name!r}"
    group = get(root, name)
    if not is_group(group):
        found = "nothing" if group is None else "a dataset"
        raise bad_input(path, f"{where} is listed in layer_names but the file holds {found} under that name")
    weight_names = listed.get(name)
    if weight_names is None:
        weight_names = string_list(path, group.attrs, WEIGHT_NAMES, where)
    if weight_names is None:
        raise bad_input(path, f"{where} has no weight_names attribute")
    repeated = sorted(n for n, count in Counter(weight_names).items() if count > 1)
    if repeated:
        raise bad_input(path, f"{where} lists weight(s) {', '.join(map(repr, repeated))} more than once")
    return group, weight_names


def is_nested_model(name: str, weight_names: Sequence[str]) -> bool:
    """A group whose weights all start with other layers' names is a nested model."""
    return bool(weight_names) and not any(w.startswith(name + "/") for w in weight_names)


def _is_relative_path(name: str) -> bool:
    """A path below the group it is looked up in: not empty, not absolute, no empty, "." or ".." part."""
    return bool(name) and not name.startswith("/") and not any(part in ("", ".", "..") for part in name.split("/"))


def _read_weight(path: Path, group: h5py.Group, layer: str, name: str, size: int, home: tuple) -> KerasWeight:
    """The weight `name` listed by `layer`'s `group`; `home` is the file number of the file at `path`
    (see `_tensor_in_file`)."""
    where = f"layer {layer!r} weight {name!r}"
    if not _is_relative_path(name):
        raise bad_input(path, f"{where}: not a relative dataset name")
    return KerasWeight(name, dataset_at(path, group, name, size, home, where, lambda found: (
        f"{where} is listed in weight_names but the file holds {found} at {group.name}/{name}")))


def dataset_at(path: Path, group: h5py.Group, name: str, size: int, home: tuple, where: str,
               missing: Callable[[str], str]) -> LazyTensor:
    """Dataset `name` below `group` as a lazy tensor called `where` in errors (`_tensor_in_file`:
    `size` and `home` are those of the file at `path`). Where there is no dataset, the error says
    `missing(found)`, `found` being what is there instead: "nothing" or "a group"."""
    dataset = get(group, name)
    if not is_dataset(dataset):
        raise bad_input(path, missing("nothing" if dataset is None else "a group"))
    return _tensor_in_file(path, dataset, home, size, where)


def _tensor_in_file(path: Path, dataset: h5py.Dataset, home: tuple, size: int, where: str) -> LazyTensor:
    """`dataset` as a lazy tensor, refused when it lies in another file than `home`, the file
    number of the file at `path` (h5py's `fileno`: a dataset behind an external link has another;
    bertconv's own reader reads no external link)."""
    if home is not None and dataset.id.fileno != home:
        raise bad_input(path, f"{where} is an external link into {dataset.file.filename}; refused")
    return dataset_tensor(path, dataset, size, where)


def dataset_tensor(path: Path, dataset: h5py.Dataset | objects.Dataset, size: int, where: str) -> LazyTensor:
    if isinstance(dataset, objects.Dataset):
        return _contiguous(path, dataset.offset, dataset.dtype, dataset.shape, size, where)
    # Each property is asked of HDF5 once (h5py makes a new dtype or property list per ask): a
    # BERT's 206 weights are read in about half the time.
    stored = dataset.id.dtype
    try:
        dtype = _dtype_of(dataset, stored)
    except (KeyError, TypeError):
        raise bad_input(path, f"{where} has dtype {stored}, not a numeric type bertconv reads") from None
    if dataset.shape is None:
        raise bad_input(path, f"{where} is an empty (null-dataspace) dataset")
    shape = tuple(int(d) for d in dataset.shape)
    numel = math.prod(shape)
    plist = dataset.id.get_create_plist()
    layout = plist.get_layout()
    if layout == h5py.h5d.VIRTUAL or plist.get_external_count() > 0:
        raise bad_input(path, f"{where} keeps its data outside this file (a virtual dataset or external "
                              f"storage); refused")
    if _is_plain(plist, layout, stored, dtype):
        return _contiguous(path, dataset.id.get_offset(), dtype, shape, size, where)
    _check_stored_size(path, dataset, plist, numel * dtype.itemsize, where)
    return H5Tensor(path, dataset.name, dtype, shape, where)


def _contiguous(path: Path, offset: int | None, dtype: DType, shape: tuple[int, ...], size: int,
                where: str) -> LazyTensor:
    """A dataset stored as one contiguous run at `offset` (None: no byte allocated) of the file
    at `path`, of `size` bytes."""
    numel = math.prod(shape)
    if offset is None:
        if numel == 0:
            return ArrayTensor(np.empty(shape, dtype=dtype.numpy), dtype)
        raise bad_input(path, f"{where} has no data stored (the save was interrupted?)")
    check_span(path, offset, numel * dtype.itemsize, size, where)
    return MappedTensor(path, offset, dtype, shape, name=where)


def _dtype_of(dataset: h5py.Dataset, stored: np.dtype) -> DType:
    """The tensor dtype of `dataset`, whose stored dtype is `stored`. Keras 3 stores bfloat16 as
    2-byte opaque data marked by a `dtype` attribute (H5IOStore)."""
    if stored.kind == "V" and stored.itemsize == 2 and dataset.attrs.get("dtype") == "bfloat16":
        return dtypes.BFLOAT16
    return dtypes.from_numpy(stored)


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


def _is_plain(plist, layout: int, stored: np.dtype, dtype: DType) -> bool:
    """Stored as one contiguous (so unchunked) little-endian run in this file: mappable at its
    offset. `plist` is the dataset's creation property list, `layout` its layout."""
    return (layout == h5py.h5d.CONTIGUOUS and plist.get_nfilters() == 0
            and (stored == dtype.numpy or dtype is dtypes.BFLOAT16))


def _extra_weights(path: Path, f: h5py.File, group: h5py.Group, size: int) -> list[KerasWeight]:
    extra = []
    top = group.get(TOP_LEVEL_WEIGHTS)
    if is_group(top):
        names = string_list(path, top.attrs, WEIGHT_NAMES, TOP_LEVEL_WEIGHTS) or []
        extra.extend(_read_weight(path, top, TOP_LEVEL_WEIGHTS, n, size, file_number(f)) for n in names)
    optimizer = f.get(OPTIMIZER_WEIGHTS) if group is not f else None
    if is_group(optimizer):
        for raw in dataset_paths(optimizer):
            name = raw.decode("utf-8", "surrogateescape")
            extra.append(KerasWeight(f"{OPTIMIZER_WEIGHTS}/{name}", dataset_tensor(
                path, optimizer[name], size, f"{OPTIMIZER_WEIGHTS}/{name}")))
    return extra


def string_list(path: Path, attrs, name: str, where: str) -> list[str] | None:
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
        # bertconv's own reader gives a list, or one value for a scalar; h5py an array or a scalar.
        items = chunk if isinstance(chunk, list) else [chunk] if isinstance(chunk, (str, bytes, int, float)) \
            else np.atleast_1d(np.asarray(chunk)).reshape(-1)
        values.extend(_decode(path, item, f"{where}: attribute {name!r}") for item in items)
    return values


def _decode(path: Path, item, where: str) -> str:
    if isinstance(item, bytes):  # NumPy's bytes_ and str_ are bytes and str
        try:
            return bytes(item).decode("utf-8")
        except UnicodeDecodeError:
            raise bad_input(path, f"{where} holds {bytes(item)[:40]!r}, which is not UTF-8") from None
    if isinstance(item, str):
        return str(item)
    raise bad_input(path, f"{where} holds {item!r} ({type(item).__name__}), expected names (strings)")


def _string_attr(attrs, name: str) -> str | None:
    value = attrs.get(name)
    if isinstance(value, bytes):
        return bytes(value).decode("utf-8", "replace")
    return None if value is None else str(value)


