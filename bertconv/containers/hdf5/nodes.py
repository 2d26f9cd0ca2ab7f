"""An HDF5 file opened by whichever reader can: bertconv's own (`metadata`, no h5py, no NumPy)
where it reads the whole file, h5py otherwise. The Keras readers ask a group or a dataset through
these few functions, and read either the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ...lazy import lazy_module
from ..one_reading import remembered
from . import metadata, objects, walk
from .workarounds import check_global_heaps

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import TypeVar

    import h5py

    T = TypeVar("T")
else:  # imported on first use: only for a file bertconv's own reader does not read
    h5py = lazy_module("h5py")


def read_with(path: Path, read: Callable[[object], T]) -> T:
    """`read(root)`, `root` being the file's root group as bertconv's own reader parses it, or
    when that reader does not read this file, an open `h5py.File` (the file first checked for
    what would hang HDF5)."""
    root = own_tree(path)
    if root is not None:
        return read(root)
    check_global_heaps(path)
    with h5py.File(path, "r") as f:
        return read(f)


def own_tree(path: Path) -> objects.Group | None:
    """The file's root group as `metadata` parses it, once per reading; None when it cannot."""
    return remembered(path, "hdf5 metadata", lambda: _parse(path))


def _parse(path: Path) -> objects.Group | None:
    try:
        return metadata.read_tree(path)
    except (objects.Unsupported, OSError):
        return None


def is_group(node) -> bool:
    if node is None or isinstance(node, objects.Node):
        return isinstance(node, objects.Group)
    return isinstance(node, h5py.Group)


def is_dataset(node) -> bool:
    if node is None or isinstance(node, objects.Node):
        return isinstance(node, objects.Dataset)
    return isinstance(node, h5py.Dataset)


def get(group, name: str):
    """`group.get(name)`; for h5py, without the `File` object h5py makes for every dataset it
    opens (half the time of opening one)."""
    if isinstance(group, objects.Group):
        return group.get(name)
    try:
        opened = h5py.h5o.open(group.id, name.encode("utf-8"))
    except KeyError:
        return None
    if isinstance(opened, h5py.h5d.DatasetID):
        return h5py.Dataset(opened)
    return h5py.Group(opened) if isinstance(opened, h5py.h5g.GroupID) else h5py.Datatype(opened)


def file_number(f) -> tuple | None:
    """h5py's number of an open file, which a dataset behind an external link does not share;
    None for bertconv's own reader, which reads no external link."""
    return None if isinstance(f, objects.Node) else f.id.fileno


def dataset_paths(group) -> list[bytes]:
    """The path of every dataset below `group` (an open file is its root group), relative to it
    and as HDF5 stores it (bytes, not decoded), in HDF5's visiting order, each dataset once."""
    return objects.dataset_paths(group) if isinstance(group, objects.Group) else walk.dataset_paths(group)
