"""Fuzzing the Hugging Face TF (`tf_model.h5`, single and shard) and Flax (`flax_model.msgpack`) readers.

- flax msgpack: byte mutations (`fuzzing.mutations`, concentrated on every array record's
  header), and structural mutants built with `msgpack` itself: keys that are not strings or
  repeat, maps nested past any parameter tree, arrays with lying shapes, dtypes or byte counts,
  other ext types, chunked arrays, trailing bytes, huge declared map and bin lengths.
- tf_model.h5 and a shard: byte mutations concentrated on the superblock and each dataset's
  ends, in a forked child (HDF5 is C code; `fuzzing.in_child`).

Every case, read as the format's own reader reads it and then every tensor read (`check_case`:
under a deadline and tracemalloc), ends in a correct read or `BertconvError`, nothing else.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import h5py
import msgpack
import numpy as np
import pytest

from bertconv.containers import msgpack_file
from bertconv.formats.hf import flax as hf_flax, tf as hf_tf
from conftest import FIXTURES
from fuzzing import check_case, dataset_boundaries, in_child, mutations, share_of_cases

pytestmark = pytest.mark.fuzz

FLAX = FIXTURES / "hf_flax"
TF = FIXTURES / "hf_tf"


def read_with(read):
    def reader(path: Path) -> None:
        for param in read(path):
            with np.errstate(all="ignore"):  # mutated values may be NaN
                np.asarray(param.tensor.read()).sum()
    return reader


def record_starts(path: Path) -> list[int]:
    """Byte positions worth mutating at: each array's raw bytes and the header just before."""
    spots = {0, 1}
    for array in msgpack_file.read_file(path):
        span = array.tensor.byte_span()
        if span is not None:
            spots.update({span[1] - 40, span[1] - 8, span[1]})
    return sorted(s for s in spots if s >= 0)


@pytest.mark.parametrize("name", ["pretraining", "bf16"])
def test_flax_reader_survives_byte_mutations(tmp_path, name):
    source = FLAX / name / hf_flax.FLAX_FILE
    target = tmp_path / hf_flax.FLAX_FILE
    cases = share_of_cases(0.15)
    outcomes = Counter()
    for _kind, label, mutant in mutations(source.read_bytes(), seed=31, count=cases, boundaries=record_starts(source)):
        target.write_bytes(mutant)
        outcomes[check_case(target, f"{name} {label}", read_with(hf_flax.read))] += 1
    print(f"flax {name}: {cases} cases: {dict(outcomes)}")
    assert sum(outcomes.values()) == cases and outcomes["refused"] > 0


def _array(shape, dtype: str, raw: bytes, code: int = msgpack_file.EXT_NDARRAY) -> msgpack.ExtType:
    return msgpack.ExtType(code, msgpack.packb((list(shape), dtype, raw), use_bin_type=True))


