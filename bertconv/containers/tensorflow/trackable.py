"""TensorFlow's `TrackableObjectGraph`, decoded from the wire format without TensorFlow.

An object-based checkpoint (what Keras' `save_weights('x.ckpt')` and `tf.train.Checkpoint`
write) stores, under the key `_CHECKPOINTABLE_OBJECT_GRAPH`, a serialized graph of the objects
that were saved. Each variable appears as an attribute of its object node, with the variable's
own name (`full_name`, as Keras named it) and its key in the bundle (`checkpoint_key`):

    TrackableObjectGraph  { repeated TrackableObject nodes = 1; }         node 0 is the root
    TrackableObject       { repeated ObjectReference children = 1;
                            repeated SerializedTensor attributes = 2;
                            repeated SlotVariableReference slot_variables = 3; ... }
    ObjectReference       { int32 node_id = 1; string local_name = 2; }
    SerializedTensor      { string name = 1; string full_name = 2; string checkpoint_key = 3; }
    SlotVariableReference { int32 original_variable_node_id = 2; string slot_name = 3;
                            int32 slot_variable_node_id = 4; }

Fields this reader does not need are skipped, as protobuf readers do.
"""

from __future__ import annotations

from pathlib import Path

from ...records import record
from . import protowire as pw

GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"


@record
class Child:
    node_id: int
    local_name: str


@record
class Attribute:
    """A saved value of a node: `name` is its role ("VARIABLE_VALUE"), `full_name` the variable's
    own name without ":0", `checkpoint_key` its key in the tensor bundle."""

    name: str
    full_name: str
    checkpoint_key: str


@record
class TrackableNode:
    children: tuple[Child, ...]
    attributes: tuple[Attribute, ...]


def _text(field: pw.Field, what: str, *, source: Path | str, entry: str) -> str:
    pw.require_wire_type(field, pw.WIRE_LEN, what, source=source, entry=entry)
    try:
        return bytes(field.value).decode("utf-8")
    except UnicodeDecodeError:
        raise pw.bad_input(source, f"{entry}: {what} is not UTF-8") from None


def _int(field: pw.Field, what: str, *, source: Path | str, entry: str) -> int:
    pw.require_wire_type(field, pw.WIRE_VARINT, what, source=source, entry=entry)
    return pw.as_int64(field.value)


def _child(data, *, source, entry: str) -> Child:
    node_id, local_name = 0, ""
    for field in pw.iter_fields(data, source=source, entry=entry):
        if field.number == 1:
            node_id = _int(field, "node_id", source=source, entry=entry)
        elif field.number == 2:
            local_name = _text(field, "local_name", source=source, entry=entry)
    return Child(node_id, local_name)


def _attribute(data, *, source, entry: str) -> Attribute:
    values = {1: "", 2: "", 3: ""}
    for field in pw.iter_fields(data, source=source, entry=entry):
        if field.number in values:
            values[field.number] = _text(field, ("name", "full_name", "checkpoint_key")[field.number - 1],
                                         source=source, entry=entry)
    return Attribute(values[1], values[2], values[3])


def parse_object_graph(data: bytes, *, source: Path | str) -> list[TrackableNode]:
    """The nodes of a serialized `TrackableObjectGraph`, in order (node 0 is the root).

    Raises `BadInput` naming `source` on malformed data or a child that points at no node.
    """
    entry = GRAPH_KEY
    nodes = []
    for node_field in pw.iter_fields(data, source=source, entry=entry):
        if node_field.number != 1:
            continue
        pw.require_wire_type(node_field, pw.WIRE_LEN, "nodes", source=source, entry=entry)
        children, attributes = [], []
        where = f"{entry} node {len(nodes)}"
        for field in pw.iter_fields(node_field.value, source=source, entry=where):
            if field.number == 1:
                pw.require_wire_type(field, pw.WIRE_LEN, "children", source=source, entry=where)
                children.append(_child(field.value, source=source, entry=where))
            elif field.number == 2:
                pw.require_wire_type(field, pw.WIRE_LEN, "attributes", source=source, entry=where)
                attributes.append(_attribute(field.value, source=source, entry=where))
        nodes.append(TrackableNode(tuple(children), tuple(attributes)))
    for index, node in enumerate(nodes):
        for child in node.children:
            if not 0 <= child.node_id < len(nodes):
                raise pw.bad_input(source, f"{entry} node {index}: child {child.local_name!r} points at node "
                                           f"{child.node_id}, but the graph has {len(nodes)} nodes")
    return nodes


