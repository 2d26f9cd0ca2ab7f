"""Fuzzing Google TF checkpoints (tensor bundles) through the whole reader: index, entries, data.

tests/test_tf_bundle.py::test_fuzzed_index_is_read_or_refused already runs byte-level mutants of
three .index files (300 each by default) through `BundleReader` alone. This file adds what that
leaves out, and runs every case through `check_case` (the checkpoint read as `bertconv` reads it,
then every tensor read and its crc32c checked, under tracemalloc and a deadline):

- index bytes: truncation at every block boundary, bit flips, overwrites and splices, half of
  the same-length ones with block crcs recomputed so that the damage reaches the block, varint
  and protobuf parsers (`fuzzing.index_mutations`);
- entries: BundleEntryProto / BundleHeaderProto fields rewritten and the table re-encoded, so
  every mutant is a well-formed SSTable whose entries lie: offsets and sizes past the data file,
  size and crc mismatches, absurd and negative shapes, unknown dtypes, bad shards, wrong wire
  types, duplicate and disordered keys (`fuzzing.entry_mutations`);
- data files: truncated, bit-flipped, overwritten and spliced shards (the crc32c must catch
  every changed byte a tensor covers).

The outcome of each case is success or `BertconvError`, nothing else, within the time and
memory bounds of `fuzzing.check_case`.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from bertconv import formats
from bertconv.containers import tf_bundle as tb
from bertconv.errors import BadInput
from conftest import FIXTURES
from fuzzing import check_case, encode_table, entry_mutations, index_mutations, mutations, share_of_cases

TF = FIXTURES / "tf"
PREFIX = "bert_model.ckpt"
#: Cases per fixture, as shares of CASES (2000 by default, `make fuzz`: 20000); with tracemalloc
#: a case costs about 10 ms on two_shards/snappy, 40-60 ms on full (139 entries, Adam slots).
INDEX_SHARES = {"snappy": 0.3, "two_shards": 0.3}
#: (fixture, with its bert_config.json or sizes read off the shapes, share of CASES)
ENTRY_CASES = [pytest.param(name, with_config, share, id=f"{name}-{'config' if with_config else 'shapes'}")
               for name, with_config, share in (("two_shards", True, 0.2), ("two_shards", False, 0.1),
                                                ("full", True, 0.1))]
DATA_SHARES = {"two_shards": 0.2, "full": 0.05}

pytestmark = pytest.mark.fuzz


def bundle_copy(name: str, tmp_path: Path) -> Path:
    """A copy of fixture `name`'s bundle (index, data shards, config) in its own directory."""
    directory = tmp_path / name
    shutil.copytree(TF / name, directory)
    return directory


def report(outcomes: Counter, total: int) -> None:
    assert sum(outcomes.values()) == total
    print(f"{total} cases: {dict(outcomes)}")


@pytest.mark.parametrize("name", INDEX_SHARES)
def test_index_bytes(tmp_path, name):
    directory = bundle_copy(name, tmp_path)
    index = directory / f"{PREFIX}.index"
    original = index.read_bytes()
    cases = share_of_cases(INDEX_SHARES[name])
    outcomes = Counter()
    for label, mutant in index_mutations(original, seed=11, count=cases):
        index.write_bytes(mutant)
        outcomes[check_case(directory, f"{name} index {label}")] += 1
    report(outcomes, cases)
    assert outcomes["refused"] > cases // 4


@pytest.mark.parametrize("name,with_config,share", ENTRY_CASES)
def test_entries(tmp_path, name, with_config, share):
    directory = bundle_copy(name, tmp_path)
    if not with_config:
        (directory / "bert_config.json").unlink()
    index = directory / f"{PREFIX}.index"
    rows = tb.read_table(index.read_bytes(), index)
    data_sizes = [p.stat().st_size for p in sorted(directory.glob(f"{PREFIX}.data-*"))]
    cases = share_of_cases(share)
    outcomes = Counter()
    for label, mutant in entry_mutations(rows, data_sizes, seed=12 + with_config, count=cases):
        index.write_bytes(encode_table(mutant))
        outcomes[check_case(directory, f"{name} entry {label}")] += 1
    report(outcomes, cases)
    assert outcomes["refused"] > cases // 2 and outcomes["ok"] > 0


def test_encode_table_is_a_faithful_sstable(tmp_path):
    """The entry fuzzer's encoder: an unmutated re-encoding reads back identically."""
    directory = bundle_copy("two_shards", tmp_path)
    index = directory / f"{PREFIX}.index"
    rows = tb.read_table(index.read_bytes(), index)
    before = {n: formats.read(directory)[n].tensor.read().tobytes() for n in formats.read(directory).params}
    index.write_bytes(encode_table(rows))
    tree = formats.read(directory)
    assert {n: tree[n].tensor.read().tobytes() for n in tree.params} == before


@pytest.mark.parametrize("name", DATA_SHARES)
def test_data_shards(tmp_path, name):
    directory = bundle_copy(name, tmp_path)
    shards = sorted(directory.glob(f"{PREFIX}.data-*"))
    reader = tb.BundleReader(directory / PREFIX)
    parameters = {p.source for p in formats.read(directory)}  # what read_everything reads
    cases = share_of_cases(DATA_SHARES[name])
    outcomes = Counter()
    for number, shard in enumerate(shards):
        original = shard.read_bytes()
        boundaries = sorted({e.offset for e in reader.entries.values() if reader.data_path(e.shard_id) == shard}
                            | {e.offset + e.size for e in reader.entries.values()
                               if reader.data_path(e.shard_id) == shard})
        share = cases // len(shards) + (number < cases % len(shards))
        for label, mutant in mutations(original, seed=13 + number, count=share, boundaries=boundaries):
            shard.write_bytes(mutant)
            outcome = check_case(directory, f"{name} {shard.name} {label}")
            if mutant != original and len(mutant) == len(original):
                changed = next(i for i, (a, b) in enumerate(zip(mutant, original)) if a != b)
                if any(e.offset <= changed < e.offset + e.size for e in reader.entries.values()
                       if e.name in parameters and reader.data_path(e.shard_id) == shard):
                    assert outcome == "refused", f"{label}: a changed tensor byte passed its crc32c"
            outcomes[outcome] += 1
        shard.write_bytes(original)
    report(outcomes, cases)
    assert outcomes["refused"] > cases // 2


def test_entry_past_end_of_data_file_names_file_and_tensor(tmp_path):
    """One structured case spelled out: an offset past the shard is BadInput naming both."""
    directory = bundle_copy("full", tmp_path)
    index = directory / f"{PREFIX}.index"
    rows = tb.read_table(index.read_bytes(), index)
    name = b"bert/embeddings/word_embeddings"
    data_size = (directory / f"{PREFIX}.data-00000-of-00001").stat().st_size
    from fuzzing import _encode_fields, _fields
    rows = [(k, _encode_fields([f for f in _fields(v) if f[0] != 4] + [(4, 0, data_size)]) if k == name else v)
            for k, v in rows]
    index.write_bytes(encode_table(rows))
    tree = formats.read(directory)  # the index alone is fine: data is looked at on read
    with pytest.raises(BadInput) as error:
        np.asarray(tree["embeddings.word"].tensor.read())
    message = str(error.value)
    assert "bert/embeddings/word_embeddings" in message and "data-00000-of-00001" in message
    assert str(data_size) in message
