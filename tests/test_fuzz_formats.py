"""Every registered format fuzzed: the files its registry entry names in `Format.fuzz`, mutated
byte by byte (truncations, bit flips, overwrites, splices) and read through the whole reader.

A format is fuzzed here as soon as its entry names a fixture, so none goes unfuzzed; the
container-specific files (test_fuzz_hf.py, test_fuzz_tf.py, test_fuzz_h5.py) add structure-aware
mutants on top. Each mutant lies beside copies of the files its reader also opens (config, data
shards), and the cases run in a forked child (`fuzzing.fuzz_bytes_in_child`), since some readers
are C libraries that could crash on a bad file.
"""

from __future__ import annotations

import shutil

import pytest

from bertconv import formats
from conftest import FIXTURES
from format_fixtures import FUZZ_OF
from fuzzing import BYTE_SCHEDULE, fuzz_bytes_in_child, share_of_cases

#: Cases per fixture as a share of CASES (100 by default, `make fuzz`: 20000), never fewer than a
#: round of the byte kinds (all `make test` runs: some twenty fixtures, up to 100 ms a case).
SHARE = 0.1

pytestmark = pytest.mark.fuzz

TARGETS = [pytest.param(fixture, id=f"{fmt.target}:{fixture}") for fmt in formats.FORMATS for fixture in FUZZ_OF.get(fmt.target, ())]


@pytest.mark.parametrize("fixture", TARGETS)
def test_mutants_of_every_registered_format_are_read_or_refused(tmp_path, fixture):
    source = FIXTURES / fixture
    shutil.copytree(source.parent, tmp_path / "checkpoint")
    target = tmp_path / "checkpoint" / source.name
    original = source.read_bytes()
    cases = share_of_cases(SHARE, at_least=len(BYTE_SCHEDULE), short=0)
    outcomes = fuzz_bytes_in_child(original, target, seed=41, count=cases, what=fixture,
                                   boundaries=[0, 8, len(original) - 8])
    print(f"{fixture}: {cases} cases: {dict(outcomes)}")
    assert sum(outcomes.values()) == cases and outcomes["refused"] > 0
