"""HDF5 files laid out by bertconv itself and written in one front-to-back stream.

A writer (`keras_write`, `keras3_write`) makes groups, attributes and datasets in a `Layout`, as
it would with h5py; `write_file` then lays the file out in HDF5's oldest format (`encoding.py`,
what h5py writes by default and Keras reads): every object's metadata first, then each dataset's
values in the order the datasets were made, and writes it through `stream.append`: past the page
cache for a large file, transposes computed straight into the output. The objects are the ones
h5py makes for the same calls (a test reads both files with h5py and compares every object), but
their bytes are placed differently: the metadata together at the front, which is also what a
reader reads first.

Why not h5py: importing it (and NumPy) and laying the file out through HDF5 took a bert-base
conversion to a Keras file 75-200 ms before its first byte could be written; laid out here, the
file starts at once and NumPy is imported while it is written. And HDF5 never writes the file:
after a failed write (a full disk) h5py's close crashes the process (SIGSEGV, HDF5 1.14), where
here a full disk is an ordinary OSError (found before anything is written for a large file,
whose size is reserved).

No object records when it was made, so the same input gives the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path

from ...dtypes import DType
from ...records import record
from ...tensor import LazyTensor
from .. import stream
from ..direct_output import open_output
from . import encoding as enc

#: Each dataset's values start at a multiple of this many bytes (a cache line).
DATA_ALIGNMENT = 64


@record
class FixedStrings:
    """An attribute's value stored as fixed-length strings (`length` bytes each, zero-padded), as
    h5py stores a NumPy `S` array; a list of bytes is stored as variable-length strings."""

    values: tuple[bytes, ...]
    length: int


#: What an attribute may hold, stored as h5py 3 stores it: `str` a variable-length UTF-8 string,
#: `bytes` a variable-length ASCII one, a list of bytes a 1-D array of those, an empty list an
#: empty float64 array, `FixedStrings` fixed-length strings.
AttributeValue = str | bytes | list | tuple | FixedStrings


class Attributes:
    """An object's attributes, set as with h5py (`attrs[name] = value`, see `AttributeValue`)."""

    def __init__(self):
        self.values: dict[str, AttributeValue] = {}

    def __setitem__(self, name: str, value: AttributeValue) -> None:
        if isinstance(value, (list, tuple)) and not all(isinstance(v, bytes) for v in value):
            raise TypeError(f"attribute {name!r}: a list must hold bytes")
        if not isinstance(value, (str, bytes, list, tuple, FixedStrings)):
            raise TypeError(f"attribute {name!r}: {type(value).__name__} is not written")
        self.values[name] = value


class Group:
    """A group: `name` its path ("/" the file), `attrs`, its members by name."""

    def __init__(self, name: str):
        self.name = name
        self.attrs = Attributes()
        self.members: dict[bytes, Group | Dataset] = {}


class Dataset:
    """A dataset of `shape` and `dtype`, its values the writer's (`address` set by the layout)."""

    def __init__(self, name: str, shape: tuple[int, ...], dtype: DType):
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.attrs = Attributes()
        self.nbytes = math.prod(shape) * dtype.itemsize
        self.address: int | None = None


#: (dataset, where, tensor): a dataset and the tensor whose bytes it holds ("where" names it in messages).
Placed = tuple[Dataset, str, LazyTensor]


class Layout:
    """The objects of a new HDF5 file: its root group (`file`), groups and datasets by path."""

    def __init__(self):
        self.file = Group("/")
        self.datasets: list[Dataset] = []  # in the order they were made: the order of their values

    def group(self, path: str) -> Group:
        """The group at `path` ("a/b/c"), made with any group missing on the way."""
        group = self.file
        for part in (p for p in path.split("/") if p):  # as HDF5 reads "a//b/"
            member = group.members.get(part.encode("utf-8"))
            if member is None:
                member = group.members[part.encode("utf-8")] = Group(f"{group.name.rstrip('/')}/{part}")
            if not isinstance(member, Group):
                raise ValueError(f"{member.name} is a dataset, not a group")
            group = member
        return group

    def dataset(self, path: str, shape: tuple[int, ...], dtype: DType) -> Dataset:
        """A new dataset at `path` (its groups made) of `shape` and `dtype`."""
        folder, _, name = path.strip("/").rpartition("/")
        group = self.group(folder)
        if not name or name.encode("utf-8") in group.members:
            raise ValueError(f"{group.name.rstrip('/')}/{name} exists already, or is no name")
        enc.numeric_type(dtype)  # a dtype that cannot be written is refused here, not mid-file
        dataset = group.members[name.encode("utf-8")] = Dataset(f"{group.name.rstrip('/')}/{name}",
                                                               tuple(shape), dtype)
        self.datasets.append(dataset)
        return dataset


