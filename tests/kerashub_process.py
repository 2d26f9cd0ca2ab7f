"""keras-hub 0.32 as the tests' oracle (.cache/kerashub-venv, `make kerashub`): one process per
pytest worker, started by the first request and serving every module's (tests/oracle_kerashub.py),
since importing TensorFlow and keras-hub takes 5-8 s of CPU each time.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT

KERASHUB_PYTHON = ROOT / ".cache" / "kerashub-venv" / "bin" / "python"
SCRIPT = Path(__file__).resolve().parent / "oracle_kerashub.py"
#: Seconds one request may take, TensorFlow's start included (a hung process fails the test).
TIMEOUT = 600
REASON = f"needs keras-hub 0.32 in {KERASHUB_PYTHON.parent.parent} (make kerashub)"

kerashub = pytest.mark.skipif(not KERASHUB_PYTHON.exists(), reason=REASON)


def load(directory: Path, inputs: Path, out: Path, dtype: str | None = None) -> tuple[dict, dict[str, np.ndarray]]:
    """keras-hub's `from_preset` of `directory` (in the dtype policy `dtype`, when given) run on
    the arrays of `inputs` (.npz): what it says it loaded (class, parameters, preprocessor,
    vocabulary_size), and its variables (`param:<Keras path>`) and outputs, also saved to `out`."""
    info = _ask({"load": [str(directory), str(inputs), str(out)], "dtype": dtype})
    return info, dict(np.load(out))


def relative_rows(cases: list[tuple[int, int]], out: Path) -> dict[str, np.ndarray]:
    """DeBERTa-v3's relative-position rows as keras-hub computes them, [S, S] per (bucket_size,
    S) case under `<bucket_size>_<S>` (also saved to `out`)."""
    _ask({"buckets": cases, "out": str(out)})
    return dict(np.load(out))


class _Process:
    def __init__(self):
        if not KERASHUB_PYTHON.exists():
            pytest.skip(REASON)
        self.log = tempfile.TemporaryFile()
        # Keras 3 alone: the suite's TF_USE_LEGACY_KERAS (for bert4keras) would send TensorFlow to tf-keras.
        env = {k: v for k, v in os.environ.items() if k not in ("TF_USE_LEGACY_KERAS", "TF_KERAS")}
        self.popen = subprocess.Popen([str(KERASHUB_PYTHON), str(SCRIPT)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self.log, env=env)

    def ask(self, request: dict) -> dict:
        try:
            self.popen.stdin.write(json.dumps(request).encode() + b"\n")
            self.popen.stdin.flush()
        except BrokenPipeError:
            pass  # the process ended: read below finds nothing
        ready, _, _ = select.select([self.popen.stdout], [], [], TIMEOUT)
        line = self.popen.stdout.readline() if ready else b""
        if not line:
            self.close()
            raise AssertionError(f"keras-hub's process {'ended' if ready else f'gave no answer in {TIMEOUT} s'}: "
                                 f"{self.stderr()[-3000:]}")
        reply = json.loads(line)
        assert "error" not in reply, reply.get("error", "")[-3000:]
        return reply

    def stderr(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def close(self) -> None:
        try:
            self.popen.stdin.close()
        except BrokenPipeError:
            pass
        try:
            self.popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


_process: _Process | None = None


def _ask(request: dict) -> dict:
    global _process
    if _process is None or _process.popen.poll() is not None:
        _process = _Process()
        atexit.register(_process.close)
    return _process.ask(request)
