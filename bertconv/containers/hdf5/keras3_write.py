"""Keras 3 weight files (`*.weights.h5`) written with h5py alone, as Keras' `save_weights` and
keras-hub's `save_to_preset` write them (keras/src/saving/saving_lib.py `H5IOStore`).

Model-agnostic: the caller says where each object's variables go. An object with variables is a
group `<path>/vars` holding datasets `0`, `1`, ... in the order the object created them, its
`name` attribute the object's Keras name (Keras 3.15 writes it; loading reads the paths alone).
Objects without variables need no group: Keras loads an absent path as no variables.

bertconv lays the file out and writes it front to back (`containers/hdf5/image.py`), a bfloat16
variable as h5py stores the ml_dtypes arrays Keras hands it: 2-byte opaque data, which Keras marks
with a `dtype` attribute "bfloat16" and reads back by that mark.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from ... import dtypes
from ...records import record
from ...tensor import LazyTensor
from . import image

VARS = "vars"


@record
class Keras3Object:
    """One object with variables: its `path` in the file (`layers/transformer_encoder_1/
    _self_attention_layer/query_dense`, "" for the model itself), its Keras `name`, and its
    variables in creation order."""

    path: str
    name: str
    variables: tuple[LazyTensor, ...]


def write_keras3_file(path: Path, objects: Sequence[Keras3Object], *,
                      on_tensor: Callable[[int], None] | None = None) -> None:
    """Write `objects` as a Keras 3 weights file at `path` (a new file)."""
    image.write_file(Path(path), lambda layout: _lay_out(layout, objects), on_tensor)


def _lay_out(layout: image.Layout, objects: Sequence[Keras3Object]) -> list[image.Placed]:
    placed = []
    for obj in objects:
        folder = f"{obj.path}/{VARS}" if obj.path else VARS
        group = layout.group(folder)
        group.attrs["name"] = obj.name
        for index, tensor in enumerate(obj.variables):
            dataset = layout.dataset(f"{folder}/{index}", tuple(tensor.shape), tensor.dtype)
            if tensor.dtype is dtypes.BFLOAT16:
                dataset.attrs["dtype"] = "bfloat16"
            placed.append((dataset, f"{group.name}/{index}", tensor))
    return placed
