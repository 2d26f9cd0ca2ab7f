"""The groups and datasets of an HDF5 file as bertconv's own reader (`metadata`) gives them: what
the Keras readers ask of h5py's, answered the same way (`get`, `keys`, `items`, `attrs`)."""

from __future__ import annotations

from ...dtypes import DType


class Unsupported(Exception):
    """This file uses what this reader does not read, or is not consistent: read it with h5py."""


class Node:
    """A group or a dataset: `name` is its path from the root as h5py names it ("/a/b")."""

    name: str
    attrs: dict[str, object]


class Dataset(Node):
    """A dataset stored contiguously in this file: `offset` is None when no byte was allocated
    (an empty or never-written dataset)."""

    def __init__(self, name: str, attrs: dict[str, object], shape: tuple[int, ...], dtype: DType,
                 offset: int | None):
        self.name, self.attrs, self.shape, self.dtype, self.offset = name, attrs, shape, dtype, offset


class Group(Node):
    """A group: its links by name, in HDF5's name order (bytewise), as h5py lists them."""

    def __init__(self, name: str, attrs: dict[str, object]):
        self.name, self.attrs = name, attrs
        self.links: dict[str, Node] = {}
        self.root: Group = self

    def get(self, path: str, default=None) -> Node | None:
        """The object at `path` (relative to this group, or absolute), as `h5py.Group.get`."""
        node: Node = self.root if path.startswith("/") else self
        for part in path.split("/"):
            if part in ("", "."):
                continue
            if not isinstance(node, Group) or part not in node.links:
                return default
            node = node.links[part]
        return node

    def __getitem__(self, path: str) -> Node:
        node = self.get(path)
        if node is None:
            raise KeyError(f"no object {path!r} in {self.name}")
        return node

    def __contains__(self, path: str) -> bool:
        return self.get(path) is not None

    def keys(self):
        return self.links.keys()

    def values(self):
        return self.links.values()

    def items(self):
        return self.links.items()


def walk(group: Group) -> list[tuple[str, Node]]:
    """Every object below `group` with its path relative to it, as HDF5 visits them (h5py's
    `visititems`): depth first in name order, each object once however often it is linked."""
    found: list[tuple[str, Node]] = []
    seen: set[int] = {id(group)}

    def visit(node: Group, prefix: str) -> None:
        for name, child in node.links.items():
            if id(child) in seen:
                continue
            seen.add(id(child))
            found.append((prefix + name, child))
            if isinstance(child, Group):
                visit(child, prefix + name + "/")

    visit(group, "")
    return found


def dataset_paths(group: Group) -> list[bytes]:
    """Every dataset below `group`, as `walk.dataset_paths` lists them from HDF5's own walk:
    relative paths (bytes), depth first in name order, each object once."""
    return [path.encode("utf-8") for path, node in walk(group) if isinstance(node, Dataset)]