def variable_names(nodes: list[TrackableNode], *, source: Path | str) -> dict[str, str]:
    """checkpoint_key -> full_name of every saved variable in the graph.

    Raises `BadInput` naming `source` when one key is given two different names: which layer the
    variable belongs to would then be a guess.
    """
    names: dict[str, str] = {}
    for index, node in enumerate(nodes):
        for attribute in node.attributes:
            if not attribute.checkpoint_key:
                continue
            known = names.setdefault(attribute.checkpoint_key, attribute.full_name)
            if known != attribute.full_name:
                raise pw.bad_input(source, f"{GRAPH_KEY} node {index}: checkpoint key {attribute.checkpoint_key!r} "
                                           f"is named {attribute.full_name!r}, but an earlier node names it {known!r}")
    return names


# --- the keys of an object-based checkpoint ------------------------------------------------

#: A variable's value is saved under its object path plus this suffix.
VARIABLE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"

#: Keys that are saved state but not model weights, and why (by prefix, or infix if it starts
#: with "/"): what Keras optimizers (new and legacy) and `tf.train.Checkpoint` add.
NOT_WEIGHTS = (
    ("optimizer/", "optimizer state (iterations, learning rate, moment slots)"),
    ("/.OPTIMIZER_SLOT/", "optimizer slot of a weight (legacy Keras optimizer)"),
    ("save_counter/", "checkpoint bookkeeping (save counter)"),
)
GRAPH_REASON = "the object graph naming the saved objects (not a weight)"


def not_a_weight(key: str) -> str | None:
    """Why a bundle key is saved state but no model variable, or None for a variable's key.

    Optimizer state nested under a model object (`model/optimizer/...` is not written by
    Keras, but `<path>/.OPTIMIZER_SLOT/...` is) is recognised by its infix."""
    if key == GRAPH_KEY:
        return GRAPH_REASON
    for marker, reason in NOT_WEIGHTS:
        if key.startswith(marker) or (marker.startswith("/") and marker in key):
            return reason
    return None


def object_path(key: str) -> str | None:
    """The object path of a variable's key (`encoder/_pooler_layer/kernel`), or None if the key
    is not a variable value."""
    return key[: -len(VARIABLE_SUFFIX)] if key.endswith(VARIABLE_SUFFIX) else None


def read_variable_names(reader, *, why: str) -> dict[str, str]:
    """checkpoint key -> full_name of every variable, from the object graph of `reader` (a
    `tf_bundle.BundleReader`).

    The graph is stored in the data file. Without it, raises `BadInput` saying what the index
    alone gives (what `tf.train.list_variables` lists: keys, shapes, counts) and, in `why`, what
    it cannot tell."""
    if GRAPH_KEY not in reader.entries:
        raise pw.bad_input(reader.index_path, f"object-based checkpoint without {GRAPH_KEY}: {why}")
    data = reader.data_path(reader.entries[GRAPH_KEY].shard_id)
    if not data.exists():
        variables = [entry for key, entry in reader.entries.items()
                     if not_a_weight(key) is None and object_path(key) is not None and entry.dtype is not None]
        other = len(reader.entries) - len(variables) - 1
        values = sum(entry.numel for entry in variables)
        raise pw.bad_input(data, f"is absent, and the object graph that names this checkpoint's variables "
                                 f"({GRAPH_KEY}) is stored there. The index alone gives {len(variables)} model "
                                 f"variables ({values:,} values) and {other} optimizer or bookkeeping entries, with "
                                 f"their keys and shapes, but not what each variable is: {why}. Put the data file "
                                 f"beside the index to inspect, audit or convert it")
    nodes = parse_object_graph(reader.read_string_scalar(GRAPH_KEY), source=reader.index_path)
    return variable_names(nodes, source=reader.index_path)
