"""One transformers 4.57 oracle process per test worker, shared by every test module that runs it.

Importing TensorFlow, jax, torch and transformers costs the oracle environment
(.cache/oracle-venv) seconds of CPU: a process per module paid them ten times over. The tests
call `run(kind, *arguments)`; the first call starts this file in the oracle environment, which
then serves every job of the worker's session, one JSON line per request on its stdin:

    {"kind": "load" | "load-as" | "relpos" | "roformer-tf" | "stranded-repo", "arguments": [...]}

and one JSON line per reply on a descriptor of its own (the libraries' own printing goes to its
stderr): the JSON lines the job printed, or the job's traceback when it raised. Each kind is one
oracle script's function, called with that script's command-line arguments:

    load           oracle_hf_tf_flax.main     DIRECTORY INPUTS.npz OUT.npz
    load-as        oracle_hf_tf_flax.main     DIRECTORY INPUTS.npz OUT.npz CLASS (not the config's architecture)
    relpos         oracle_relpos.run          CLASS DIRECTORY INPUTS.npz OUT.npz
    roformer-tf    oracle_roformer_tf.main    PREFIX CONFIG INPUTS.npz OUT.npz
    stranded-repo  oracle_stranded_repo.main  SENTENCEPIECE_MODEL TOKENIZER_JSON OUT_DIRECTORY
"""

from __future__ import annotations

import atexit
import functools
import io
import json
import os
import select
import subprocess
import sys
import tempfile
import traceback
from contextlib import redirect_stdout
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ORACLE_PYTHON = TESTS.parent / ".cache" / "oracle-venv" / "bin" / "python"
#: kind -> (oracle script, its function, which of its arguments are paths).
KINDS = {"load": ("oracle_hf_tf_flax", "main", slice(0, 3)), "load-as": ("oracle_hf_tf_flax", "main", slice(0, 3)),
         "relpos": ("oracle_relpos", "run", slice(1, 4)), "roformer-tf": ("oracle_roformer_tf", "main", slice(0, 0)),
         "stranded-repo": ("oracle_stranded_repo", "main", slice(0, 3))}
#: A job taking longer than this is a hung oracle: the process is killed and the test fails.
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
    when it raised. The process is started on the first call and kept for the session."""
    process, log = _process()
    process.stdin.write(json.dumps({"kind": kind, "arguments": [str(a) for a in arguments]}) + "\n")
    process.stdin.flush()
    ready, _, _ = select.select([process.stdout], [], [], TIMEOUT)
    line = process.stdout.readline() if ready else ""
    if not line:
        process.kill()
        _process.cache_clear()
        log.seek(0)
        raise AssertionError(f"the oracle process ended or hung on {kind} {arguments}:\n{log.read()[-3000:]}")
    reply = json.loads(line)
    if "error" in reply:
        raise OracleError(reply["error"])
    return reply["printed"]


@functools.cache
def _process() -> tuple[subprocess.Popen, io.TextIOBase]:
    log = tempfile.TemporaryFile("w+")
    process = subprocess.Popen([str(ORACLE_PYTHON), str(Path(__file__).resolve())], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=log, text=True)
    atexit.register(_stop, process)
    return process, log


def _stop(process: subprocess.Popen) -> None:
    process.stdin.close()  # end of requests: the oracle returns
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()


def serve() -> None:
    """Run each request of stdin, replying on the process's original stdout."""
    import importlib

    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what the libraries print on their own goes to stderr, away from the replies
    sys.path.insert(0, str(TESTS))
    for request in sys.stdin:
        request = json.loads(request)
        script, function, paths = KINDS[request["kind"]]
        arguments = request["arguments"]
        arguments[paths] = map(Path, arguments[paths])
        printed = io.StringIO()
        try:
            job = getattr(importlib.import_module(script), function)
            with redirect_stdout(printed):
                job(*arguments)
        except BaseException:  # noqa: BLE001 (the test decides what a job's failure means)
            reply = {"error": traceback.format_exc()}
        else:
            reply = {"printed": [json.loads(line) for line in printed.getvalue().splitlines() if line.startswith("{")]}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


if __name__ == "__main__":
    serve()
