"""Writing a Keras 2 weights file (`write_weights_file`), as `save_weights_to_hdf5_group` writes
one: see `keras_h5` for the layout."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from ... import dtypes
from ...errors import bad_input
from ...lazy import lazy_module
from ...records import record
from ...tensor import LazyTensor
from .workarounds import allocated_unfilled, check_free_space, write_at_offsets

if TYPE_CHECKING:
    import h5py
    import numpy as np
else:  # imported on first use: most commands read no HDF5 file, and headers need no NumPy
    h5py = lazy_module("h5py")
    np = lazy_module("numpy")
from .keras import LAYER_NAMES, TOP_LEVEL_WEIGHTS, WEIGHT_NAMES, check_layer_names


#: Keras splits a list attribute whose array is larger than this over `name0`, `name1`, ...
#: (tf_keras/src/saving/legacy/hdf5_format.py, HDF5_OBJECT_HEADER_LIMIT).
HDF5_OBJECT_HEADER_LIMIT = 64512


@record
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

    Two passes, because HDF5 cannot survive a failed write (`containers/hdf5/workarounds.py`):
    h5py writes the structure alone, after a check that the disk has room for the whole file;
    then the tensors are written at their datasets' offsets with plain file writes.
    `on_tensor(nbytes)` is called after each tensor.
    """
    path = Path(path)
    check_layer_names(path, [layer.name for layer in layers])
    for layer in layers:
        for name, tensor in layer.weights:
            if tensor.dtype is dtypes.BFLOAT16:
                raise bad_input(path, f"layer {layer.name!r} weight {name!r} is bfloat16, which Keras HDF5 "
                                      f"files cannot hold; widen it to float32 first")
    check_free_space(path, data_bytes=sum(tensor.nbytes for layer in layers for _, tensor in layer.weights),
                     objects=sum(2 + 2 * len(layer.weights) for layer in layers),  # groups, datasets, parents
                     name_bytes=sum(len(name) for layer in layers for name, _ in layer.weights)
                     + sum(len(layer.name) for layer in layers))
    placed = _write_structure(path, layers, backend=backend, keras_version=keras_version)
    write_at_offsets(path, placed, on_tensor)


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
                                               dcpl=allocated_unfilled())
                placed.append((dataset.id.get_offset(), f"layer {layer.name!r} weight {name!r}", tensor))
        top = f.create_group(TOP_LEVEL_WEIGHTS)
        _save_list_attr(top, WEIGHT_NAMES, [])
    return placed


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
