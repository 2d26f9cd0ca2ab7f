"""Fuzzing Google TF checkpoints (tensor bundles) through the whole reader: index, entries, data.

Every case runs through `check_case` (the checkpoint read as `bertconv` reads it, then every
tensor read and its crc32c checked, under tracemalloc and a deadline):

- index bytes: truncation at every block boundary, bit flips, overwrites and splices, half of
  the same-length ones with block crcs recomputed so that the damage reaches the block, varint
  and protobuf parsers (`fuzzing.index_mutations`); `BundleReader`'s entries are checked for
  sanity before the rest of the reader sees them;
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
from bertconv.containers.tensorflow import sstable, bundle as tb
from bertconv.errors import BadInput
from conftest import FIXTURES
from fuzzing import (BYTE_KINDS, BYTE_SCHEDULE, ENTRY_KINDS, ENTRY_SCHEDULE, INDEX_KINDS, INDEX_ROUND, check_case,
                     encode_table, entry_mutations, index_mutations, mutations, read_everything, run_mutants,
                     share_of_cases)

TF = FIXTURES / "tf"
PREFIX = "bert_model.ckpt"
#: Cases per fixture, as shares of CASES (100 by default, `make fuzz`: 20000); with tracemalloc
#: a case costs about 10 ms on two_shards/snappy, 40-60 ms on full (139 entries, Adam slots).
INDEX_SHARES = {"encoder_only": 0.5, "snappy": 0.5, "two_shards": 0.5}
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


def read_bundle_then_everything(directory: Path) -> None:
    """`BundleReader` alone first: whatever index it accepts has entries that make sense (sizes
    and dimensions not negative), before the format reader and every tensor read see them."""
    reader = tb.BundleReader(directory / PREFIX)
    for entry in reader.entries.values():
        if entry.size < 0 or any(d < 0 for d in entry.shape):
            raise AssertionError(f"BundleReader accepted {entry.name!r}: size {entry.size}, shape {entry.shape}")
    read_everything(directory)


@pytest.mark.parametrize("name", INDEX_SHARES)
def test_index_bytes(tmp_path, name):
    directory = bundle_copy(name, tmp_path)
    index = directory / f"{PREFIX}.index"
    cases = share_of_cases(INDEX_SHARES[name], at_least=INDEX_ROUND, short=20)

    def case(mutant) -> str:
        index.write_bytes(mutant.data)
        return check_case(directory, f"{name} index {mutant.label}", read_bundle_then_everything)

    outcomes = run_mutants(index_mutations(index.read_bytes(), seed=11, count=cases), INDEX_KINDS, case)
    report(outcomes, cases)
    assert outcomes["refused"] > cases // 4


@pytest.mark.parametrize("name,with_config,share", ENTRY_CASES)
def test_entries(tmp_path, name, with_config, share):
    directory = bundle_copy(name, tmp_path)
    if not with_config:
        (directory / "bert_config.json").unlink()
    index = directory / f"{PREFIX}.index"
    rows = sstable.read_table(index.read_bytes(), index)
    data_sizes = [p.stat().st_size for p in sorted(directory.glob(f"{PREFIX}.data-*"))]
    cases = share_of_cases(share, at_least=len(ENTRY_SCHEDULE))

    def case(mutant) -> str:
        index.write_bytes(encode_table(mutant.data))
        return check_case(directory, f"{name} entry {mutant.label}")

    outcomes = run_mutants(entry_mutations(rows, data_sizes, seed=12 + with_config, count=cases), ENTRY_KINDS, case)
    report(outcomes, cases)
    assert outcomes["refused"] > cases // 2 and outcomes["ok"] > 0


def test_encode_table_is_a_faithful_sstable(tmp_path):
    """The entry fuzzer's encoder: an unmutated re-encoding reads back identically."""
    directory = bundle_copy("two_shards", tmp_path)
    index = directory / f"{PREFIX}.index"
    rows = sstable.read_table(index.read_bytes(), index)
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
    # Three rounds at least: the check below, that most cases are refused, needs that many.
    cases = share_of_cases(DATA_SHARES[name], at_least=3 * len(BYTE_SCHEDULE) * len(shards))
    outcomes = Counter()
    for number, shard in enumerate(shards):
        original = shard.read_bytes()
        entries = [e for e in reader.entries.values() if reader.data_path(e.shard_id) == shard]
        boundaries = sorted({e.offset for e in entries} | {e.offset + e.size for e in entries})

        def case(mutant) -> str:
            shard.write_bytes(mutant.data)
            outcome = check_case(directory, f"{name} {shard.name} {mutant.label}")
            if mutant.data != original and len(mutant.data) == len(original):
                changed = next(i for i, (a, b) in enumerate(zip(mutant.data, original)) if a != b)
                if any(e.offset <= changed < e.offset + e.size for e in entries if e.name in parameters):
                    assert outcome == "refused", f"{mutant.label}: a changed tensor byte passed its crc32c"
            return outcome

        share = cases // len(shards) + (number < cases % len(shards))
        outcomes += run_mutants(mutations(original, seed=13 + number, count=share, boundaries=boundaries),
                                BYTE_KINDS, case)
        shard.write_bytes(original)
    report(outcomes, cases)
    assert outcomes["refused"] > cases // 2


def test_entry_past_end_of_data_file_names_file_and_tensor(tmp_path):
    """One structured case spelled out: an offset past the shard is BadInput naming both."""
    directory = bundle_copy("full", tmp_path)
    index = directory / f"{PREFIX}.index"
    rows = sstable.read_table(index.read_bytes(), index)
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
