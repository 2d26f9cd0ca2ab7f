"""keras-hub 0.32 as the tests' oracle (.cache/kerashub-venv, `make kerashub`): one process for the
session, started by the first request and serving every module and worker (tests/oracle_kerashub.py
over tests/shared_server.py), since importing TensorFlow and keras-hub takes 5-8 s of CPU each time.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np
import pytest

import shared_server
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


@functools.cache
def _client() -> shared_server.Client:
    if not KERASHUB_PYTHON.exists():
        pytest.skip(REASON)
    # Keras 3 alone: the suite's TF_USE_LEGACY_KERAS (for bert4keras) would send TensorFlow to tf-keras.
    env = {k: v for k, v in os.environ.items() if k not in ("TF_USE_LEGACY_KERAS", "TF_KERAS")}
    return shared_server.Client("keras-hub", KERASHUB_PYTHON, SCRIPT, env)


def _ask(request: dict) -> dict:
    reply = _client().ask(request, TIMEOUT)
    assert "error" not in reply, reply.get("error", "")[-3000:]
    return reply
