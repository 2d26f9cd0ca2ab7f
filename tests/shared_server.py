"""One oracle process per environment for the whole test session, shared by the pytest workers.

Starting an oracle environment (TensorFlow, jax and transformers 4; TensorFlow and keras-hub)
costs seconds of CPU, and so does each model class it first builds: one process per worker paid
all of it twice. Here the first worker that needs an environment starts its server behind a Unix
socket in the session's directory ($BERTCONV_TEST_SERVERS, made by conftest.py); every later
request of any worker goes to it, one JSON line each way, one job at a time.

The server ends when its last client has gone: a worker's connection closes with its process,
however it ends. A lock file orders the two sides: a client holds it while it connects and is
greeted, and the server holds it while it sees that nobody is connected and removes its socket,
so a client either reaches a live server or starts a new one.

This module runs on both sides and needs only the standard library: `Client` in the test
workers, `serve(answer)` in the oracle environments' server scripts.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

#: Where conftest.py puts the session's sockets, locks and server logs.
DIRECTORY_VARIABLE = "BERTCONV_TEST_SERVERS"
#: A server started by a client that died before connecting leaves after this many idle seconds.
IDLE_TIMEOUT = 120
#: Seconds a server has to greet a client that connected (its accepting thread does nothing else).
GREETING_TIMEOUT = 60


class Client:
    """The tests' side of the server `name`: `python script SOCKET LOCK`, started when none runs."""

    def __init__(self, name: str, python: Path, script: Path, env: dict[str, str] | None = None):
        if not os.environ.get(DIRECTORY_VARIABLE):  # outside pytest: this process's own servers
            os.environ[DIRECTORY_VARIABLE] = tempfile.mkdtemp(prefix="bertconv-test-servers-")
        directory = Path(os.environ[DIRECTORY_VARIABLE])
        self.name, self.python, self.script, self.env = name, python, script, env
        self.socket_path, self.lock_path = directory / f"{name}.sock", directory / f"{name}.lock"
        self.log_path = directory / f"{name}.log"
        self.connection: socket.socket | None = None
        self.replies = None

    def ask(self, request: dict, timeout: float) -> dict:
        """The server's reply to `request`; AssertionError with the server's log when it ended or
        gave no reply in `timeout` seconds (a job queued behind another worker's waits for it; a
        server being started has as long to start)."""
        if self.connection is None:
            self._connect(timeout)
        try:
            self.connection.sendall(json.dumps(request).encode() + b"\n")
            ready, _, _ = select.select([self.connection], [], [], timeout)
            line = self.replies.readline() if ready else b""
            why = "ended" if ready else f"gave no reply in {timeout} s"
        except OSError as exc:
            line, why = b"", f"ended ({exc})"
        if not line:
            self.close()
            raise AssertionError(f"the {self.name} server {why} on {request}:\n{self.log()[-3000:]}")
        return json.loads(line)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
        self.connection = self.replies = None

    def _connect(self, timeout: float) -> None:
        with _locked(self.lock_path):
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                connection.connect(str(self.socket_path))
            except (FileNotFoundError, ConnectionRefusedError):  # none, or one killed before removing its socket
                self.socket_path.unlink(missing_ok=True)
                self._start(timeout)
                connection.connect(str(self.socket_path))
            connection.settimeout(GREETING_TIMEOUT)
            replies = connection.makefile("rb")
            try:
                greeted = replies.readline() == b"hello\n"  # counted among the server's clients: it stays
            except TimeoutError:
                greeted = False
            if not greeted:
                connection.close()
                raise AssertionError(f"the {self.name} server did not greet:\n{self.log()[-3000:]}")
            connection.settimeout(None)
        self.connection, self.replies = connection, replies

    def _start(self, timeout: float) -> None:
        """Start the server and wait until it listens (it says "listening" on its stdout, once its
        libraries are imported), or kill it after `timeout` seconds."""
        with open(self.log_path, "ab") as log:
            process = subprocess.Popen([str(self.python), str(self.script), str(self.socket_path), str(self.lock_path)],
                                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, env=self.env)
        ready, _, _ = select.select([process.stdout], [], [], timeout)
        if not ready or process.stdout.readline() != b"listening\n":
            process.kill()
            process.wait()
            raise AssertionError(f"the {self.name} server did not start{'' if ready else f' in {timeout} s'}:\n"
                                 f"{self.log()[-3000:]}")
        process.stdout.close()


def serve(answer: Callable[[dict], dict]) -> None:
    """Serve `answer` on the socket named by argv[1] until the last client has gone. A request that
    raises is answered {"error": its traceback}."""
    socket_path, lock_path = sys.argv[1], sys.argv[2]
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen()
    jobs = threading.Lock()  # the libraries are not asked to run two jobs at once
    clients = 0  # connected now
    counted = threading.Condition()
    with os.fdopen(os.dup(1), "w") as starter:
        # What the libraries print goes to stderr (the log); the replies go over the sockets.
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        starter.write("listening\n")

    def talk(connection: socket.socket) -> None:
        nonlocal clients
        try:
            with connection, connection.makefile("rb") as requests:
                for line in requests:
                    with jobs:
                        try:
                            reply = answer(json.loads(line))
                        except BaseException:  # noqa: BLE001 (the test decides what a job's failure means)
                            reply = {"error": traceback.format_exc()}
                    connection.sendall(json.dumps(reply).encode() + b"\n")
        except OSError:
            pass  # the client went away mid-reply
        finally:
            with counted:
                clients -= 1
                counted.notify()

    def accept() -> None:
        nonlocal clients
        while True:
            connection, _ = listener.accept()
            with counted:
                clients += 1
            connection.sendall(b"hello\n")
            threading.Thread(target=talk, args=(connection,), daemon=True).start()

    def last_client_gone() -> bool:
        """Whether nobody is connected, seen under the lock (no client is between its connect and
        its greeting); the socket is then removed."""
        try:
            with _locked(Path(lock_path)):
                with counted:
                    if clients:
                        return False
                os.unlink(socket_path)
        except FileNotFoundError:
            pass  # the session's directory went first
        return True

    threading.Thread(target=accept, daemon=True).start()
    while True:
        with counted:
            counted.wait(timeout=IDLE_TIMEOUT)
            if clients:
                continue
        if last_client_gone():
            os._exit(0)  # the accepting thread stays blocked in accept(): end without joining it


@contextmanager
def _locked(path: Path):
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
