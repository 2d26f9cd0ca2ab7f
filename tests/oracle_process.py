"""The transformers 4.57 oracle process, shared by every test module and worker of the session.

Importing TensorFlow, jax, torch and transformers costs the oracle environment
(.cache/oracle-venv) seconds of CPU, and so does each class it first builds: a process per module
paid them ten times over, one per worker twice. The tests call `run(kind, *arguments)`; the first
call starts this file in the oracle environment (tests/shared_server.py), which then serves every
job of the session, one JSON request per line:

    {"kind": "load" | "load-as" | "relpos" | "roformer-tf" | "stranded-repo", "arguments": [...]}

and one JSON line per reply: the JSON lines the job printed, or the job's traceback when it
raised (the libraries' own printing goes to the server's log). Each kind is one oracle script's
function, called with that script's command-line arguments:

    load           oracle_hf_tf_flax.main     DIRECTORY INPUTS.npz OUT.npz
    load-as        oracle_hf_tf_flax.main     DIRECTORY INPUTS.npz OUT.npz CLASS (not the config's architecture)
    relpos         oracle_relpos.run          CLASS DIRECTORY INPUTS.npz OUT.npz
    roformer-tf    oracle_roformer_tf.main    PREFIX CONFIG INPUTS.npz OUT.npz
    stranded-repo  oracle_stranded_repo.main  SENTENCEPIECE_MODEL TOKENIZER_JSON OUT_DIRECTORY
"""

from __future__ import annotations

import functools
import io
import json
import os
from contextlib import redirect_stdout
from pathlib import Path

import shared_server

TESTS = Path(__file__).resolve().parent
ORACLE_PYTHON = TESTS.parent / ".cache" / "oracle-venv" / "bin" / "python"
#: kind -> (oracle script, its function, which of its arguments are paths).
KINDS = {"load": ("oracle_hf_tf_flax", "main", slice(0, 3)), "load-as": ("oracle_hf_tf_flax", "main", slice(0, 3)),
         "relpos": ("oracle_relpos", "run", slice(1, 4)), "roformer-tf": ("oracle_roformer_tf", "main", slice(0, 0)),
         "stranded-repo": ("oracle_stranded_repo", "main", slice(0, 3))}
#: A job taking longer than this (waiting for the other worker's included) is a hung oracle: the test fails.
TIMEOUT = 900


class OracleError(Exception):
    """A job raised in the oracle process: its traceback."""


def skip_unless_installed(what: str = "transformers 4.57 with TensorFlow and Flax") -> None:
    """The test skipped, naming the environment, when there is no oracle environment."""
    if not ORACLE_PYTHON.exists():
        import pytest

        pytest.skip(f"no oracle environment at {ORACLE_PYTHON.parent.parent} ({what}): run `make oracle`")


def run(kind: str, *arguments: str | os.PathLike) -> list[dict]:
    """The JSON lines the oracle job `kind` printed on `arguments`; OracleError with its traceback
    when it raised."""
    reply = _client().ask({"kind": kind, "arguments": [str(a) for a in arguments]}, TIMEOUT)
    if "error" in reply:
        raise OracleError(reply["error"])
    return reply["printed"]


@functools.cache
def _client() -> shared_server.Client:
    return shared_server.Client("transformers-4", ORACLE_PYTHON, Path(__file__).resolve())


def answer(request: dict) -> dict:
    """Run one request's job: the JSON lines it printed."""
    import importlib

    script, function, paths = KINDS[request["kind"]]
    arguments = request["arguments"]
    arguments[paths] = map(Path, arguments[paths])
    printed = io.StringIO()
    with redirect_stdout(printed):
        getattr(importlib.import_module(script), function)(*arguments)
    return {"printed": [json.loads(line) for line in printed.getvalue().splitlines() if line.startswith("{")]}


if __name__ == "__main__":  # in the oracle environment, tests/ first on its path
    shared_server.serve(answer)
