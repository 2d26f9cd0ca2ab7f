"""The mutators of tests/fuzzing.py themselves: one round of cases exercises every kind, and a run
that leaves a kind without a case fails."""

from __future__ import annotations

import pytest

from bertconv.containers.tensorflow import sstable
from conftest import FIXTURES
from fuzzing import (BYTE_KINDS, BYTE_SCHEDULE, ENTRY_KINDS, ENTRY_SCHEDULE, INDEX_KINDS, INDEX_ROUND,
                     entry_mutations, index_mutations, mutations, run_mutants)

INDEX = FIXTURES / "tf" / "two_shards" / "bert_model.ckpt.index"


def test_one_round_of_byte_mutations_has_every_kind_and_changes_the_bytes():
    data = bytes(range(256)) * 4
    mutants = list(mutations(data, seed=5, count=len(BYTE_SCHEDULE), boundaries=[10, 20]))
    assert [m.kind for m in mutants] == list(BYTE_SCHEDULE)
    assert set(BYTE_KINDS) == {m.kind for m in mutants}
    assert all(m.data != data for m in mutants if m.kind != "splice")
    assert mutants[0].data == data[:10]  # the first truncation is at the first boundary


def test_one_round_of_index_mutations_has_every_kind():
    mutants = list(index_mutations(INDEX.read_bytes(), seed=5, count=INDEX_ROUND))
    assert set(INDEX_KINDS) <= {m.kind for m in mutants}


def test_one_round_of_entry_mutations_has_every_kind():
    rows = sstable.read_table(INDEX.read_bytes(), INDEX)
    mutants = list(entry_mutations(rows, [1000, 2000], seed=5, count=len(ENTRY_SCHEDULE)))
    assert {m.kind for m in mutants} == set(ENTRY_KINDS)
    assert all(m.data != rows for m in mutants if not m.kind.startswith(("rows", "repeat")))


def test_a_run_that_misses_a_kind_fails():
    short = mutations(b"0123456789", seed=5, count=2)  # truncate, flip: no overwrite, no splice
    with pytest.raises(AssertionError, match=r"\['overwrite', 'splice'\]"):
        run_mutants(short, BYTE_KINDS, lambda mutant: "ok")
    assert run_mutants(mutations(b"0123456789", seed=5, count=5), BYTE_KINDS, lambda m: "ok") == {"ok": 5}
