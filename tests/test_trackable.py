"""The TrackableObjectGraph decoder: equal to TensorFlow's own protobuf parse on real object-based
checkpoints, and a `BadInput` (never another exception) on malformed graphs."""

from __future__ import annotations

import numpy as np
import pytest

from bertconv.containers.tensorflow import protowire as pw
from bertconv.containers.tensorflow import bundle as tf_bundle, trackable
from bertconv.errors import BadInput

from conftest import FIXTURES

OBJECT_CHECKPOINTS = ["train-adam", "train-legacy-adam", "pool-nsp-mlm", "nested"]
SOURCE = "graph.bin"


def prefix(name: str):
    return FIXTURES / "bert4keras_pretraining" / name / "bert_model.ckpt"


def graph_bytes(name: str) -> bytes:
    return tf_bundle.BundleReader(prefix(name)).read_string_scalar(trackable.GRAPH_KEY)


# --- hand-encoded messages ----------------------------------------------------------------------


def child(node_id: int, local_name: bytes = b"layer-0") -> bytes:
    return pw.encode_varint_field(1, node_id) + pw.encode_len_field(2, local_name)


def attribute(full_name: bytes, key: bytes, name: bytes = b"VARIABLE_VALUE") -> bytes:
    return pw.encode_len_field(1, name) + pw.encode_len_field(2, full_name) + pw.encode_len_field(3, key)


def node(*fields: bytes) -> bytes:
    return pw.encode_len_field(1, b"".join(fields))


def children(*messages: bytes) -> bytes:
    return b"".join(pw.encode_len_field(1, m) for m in messages)


def attributes(*messages: bytes) -> bytes:
    return b"".join(pw.encode_len_field(2, m) for m in messages)


def parse(data: bytes) -> list[trackable.TrackableNode]:
    return trackable.parse_object_graph(data, source=SOURCE)


# --- against TensorFlow -------------------------------------------------------------------------


@pytest.mark.parametrize("name", OBJECT_CHECKPOINTS)
def test_every_node_equals_tensorflows_parse(name):
    pytest.importorskip("tensorflow")
    import tensorflow as tf
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    data = tf.train.load_checkpoint(str(prefix(name))).get_tensor(trackable.GRAPH_KEY)
    assert data == graph_bytes(name)  # the DT_STRING scalar decoder agrees too
    expected = trackable_object_graph_pb2.TrackableObjectGraph()
    expected.ParseFromString(data)
    got = parse(data)
    assert len(got) == len(expected.nodes)
    for ours, theirs in zip(got, expected.nodes, strict=True):
        assert [(c.node_id, c.local_name) for c in ours.children] == [
            (c.node_id, c.local_name) for c in theirs.children]
        assert [(a.name, a.full_name, a.checkpoint_key) for a in ours.attributes] == [
            (a.name, a.full_name, a.checkpoint_key) for a in theirs.attributes]


@pytest.mark.parametrize("name", OBJECT_CHECKPOINTS)
def test_every_variable_of_the_bundle_is_named_by_the_graph(name):
    names = trackable.variable_names(parse(graph_bytes(name)), source=SOURCE)
    keys = {k for k in tf_bundle.BundleReader(prefix(name)).entries if k.endswith("/.ATTRIBUTES/VARIABLE_VALUE")}
    assert keys == set(names)
    # Nested models add a level to the key, never to the Keras variable name.
    model_keys = [k for k in keys if not k.startswith("optimizer/") and "/.OPTIMIZER_SLOT/" not in k]
    assert all(names[k].split("/")[0].startswith(("Embedding-", "Transformer-", "MLM-", "Pooler-", "NSP-"))
               for k in model_keys)


def test_fields_this_reader_does_not_need_are_skipped():
    slot = pw.encode_varint_field(2, 1) + pw.encode_len_field(3, b"m") + pw.encode_varint_field(4, 0)
    data = node(children(child(1)), pw.encode_len_field(3, slot), pw.encode_fixed32_field(99, 7)) + node(
        attributes(attribute(b"Embedding-Token/embeddings", b"layer_with_weights-0/embeddings"))
    ) + pw.encode_varint_field(7, 1)
    nodes = parse(data)
    assert nodes[0].children == (trackable.Child(1, "layer-0"),) and nodes[0].attributes == ()
    assert nodes[1].attributes[0].full_name == "Embedding-Token/embeddings"


def test_an_empty_graph_has_no_nodes():
    assert parse(b"") == []


# --- malformed graphs ---------------------------------------------------------------------------


MALFORMED = {
    "child past the last node": (node(children(child(2))) + node(b""), "points at node 2, but the graph has 2"),
    "negative child": (node(children(child(-1))), "points at node -1"),
    "node id as bytes": (node(children(pw.encode_len_field(1, b"\x01"))), "node_id (1) has wire type length-delimited"),
    "children as a varint": (node(pw.encode_varint_field(1, 3)), "children (1) has wire type varint"),
    "nodes as a varint": (pw.encode_varint_field(1, 5), "nodes (1) has wire type varint"),
    "name not UTF-8": (node(attributes(attribute(b"\xff\xfe", b"k"))), "name is not UTF-8"),
    "truncated node": (node(children(child(0)))[:-2], "claims"),
    "truncated varint": (b"\x0a\x80", "truncated varint"),
    "group wire type": (pw.encode_tag(1, pw.WIRE_START_GROUP), "start-group"),
    "field number 0": (b"\x02\x00", "field number 0"),
    "one key, two names": (node(attributes(attribute(b"A/kernel", b"k"))) + node(attributes(attribute(b"B/kernel", b"k"))),
                           "is named 'B/kernel', but an earlier node names it 'A/kernel'"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_graph_raises_bad_input_naming_the_source(case):
    data, message = MALFORMED[case]
    with pytest.raises(BadInput, match=r"^graph\.bin: _CHECKPOINTABLE_OBJECT_GRAPH") as error:
        trackable.variable_names(parse(data), source=SOURCE)
    assert message in str(error.value)


def test_damaged_real_graphs_are_parsed_or_refused_never_anything_else():
    data = graph_bytes("pool-nsp-mlm")
    rng = np.random.default_rng(0)
    outcomes = {"parsed": 0, "refused": 0}
    for _ in range(300):
        damaged = bytearray(data)
        for position in rng.integers(0, len(damaged), size=int(rng.integers(1, 4))):
            damaged[position] = int(rng.integers(0, 256))
        cut = len(damaged) if rng.random() < 0.7 else int(rng.integers(0, len(damaged)))
        try:
            trackable.variable_names(parse(bytes(damaged[:cut])), source=SOURCE)
            outcomes["parsed"] += 1
        except BadInput:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 0 and outcomes["parsed"] > 0
