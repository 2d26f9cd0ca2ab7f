"""Writing a Keras 2 weights file (`write_weights_file`), as `save_weights_to_hdf5_group` writes
one: see `keras_h5` for the layout."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from ... import dtypes
from ...errors import bad_input
from ...records import record
from ...tensor import LazyTensor
from . import image
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

    bertconv lays the file out and writes it front to back (`containers/hdf5/image.py`).
    `on_tensor(nbytes)` is called after each tensor.
    """
    path = Path(path)
    check_layer_names(path, [layer.name for layer in layers])
    for layer in layers:
        for name, tensor in layer.weights:
            if tensor.dtype is dtypes.BFLOAT16:
                raise bad_input(path, f"layer {layer.name!r} weight {name!r} is bfloat16, which Keras HDF5 "
                                      f"files cannot hold; widen it to float32 first")
    image.write_file(path, lambda layout: _lay_out(layout, layers, backend=backend, keras_version=keras_version),
                     on_tensor)


def _lay_out(layout: image.Layout, layers: Sequence[LayerToWrite], *, backend: str,
             keras_version: str) -> list[image.Placed]:
    """The file's groups, names and datasets; returns (dataset, where, tensor) for every dataset."""
    placed = []
    f = layout.file
    _save_list_attr(f, LAYER_NAMES, [layer.name for layer in layers])
    f.attrs["backend"] = backend.encode("utf-8")
    f.attrs["keras_version"] = keras_version.encode("utf-8")
    for layer in sorted(layers, key=lambda layer: layer.name):
        _save_list_attr(layout.group(layer.name), WEIGHT_NAMES, [name for name, _ in layer.weights])
        for name, tensor in layer.weights:
            dataset = layout.dataset(f"{layer.name}/{name}", tuple(tensor.shape), tensor.dtype)
            placed.append((dataset, f"layer {layer.name!r} weight {name!r}", tensor))
    top = layout.group(TOP_LEVEL_WEIGHTS)
    _save_list_attr(top, WEIGHT_NAMES, [])
    return placed


def _save_list_attr(group: image.Group, name: str, values: list[str]) -> None:
    """`save_attributes_to_hdf5_group`: one attribute, or `name0`, `name1`, ... each holding a
    contiguous part under HDF5_OBJECT_HEADER_LIMIT bytes, split as numpy.array_split splits the
    NumPy array Keras makes of them (its strings as long as the longest, parts sized alike)."""
    data = [v.encode("utf-8") for v in values]
    too_long = [v for v in data if len(v) > HDF5_OBJECT_HEADER_LIMIT]
    if too_long:
        raise ValueError(f"names longer than {HDF5_OBJECT_HEADER_LIMIT} bytes cannot be stored: {too_long[:1]!r}")
    length = max((len(v) for v in data), default=0) or 1  # NumPy's `S` itemsize, 1 at the least
    chunks = 1
    while any(len(part) * length > HDF5_OBJECT_HEADER_LIMIT for part in _array_split(data, chunks)):
        chunks += 1
    if chunks == 1:
        group.attrs[name] = data
        return
    for index, part in enumerate(_array_split(data, chunks)):
        group.attrs[f"{name}{index}"] = image.FixedStrings(tuple(part), length)


def _array_split(values: list, chunks: int) -> list[list]:
    """numpy.array_split of a list: `chunks` contiguous parts, the first ones one longer."""
    size, longer = divmod(len(values), chunks)
    bounds = [0]
    for index in range(chunks):
        bounds.append(bounds[-1] + size + (index < longer))
    return [values[begin:end] for begin, end in zip(bounds, bounds[1:])]