def write_file(path: Path, lay_out: Callable[[Layout], list[Placed]],
               on_tensor: Callable[[int], None] | None = None) -> None:
    """Write a new HDF5 file at `path`: `lay_out(layout)` makes its objects and returns the tensor
    of every dataset; then the file is written front to back. `on_tensor(nbytes)` is called after
    each tensor."""
    layout = Layout()
    placed = lay_out(layout)
    tensors = {id(dataset): (where, tensor) for dataset, where, tensor in placed}
    if len(tensors) != len(placed) or set(tensors) != {id(d) for d in layout.datasets}:
        raise ValueError("every dataset must be given exactly one tensor")
    metadata = _metadata(layout)
    pieces: list[stream.Piece] = [metadata]
    position = len(metadata)
    for dataset in layout.datasets:
        where, tensor = tensors[id(dataset)]
        if tensor.nbytes != dataset.nbytes:
            raise ValueError(f"{where}: a tensor of {tensor.nbytes} bytes for a dataset of {dataset.nbytes}")
        if dataset.nbytes:
            pieces += [stream.Padding(dataset.address - position), (where, tensor.dtype, tuple(tensor.shape), tensor)]
            position = dataset.address + dataset.nbytes
    with open_output(path, position) as out:
        stream.append(out, pieces, on_tensor=on_tensor)


