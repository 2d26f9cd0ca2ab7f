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


@pytest.mark.parametrize(("status", "code", "stderr"), [(None, 0, ""), (2, 2, ""), ("no such thing", 1, "no such thing\n")])
def test_the_process_ends_with_the_status_systemexit_would_give(status, code, stderr):
    """`cli.run` ends the process at once after the command (`_end_now`: no interpreter teardown);
    the status is read as SystemExit reads it."""
    ended = subprocess.run([sys.executable, "-c", f"from bertconv import cli; cli._end_now({status!r})"],
                           capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert (ended.returncode, ended.stderr) == (code, stderr)


def test_what_a_command_prints_is_all_written_before_the_process_ends(tmp_path):
    """Ended without the interpreter's teardown, the run still leaves stdout complete in a file."""
    listing = tmp_path / "audit.json"
    with listing.open("w") as stdout:
        ended = subprocess.run([sys.executable, "-c", "from bertconv import launch; launch.run()", "audit",
                                str(CHECKPOINT), "--json"], stdout=stdout, stderr=subprocess.PIPE, cwd=ROOT,
                               timeout=120)
    assert ended.returncode == 0, ended.stderr
    assert json.loads(listing.read_text())["bertconv"]["schema"] == "bertconv.audit/1"  # whole: it parses


#: Reports, when the command starts reading, OpenBLAS' spin setting and whether NumPy is loaded.
WHEN_THE_COMMAND_STARTS = """
import os, sys
from bertconv import formats, launch
read = formats.read
def reading(*args, **kwargs):
    print("SEEN", os.environ.get("OPENBLAS_THREAD_TIMEOUT"), "numpy" in sys.modules, file=sys.stderr)
    return read(*args, **kwargs)
formats.read = reading
sys.argv = ["bertconv", "audit", {path!r}]
launch.run()
"""


@pytest.mark.parametrize(("given", "seen"), [(None, "4"), ("20", "20")], ids=["unset", "the user's own"])
def test_openblas_threads_are_told_to_sleep_before_numpy_is_loaded(given, seen):
    """NumPy's OpenBLAS server threads would spin for about 0.1 s of a core each; the console
    entry point tells them to sleep at once, before anything could import NumPy, and keeps a
    value the user set."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    if given is not None:
        env["OPENBLAS_THREAD_TIMEOUT"] = given
    ran = subprocess.run([sys.executable, "-c", WHEN_THE_COMMAND_STARTS.format(path=str(CHECKPOINT))],
                         capture_output=True, text=True, cwd=ROOT, timeout=120, env={**env, "PYTHONPATH": str(ROOT)})
    assert ran.returncode == 0, ran.stderr
    assert f"SEEN {seen} False" in ran.stderr


#: Reports whether the cycle collector runs while the command reads its checkpoint and once it
#: counts the parameters (after the reading).
COLLECTOR_WHILE_COMMANDS_RUN = """
import gc, sys
from bertconv import formats, launch
from bertconv.commands import audit as audit_command
read, audit = formats.read, audit_command.audit
def reading(*args, **kwargs):
    print("READING", gc.isenabled(), file=sys.stderr)
    return read(*args, **kwargs)
def auditing(tree):
    print("AUDITING", gc.isenabled(), gc.get_freeze_count() > 1000, file=sys.stderr)
    return audit(tree)
formats.read, audit_command.audit = reading, auditing
sys.argv = ["bertconv", "audit", {path!r}]
launch.run()
"""


def test_the_collector_is_paused_until_the_checkpoint_is_read():
    """What a command makes until its checkpoint is read lives until the process ends: the
    console entry point pauses the cycle collector until then, and the objects made so far are
    frozen once it is back on."""
    ran = subprocess.run([sys.executable, "-c", COLLECTOR_WHILE_COMMANDS_RUN.format(path=str(CHECKPOINT))],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert "READING False" in ran.stderr and "AUDITING True True" in ran.stderr


def test_the_collector_is_back_on_when_reading_fails(tmp_path):
    import gc

    from bertconv.commands import collector
    from bertconv.commands.common import load
    from bertconv.errors import BadInput

    was_enabled = gc.isenabled()
    gc.enable()
    collector.pause()
    try:
        with pytest.raises(BadInput):
            load(tmp_path / "absent", None, None)
        assert gc.isenabled() and not collector._paused
    finally:
        gc.unfreeze()
        (gc.enable if was_enabled else gc.disable)()