def structural_mutants(seed: int):
    """(label, bytes) of msgpack files that are valid msgpack but wrong as a flax BERT."""
    rng = random.Random(seed)
    good = np.arange(24, dtype=np.float32).tobytes()

    def tree(leaf) -> dict:
        return {"bert": {"embeddings": {"word_embeddings": {"embedding": leaf}}}}

    yield "not a map", msgpack.packb([1, 2, 3])
    yield "int key", msgpack.packb({1: {"a": _array([6], "float32", good)}})
    yield "bytes key", msgpack.packb({b"bert": _array([6], "float32", good)}, use_bin_type=True)
    yield "string leaf", msgpack.packb(tree("hello"))
    yield "list leaf", msgpack.packb(tree([1, 2]))
    yield "complex ext", msgpack.packb(tree(_array([6], "float32", good, code=2)))
    yield "npscalar ext", msgpack.packb(tree(_array([], "float32", good[:4], code=3)))
    yield "unknown ext", msgpack.packb(tree(msgpack.ExtType(77, b"xyz")))
    yield "chunked", msgpack.packb(tree({"__msgpack_chunked_array__": True, "shape": {"0": 6}}))
    yield "shape too big", msgpack.packb(tree(_array([7, 1], "float32", good)))
    yield "shape too small", msgpack.packb(tree(_array([5], "float32", good)))
    yield "huge shape", msgpack.packb(tree(_array([2**62, 2**62], "float32", good)))
    yield "zero with huge", msgpack.packb(tree(_array([0, 2**60], "float32", b"")))
    yield "negative dim", msgpack.packb(tree(_array([-6], "float32", good)))
    yield "bool dim", msgpack.packb(tree(_array([True, 6], "float32", good)))
    yield "shape not list", msgpack.packb(tree(msgpack.ExtType(1, msgpack.packb((6, "float32", good),
                                                                                use_bin_type=True))))
    yield "dtype object", msgpack.packb(tree(_array([6], "object", good)))
    yield "dtype int", msgpack.packb(tree(msgpack.ExtType(1, msgpack.packb(([6], 5, good), use_bin_type=True))))
    yield "bytes as str", msgpack.packb(tree(msgpack.ExtType(1, msgpack.packb(([6], "float32", "x" * 24)))))
    yield "two-tuple", msgpack.packb(tree(msgpack.ExtType(1, msgpack.packb(([6], "float32"), use_bin_type=True))))
    yield "four-tuple", msgpack.packb(tree(msgpack.ExtType(1, msgpack.packb(([6], "float32", good, 1),
                                                                            use_bin_type=True))))
    yield "trailing", msgpack.packb(tree(_array([6], "float32", good))) + b"\x00"
    yield "two values", msgpack.packb(tree(_array([6], "float32", good))) * 2
    deep = _array([6], "float32", good)
    for depth in range(200):
        deep = {f"k{depth}": deep}
    yield "deep", msgpack.packb(deep)
    yield "map32 huge count", b"\xdf\xff\xff\xff\xff" + b"\xa1a\x80"
    yield "str32 huge key", b"\x81\xdb\xff\xff\xff\xff" + b"a"
    yield "ext32 huge", b"\x81\xa4bert\xc9\xff\xff\xff\xff\x01" + b"\x93"
    yield "empty map", msgpack.packb({})
    yield "empty file", b""
    yield "duplicate key", b"\x82\xa4bert\x80\xa4bert\x80"
    yield "non-utf8 key", b"\x81\xa2\xff\xfe\x80"
    for index in range(40):  # random trees of random leaves
        leaves = []
        for _ in range(rng.randint(1, 5)):
            n = rng.randint(0, 8)
            dtype = rng.choice(["float32", "float16", "bfloat16", "int64", "uint8", "float8"])
            raw = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 40)))
            leaves.append(_array([n], dtype, raw))
        mapping = {rng.choice(["bert", "cls", "embeddings", "x"]): {str(i): leaf for i, leaf in enumerate(leaves)}}
        yield f"random tree {index}", msgpack.packb(mapping, use_bin_type=True)


def test_flax_reader_refuses_structural_mutants(tmp_path):
    target = tmp_path / hf_flax.FLAX_FILE
    outcomes = Counter()
    for label, data in structural_mutants(seed=5):
        target.write_bytes(data)
        outcomes[check_case(target, label, read_with(hf_flax.read))] += 1
    print(f"flax structure: {dict(outcomes)}")
    assert outcomes["refused"] > 30


@pytest.mark.parametrize("source", [TF / "pretraining" / hf_tf.TF_FILE,
                                    TF / "sharded" / "tf_model-00003-of-00003.h5"], ids=["single", "shard"])
def test_tf_reader_survives_byte_mutations(tmp_path, source):
    target = tmp_path / source.name
    (tmp_path / "config.json").write_bytes((source.parent / "config.json").read_bytes())  # sizes of a shard
    cases = share_of_cases(0.1)

    def run(note) -> Counter:
        outcomes = Counter()
        for _kind, label, mutant in mutations(source.read_bytes(), seed=41, count=cases,
                                       boundaries=dataset_boundaries(source)):
            note(label)
            target.write_bytes(mutant)
            outcomes[check_case(target, f"{source.name} {label}", read_with(hf_tf.read))] += 1
        return outcomes

    outcomes = in_child(run, f"{source.name} byte mutations")
    print(f"tf {source.name}: {cases} cases: {dict(outcomes)}")
    assert sum(outcomes.values()) == cases and outcomes["refused"] > 0
