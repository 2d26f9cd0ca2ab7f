"""Fuzzing the TF2-era readers: TF2 object-based bundles (Model Garden, bert-for-tf2), a TF-Hub
SavedModel's variables (whose object graph is parsed from the data file), a TF-Hub fine-tune
(a Google bundle under a scope), and keras-bert HDF5.

Each case goes through `fuzzing.check_case` (the checkpoint read as `bertconv` reads it, then
every tensor read): success or `BertconvError`, nothing else, within its time and memory bounds.

- index bytes (`fuzzing.index_mutations`) of each object-based fixture and the TF-Hub fine-tune:
  the scope finder and the key-path tables see every mangled key;
- entries re-encoded as well-formed SSTables that lie (`fuzzing.entry_mutations`), for the Model
  Garden checkpoint with its per-head kernels, whose reshape must refuse a shape that lies;
- the SavedModel's data file: the string tensor holding the object graph, and the graph's
  protobuf, under truncation, flips, overwrites and splices;
- keras-bert HDF5 bytes, in a forked child (h5py is C: a crash names its case).
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from bertconv.containers.tensorflow import sstable, bundle as tb
from conftest import FIXTURES
from fuzzing import (BYTE_KINDS, BYTE_SCHEDULE, ENTRY_KINDS, ENTRY_SCHEDULE, INDEX_KINDS, INDEX_ROUND, check_case,
                     encode_table, entry_mutations, fuzz_bytes_in_child, index_mutations, mutations, run_mutants,
                     share_of_cases)

TF2 = FIXTURES / "tf2"
PREFIX = "bert_model.ckpt"
#: fixture directory -> (bundle prefix inside it, share of CASES (100 by default, `make fuzz`:
#: 20000) for its index bytes, what the unit suite's short run takes (None: that share)). A case
#: costs 10-40 ms (tracemalloc on).
INDEX_SHARES = {
    TF2 / "garden-model-adam": (PREFIX, 0.3, 20),
    TF2 / "bert-for-tf2": (PREFIX, 0.15, None),
    TF2 / "hub-savedmodel": ("variables/variables", 0.15, None),
    TF2 / "garden-functional": (PREFIX, 0.15, None),
    FIXTURES / "tf_hub" / "classifier": (PREFIX, 0.15, None),
}
#: A case costs about 90 ms: every TF reader's sniffer parses the index before the read.
ENTRY_SHARE = 0.1
GRAPH_DATA_SHARE = 0.3
KERAS_BERT = FIXTURES / "keras_bert" / "pretraining"
#: A case costs about 70 ms (h5py opens the file twice, tracemalloc on).
KERAS_BERT_SHARE = 0.2

pytestmark = pytest.mark.fuzz


def copy_of(source: Path, tmp_path: Path) -> Path:
    directory = tmp_path / source.name
    shutil.copytree(source, directory)
    return directory


def report(outcomes: Counter, total: int) -> None:
    assert sum(outcomes.values()) == total
    print(f"{total} cases: {dict(outcomes)}")


@pytest.mark.parametrize("source", INDEX_SHARES, ids=lambda p: p.name)
def test_index_bytes(tmp_path, source):
    prefix, share, short = INDEX_SHARES[source]
    directory = copy_of(source, tmp_path)
    index = directory / f"{prefix}.index"
    original = index.read_bytes()
    cases = share_of_cases(share, at_least=INDEX_ROUND, short=short)

    def case(mutant) -> str:
        index.write_bytes(mutant.data)
        return check_case(directory, f"{source.name} index {mutant.label}")

    outcomes = run_mutants(index_mutations(original, seed=31, count=cases), INDEX_KINDS, case)
    report(outcomes, cases)
    assert outcomes["refused"] > cases // 4


def test_garden_entries(tmp_path):
    directory = copy_of(TF2 / "garden-pretrainer", tmp_path)
    (directory / "bert_config.json").unlink()  # heads come from the per-head kernels, which may lie
    index = directory / f"{PREFIX}.index"
    rows = sstable.read_table(index.read_bytes(), index)
    data_sizes = [p.stat().st_size for p in sorted(directory.glob(f"{PREFIX}.data-*"))]
    cases = share_of_cases(ENTRY_SHARE, at_least=len(ENTRY_SCHEDULE))

    def case(mutant) -> str:
        index.write_bytes(encode_table(mutant.data))
        return check_case(directory, f"garden entry {mutant.label}")

    outcomes = run_mutants(entry_mutations(rows, data_sizes, seed=32, count=cases), ENTRY_KINDS, case)
    report(outcomes, cases)
    assert outcomes["refused"] > cases // 2 and outcomes["ok"] > 0


def test_savedmodel_object_graph_in_the_data_file(tmp_path):
    """Every case damages the bytes of the object graph's string tensor (or its surroundings):
    the string decoder, its two checksums and the protobuf parser must refuse or cope."""
    directory = copy_of(TF2 / "hub-savedmodel", tmp_path)
    reader = tb.BundleReader(directory / "variables" / "variables")
    graph = reader.entries["_CHECKPOINTABLE_OBJECT_GRAPH"]
    data = reader.data_path(graph.shard_id)
    original = data.read_bytes()
    graph_bytes = original[graph.offset:graph.offset + graph.size]
    cases = share_of_cases(GRAPH_DATA_SHARE, at_least=len(BYTE_SCHEDULE))

    def case(mutant) -> str:
        data.write_bytes(original[:graph.offset] + mutant.data + original[graph.offset + graph.size:])
        return check_case(directory, f"savedmodel graph {mutant.label}")

    mutants = mutations(graph_bytes, seed=33, count=cases, boundaries=[1, 5, 9, len(graph_bytes) - 1])
    outcomes = run_mutants(mutants, BYTE_KINDS, case)
    report(outcomes, cases)
    assert outcomes["refused"] > cases // 2


def test_keras_bert_bytes(tmp_path):
    source = KERAS_BERT / "weights.h5"
    original = source.read_bytes()
    target = tmp_path / "weights.h5"
    shutil.copy(KERAS_BERT / "bert_config.json", tmp_path / "bert_config.json")
    cases = share_of_cases(KERAS_BERT_SHARE, at_least=len(BYTE_SCHEDULE), short=10)
    outcomes = fuzz_bytes_in_child(original, target, seed=34, count=cases, what="keras-bert",
                                   boundaries=[0, 8, 96, 512])
    print(f"keras-bert: {cases} cases: {dict(outcomes)}")
    assert sum(outcomes.values()) == cases and outcomes["refused"] > 0
