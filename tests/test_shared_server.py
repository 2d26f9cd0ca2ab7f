"""The oracle servers' sharing (tests/shared_server.py), with a server that answers its process id."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

import shared_server

TESTS = Path(__file__).resolve().parent
SERVER = f"""
import os, sys
sys.path.insert(0, {str(TESTS)!r})
import shared_server

def answer(request):
    if request.get("fail"):
        raise ValueError("asked to fail")
    print("printed by a library")  # goes to the log, not into a reply
    return {{"pid": os.getpid(), "echo": request}}

shared_server.serve(answer)
"""


@pytest.fixture
def clients(tmp_path, monkeypatch):
    """Clients of one server script in a directory of their own: `new()` makes another."""
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    monkeypatch.setenv(shared_server.DIRECTORY_VARIABLE, str(tmp_path))
    made = []

    def new() -> shared_server.Client:
        made.append(shared_server.Client("echo", Path(sys.executable), script))
        return made[-1]
    yield new
    for client in made:
        client.close()


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # our own child when this process started it: reap it
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        time.sleep(0.02)
    return False


def test_clients_share_one_server_which_ends_with_the_last_one(clients, tmp_path):
    first, second = clients(), clients()
    pid = first.ask({"n": 1}, timeout=30)["pid"]
    assert second.ask({"n": 2}, timeout=30) == {"pid": pid, "echo": {"n": 2}}
    assert "printed by a library" in first.log()
    first.close()
    assert second.ask({"n": 3}, timeout=30)["pid"] == pid  # one client left: it stays
    second.close()
    assert _gone(pid)
    assert not (tmp_path / "echo.sock").exists()
    assert clients().ask({"n": 4}, timeout=30)["pid"] != pid  # the next client starts a new one


def test_a_request_that_raises_is_answered_with_its_traceback(clients):
    client = clients()
    reply = client.ask({"fail": True}, timeout=30)
    assert "ValueError: asked to fail" in reply["error"]
    assert "pid" in client.ask({}, timeout=30)  # and the server goes on


def test_a_server_that_cannot_start_fails_with_its_log(clients, tmp_path):
    (tmp_path / "server.py").write_text("raise SystemExit('no environment here')")
    with pytest.raises(AssertionError, match="did not start(.|\n)*no environment here"):
        clients().ask({}, timeout=30)


def test_a_server_killed_before_removing_its_socket_is_replaced(clients, tmp_path):
    first = clients()
    pid = first.ask({}, timeout=30)["pid"]
    os.kill(pid, signal.SIGKILL)
    assert _gone(pid)
    assert (tmp_path / "echo.sock").exists()  # left behind: connecting to it is refused
    with pytest.raises(AssertionError, match="server ended"):
        first.ask({}, timeout=30)
    assert clients().ask({}, timeout=30)["pid"] != pid


def test_a_server_that_does_not_start_in_time_is_killed(clients, tmp_path):
    pid_file = tmp_path / "pid"
    (tmp_path / "server.py").write_text(f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
                                        "time.sleep(600)")
    with pytest.raises(AssertionError, match="did not start in 1 s"):
        clients().ask({}, timeout=1)
    assert _gone(int(pid_file.read_text()))
