"""The console entry point (`bertconv.launch:run`): a signal at any moment after the interpreter
starts ends the run with one line on stderr and, with --json, the command's JSON error object on
stdout, with the exit status shells give death by that signal (128 + N)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from conftest import FIXTURES, ROOT

CHECKPOINT = FIXTURES / "runtime" / "pretraining"

#: Sends the signal to this very process when `argparse` is first imported: while `bertconv.cli`
#: loads, before any handler of its own could be in place.
WHILE_CLI_LOADS = """
import builtins, os, sys
from bertconv import launch
real_import = builtins.__import__
def importing(name, *args, **kwargs):
    if name == "argparse" and "argparse" not in sys.modules:
        os.kill(os.getpid(), {signum})
    return real_import(name, *args, **kwargs)
builtins.__import__ = importing
sys.argv = ["bertconv", *{args!r}]
launch.run()
"""
#: Sends the signal while the command reads its checkpoint.
WHILE_COMMAND_RUNS = """
import os, sys
from bertconv import formats, launch
read = formats.read
def reading(*args, **kwargs):
    os.kill(os.getpid(), {signum})
    return read(*args, **kwargs)
formats.read = reading
sys.argv = ["bertconv", *{args!r}]
launch.run()
"""
SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]


def run(script: str, signum: int, *args: str) -> subprocess.CompletedProcess:
    code = script.format(signum=int(signum), args=list(args))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize("script", [WHILE_CLI_LOADS, WHILE_COMMAND_RUNS], ids=["while cli loads", "while it runs"])
@pytest.mark.parametrize("signum", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_signal_ends_the_run_with_one_line_and_the_json_error_object(script, signum):
    name = "interrupted (SIGINT)" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    machine = run(script, signum, "audit", str(CHECKPOINT), "--json")
    assert machine.returncode == 128 + signum, machine.stderr
    assert machine.stderr == f"bertconv: {name}\n"
    report = json.loads(machine.stdout)
    assert report["ok"] is False and report["error"] == {"message": name, "path": None}
    assert report["bertconv"]["schema"] == "bertconv.audit/1"
    people = run(script, signum, "audit", str(CHECKPOINT))
    assert people.returncode == 128 + signum and people.stdout == "" and people.stderr == f"bertconv: {name}\n"