def _metadata(layout: Layout) -> bytes:
    """The file's bytes before its first dataset's values, every address decided: each dataset's
    `address` is set, its values after the metadata in the order the datasets were made."""
    # First every header's length (no address changes one), which also collects the attributes'
    # variable-length strings: their heap collection follows the superblock, before the headers.
    sizes, strings = [], []
    for obj in _objects(layout.file):
        sizes.append(len(enc.object_header(_messages(obj, None, strings))))
    end = enc.SUPERBLOCK_BYTES + (enc.global_heap_bytes(strings) if strings else 0)
    at: dict[int, int] = {}  # id(object) -> its header's address
    plans: dict[int, _GroupPlan] = {}
    for obj, size in zip(_objects(layout.file), sizes):
        at[id(obj)] = end
        end += size
        if isinstance(obj, Group):
            plans[id(obj)] = _GroupPlan(obj, end)
            end = plans[id(obj)].end
    data = end
    for dataset in layout.datasets:
        dataset.address = -(-data // DATA_ALIGNMENT) * DATA_ALIGNMENT
        data = dataset.address + dataset.nbytes
    file_end = max([end] + [d.address + d.nbytes for d in layout.datasets if d.nbytes])

    root = plans[id(layout.file)]
    image = bytearray(enc.superblock(file_end, at[id(layout.file)], root.btree, root.heap))
    if strings:
        image += enc.global_heap(strings)
    numbered: list[bytes] = []  # the same strings, numbered again as the headers refer to them
    for obj in _objects(layout.file):
        plan = plans.get(id(obj))
        image += enc.object_header(_messages(obj, plan, numbered))
        if plan is not None:
            image += plan.encode(at, plans)
    return bytes(image)


def _objects(group: Group) -> Iterator[Group | Dataset]:
    """Every object below and with `group`, depth first, members in name order."""
    yield group
    for name in sorted(group.members):
        member = group.members[name]
        if isinstance(member, Group):
            yield from _objects(member)
        else:
            yield member


def _messages(obj: Group | Dataset, plan: _GroupPlan | None, strings: list[bytes]) -> list:
    """`obj`'s header messages (a group's B-tree and heap from its `plan`; placeholders while
    sizes are counted); its variable-length strings appended to `strings`, the objects of the heap
    collection after the superblock, and referred to by their number there."""
    if isinstance(obj, Group):
        messages = [(enc.SYMBOL_TABLE, 0, enc.symbol_table_message(plan.btree if plan else 0, plan.heap if plan else 0))]
    else:
        messages = enc.dataset_messages(obj.shape, enc.numeric_type(obj.dtype), obj.address or 0, obj.nbytes)
    for name, value in obj.attrs.values.items():
        messages.append((enc.ATTRIBUTE, 0, _attribute(name, value, strings)))
    return messages


def _attribute(name: str, value: AttributeValue, strings: list[bytes]) -> bytes:
    def reference(s: bytes) -> bytes:
        strings.append(s)
        return enc.vlen_reference(len(s), enc.SUPERBLOCK_BYTES, len(strings))

    if isinstance(value, FixedStrings):
        data = b"".join(v.ljust(value.length, b"\0") for v in value.values)
        datatype, space = enc.fixed_string_type(value.length), enc.dataspace((len(value.values),))
    elif isinstance(value, (str, bytes)):
        encoded = value.encode("utf-8") if isinstance(value, str) else value
        data, datatype, space = reference(encoded), enc.vlen_string_type(utf8=isinstance(value, str)), enc.dataspace(())
    elif value:
        data = b"".join(reference(v) for v in value)
        datatype, space = enc.vlen_string_type(utf8=False), enc.dataspace((len(value),))
    else:
        data, datatype, space = b"", enc.float64_type(), enc.dataspace((0,))
    return enc.attribute_message(name.encode("utf-8"), datatype, space, data)


class _GroupPlan:
    """Where a group's B-tree nodes, symbol nodes and local heap go, from `start` on (`end`)."""

    def __init__(self, group: Group, start: int):
        self.group = group
        self.names = sorted(group.members)
        per_node, fan_out = 2 * enc.LEAF_K, 2 * enc.INTERNAL_K
        self.symbol_nodes = [self.names[i:i + per_node] for i in range(0, len(self.names), per_node)]
        counts = [max(1, -(-len(self.symbol_nodes) // fan_out))]  # B-tree nodes per level, leaves first
        while counts[-1] > 1:
            counts.append(-(-counts[-1] // fan_out))
        self.levels = counts
        self.btree_at = [start]  # first node of each level, leaves first, the root level last
        position = start + counts[0] * enc.BTREE_NODE_BYTES
        for count in counts[1:]:
            self.btree_at.append(position)
            position += count * enc.BTREE_NODE_BYTES
        self.btree = self.btree_at[-1]
        self.symbols_at = position
        self.heap = position + len(self.symbol_nodes) * enc.SYMBOL_NODE_BYTES
        self._heap_bytes, self._name_offsets = enc.local_heap(self.heap, self.names)
        self.end = self.heap + len(self._heap_bytes)

    def encode(self, at: dict[int, int], plans: dict[int, _GroupPlan]) -> bytes:
        offset_of = dict(zip(self.names, self._name_offsets))
        nodes, lasts = [], []  # symbol nodes, and the heap offset of each one's last name
        for names in self.symbol_nodes:
            entries = []
            for name in names:
                member = self.group.members[name]
                plan = plans.get(id(member))
                entries.append(enc.symbol_table_entry(offset_of[name], at[id(member)],
                                                      (plan.btree, plan.heap) if plan else None))
            nodes.append(enc.symbol_node(entries))
            lasts.append(offset_of[names[-1]])
        children = [self.symbols_at + i * enc.SYMBOL_NODE_BYTES for i in range(len(nodes))]
        tree = bytearray()
        fan_out = 2 * enc.INTERNAL_K
        for level, (count, first) in enumerate(zip(self.levels, self.btree_at)):
            parents, parent_lasts = [], []
            for n in range(count):
                chunk = range(n * fan_out, min(len(children), (n + 1) * fan_out))
                left_key = lasts[chunk.start - 1] if chunk.start else 0
                keys = [left_key] + [lasts[i] for i in chunk]
                left = first + (n - 1) * enc.BTREE_NODE_BYTES if n else enc.UNDEFINED
                right = first + (n + 1) * enc.BTREE_NODE_BYTES if n + 1 < count else enc.UNDEFINED
                tree += enc.btree_node(level, keys, [children[i] for i in chunk], left, right)
                parents.append(first + n * enc.BTREE_NODE_BYTES)
                parent_lasts.append(keys[-1])
            children, lasts = parents, parent_lasts
        return bytes(tree) + b"".join(nodes) + self._heap_bytes
