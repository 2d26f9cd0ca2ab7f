"""Inputs untouched: no command changes, adds or removes anything where it reads.

Every fixture of every registered format (tests/format_fixtures.py) is copied to tmp_path, with
the directory it lies in; then every command that reads runs on the copy, and the first fixture
of each format is also converted to every target (written elsewhere): the writers' reads of a
format are the same whichever of its fixtures they read. Afterwards the copy's listing, and the
sha256, size, mode and mtime (ns) of every file in it, and the directory's own mtime, are as they
were. Commands run in this process (fast); for one fixture each command also runs as a real
`bertconv` process.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path

import pytest

from bertconv import formats
from bertconv.cli import COMMANDS
from conftest import FIXTURES, run_cli, run_in_process
from format_fixtures import fixture_paths

#: Fixture paths relative to FIXTURES: a directory holding one checkpoint, or a checkpoint file.
CASES = [str(path.relative_to(FIXTURES)) for fmt in formats.FORMATS for path in fixture_paths(fmt, FIXTURES)]
#: The fixtures converted to every target: the first of each format's.
CONVERTED = {str(paths[0].relative_to(FIXTURES)) for fmt in formats.FORMATS if (paths := fixture_paths(fmt, FIXTURES))}


#: For fill-mask on fixtures without a vocab.txt of their own (V=99 throughout).
VOCAB = FIXTURES / "tf" / "full" / "vocab.txt"


def commands(path: Path, out: Path, *, convert: bool = True) -> list[list[str]]:
    runs = [["inspect", path], ["inspect", "--json", path], ["audit", path], ["verify", path],
            ["verify", "--deep", path], ["diff", path, path]]
    if convert:
        runs += [["convert", path, out / f"{target}-out", "--to", target] for target in formats.TARGETS]
    if "fill-mask" in COMMANDS:
        beside = path if path.is_dir() else path.parent
        vocab = [] if (beside / "vocab.txt").exists() else ["--vocab", out.parent / "vocab" / "vocab.txt"]
        runs.append(["fill-mask", path, "the [MASK] sat on the mat .", *vocab])
    return [[str(a) for a in run] for run in runs]


def snapshot(directory: Path) -> dict:
    """Everything a command could change about a directory tree it reads."""
    state = {".": (directory.stat().st_mtime_ns, sorted(os.listdir(directory)))}
    for path in sorted(directory.rglob("*")):
        info = path.lstat()
        relative = str(path.relative_to(directory))
        if path.is_dir():
            state[relative] = ("dir", info.st_mtime_ns, sorted(os.listdir(path)))
        else:
            state[relative] = (hashlib.sha256(path.read_bytes()).hexdigest(), info.st_size,
                               stat.S_IMODE(info.st_mode), info.st_mtime_ns)
    return state


def copy_fixture(case: str, tmp_path: Path) -> tuple[Path, Path]:
    """The fixture's directory (or the directory its file lies in) copied into tmp_path/input/,
    and a vocab.txt into tmp_path/vocab/: (the copied directory, the fixture's path in it)."""
    source = FIXTURES / case
    directory = source if source.is_dir() else source.parent
    copy = tmp_path / "input" / str(directory.relative_to(FIXTURES)).replace("/", "-")
    shutil.copytree(directory, copy)
    (tmp_path / "vocab").mkdir(exist_ok=True)
    shutil.copy(VOCAB, tmp_path / "vocab" / "vocab.txt")
    return copy, copy / source.relative_to(directory)


@pytest.mark.parametrize("case", CASES)
def test_no_command_changes_its_input(case, tmp_path):
    copy, path = copy_fixture(case, tmp_path)
    before, vocab = snapshot(copy), snapshot(tmp_path / "vocab")
    statuses = {}
    for args in commands(path, tmp_path / "out", convert=case in CONVERTED):
        (tmp_path / "out").mkdir(exist_ok=True)
        result = run_in_process(*args)
        statuses[" ".join(args[:2])] = result.exit_code
        assert snapshot(copy) == before, f"bertconv {' '.join(args)} changed {copy}"
        shutil.rmtree(tmp_path / "out")
    assert snapshot(tmp_path / "vocab") == vocab
    assert statuses[f"inspect {path}"] == 0, "the fixture must at least be readable"
    assert set(statuses.values()) <= {0, 1, 2}


def test_no_command_changes_its_input_as_a_process(tmp_path):
    """One real process per command (about 0.4 s each), on the family with the most files."""
    copy, _ = copy_fixture("tf/two_shards", tmp_path)
    before = snapshot(copy)
    out = tmp_path / "out"
    out.mkdir()
    for args in commands(copy, out):
        result = run_cli(*args)
        assert result.exit_code in (0, 1, 2) and "Traceback" not in result.stderr, (args, result.stderr)
        assert snapshot(copy) == before, f"bertconv {' '.join(args)} changed {copy}"


def test_prefix_and_file_forms_of_a_tf_input_are_untouched_too(tmp_path):
    copy, _ = copy_fixture("tf/two_shards", tmp_path)
    before = snapshot(copy)
    for path in (copy / "bert_model.ckpt", copy / "bert_model.ckpt.index",
                 copy / "bert_model.ckpt.data-00001-of-00002"):
        # The fixture's head is random: the probe (run by --deep) is allowed to find it untrained.
        result = run_in_process("verify", "--deep", "--allow-untrained-mlm", path)
        assert result.exit_code == 0, result.stdout + result.stderr
    assert snapshot(copy) == before
