"""What Keras does with a model's layers, for the formats that must know the model to read its
Keras file: the order of `model.layers` in a functional model (hence of an HDF5 file's
`layer_names`), and the group each layer gets in the Keras 3 weights layout, which stores no
layer names (`containers/hdf5/keras.py` reads the files; it knows no model).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

from ...records import record


@record
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
