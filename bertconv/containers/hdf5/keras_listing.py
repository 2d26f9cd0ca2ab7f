"""What a Keras HDF5 file lists, learnt without reading its datasets: its layout, its layers and
their weights' names. Format detection asks these of every HDF5 file (each reader of Keras files
in turn), so within one reading each is answered once (`one_reading.remembered`).
"""

from __future__ import annotations

from pathlib import Path

from .keras import LAYER_NAMES, LISTED_WEIGHTS, WEIGHT_NAMES, is_keras3, is_nested_model, string_list, weights_group
from ..one_reading import remembered
from .nodes import get, is_group, read_with
from .signature import is_hdf5

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    import h5py


def layout(path: Path) -> str | None:
    """"keras2" for a file with Keras 2 `layer_names`, "keras3" for the `/layers/*/vars` layout,
    None for anything else (another HDF5 file, or not HDF5 at all). Never raises."""
    return remembered(path, "layout", lambda: _layout(path))


def _layout(path: Path) -> str | None:
    if not is_hdf5(path):
        return None
    try:
        return read_with(path, _layout_of)
    except Exception:  # noqa: BLE001 - sniffing answers "not mine" for any unreadable file
        return None


def _layout_of(f: h5py.File) -> str | None:
    if weights_group(f) is not None:
        return "keras2"
    return "keras3" if is_keras3(f) else None


def layer_names(path: Path) -> list[str]:
    """The root `layer_names` of a Keras 2 file, plus the first path component of every weight
    of a nested model group; [] for a file that is not one. Reads attributes only; never raises."""
    listed = _listed_weights(path)
    inner = [w.split("/", 1)[0] for name, weights in listed.items() for w in weights or ()
             if not w.startswith(name + "/")]
    return list(dict.fromkeys([*listed, *inner]))


def weight_names(path: Path) -> dict[str, list[str]]:
    """The layers of a Keras 2 file with their weights' names as `read_weights_file` lists them (a
    nested model's layers in its place); {} for a file that is not one. Attributes only; never raises."""
    layers: dict[str, list[str]] = {}
    for name, weights in _listed_weights(path).items():
        weights = weights or []
        if not is_nested_model(name, weights):
            layers[name] = weights
            continue
        for weight in weights:
            layers.setdefault(weight.split("/", 1)[0], []).append(weight)
    return layers


def _listed_weights(path: Path) -> dict[str, list[str] | None]:
    """Each root `layer_names` entry with its group's `weight_names` (None when it has no group or
    no such attribute); `keras.read_weights_file` takes them from here within one reading."""
    return remembered(path, LISTED_WEIGHTS, lambda: _list_weights(path))


def _list_weights(path: Path) -> dict[str, list[str] | None]:
    def listing(f: h5py.File) -> dict[str, list[str] | None]:
        group = weights_group(f)
        if group is None:
            return {}
        listed = {}
        for name in string_list(path, group.attrs, LAYER_NAMES, "the root") or []:
            child = get(group, name)
            listed[name] = string_list(path, child.attrs, WEIGHT_NAMES, f"layer {name!r}") if is_group(child) else None
        return listed

    try:
        return read_with(path, listing)
    except Exception:  # noqa: BLE001 - a listing for sniffing; `read_weights_file` reports errors
        return {}
