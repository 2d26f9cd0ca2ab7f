"""Worker threads that run calls in the order given and hand back each one's result.

What the writers, the loader, the checksums and the transposes of a conversion ask of
`concurrent.futures`, without importing it: that package imports `logging` (and with it
`traceback`, `tokenize`, `textwrap` and `string`), 8.5-11.8 ms of every conversion's main thread
before its first byte on this project's test machine, for a logger bertconv never uses.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import Any


class Cancelled(Exception):
    """The result of a call `Workers.shutdown(cancel=True)` dropped before it started."""


class Task:
    """A call submitted to `Workers`: `result()` waits for it to end, then returns its value or
    raises what it raised."""

    __slots__ = ("_ended", "_value", "_error")

    def __init__(self) -> None:
        self._ended = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        return self._ended.is_set()

    def result(self) -> Any:
        self._ended.wait()
        if self._error is not None:
            raise self._error
        return self._value

    def _run(self, function: Callable[..., Any], args: tuple) -> None:
        try:
            self._value = function(*args)
        except BaseException as error:  # noqa: BLE001 - handed to whoever asks for the result
            self._error = error
        finally:
            self._ended.set()

    def _cancel(self) -> None:
        self._error = Cancelled()
        self._ended.set()


class Workers:
    """`count` daemon threads, named `name`_0, `name`_1, ..., that take the calls submitted in
    order (with one thread, they also end in that order). As a context manager, leaving waits
    for every call submitted and for the threads to end (`shutdown`)."""

    def __init__(self, count: int, name: str) -> None:
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._work, name=f"{name}_{i}", daemon=True) for i in range(count)]
        for thread in self._threads:
            thread.start()

    def submit(self, function: Callable[..., Any], *args: Any) -> Task:
        """Run `function(*args)` on a worker thread once the calls submitted before it are taken."""
        task = Task()
        self._calls.put((task, function, args))
        return task

    def shutdown(self, *, cancel: bool = False) -> None:
        """Wait for the calls submitted to end (with `cancel`, those not started are dropped
        instead: their `result()` raises `Cancelled`), then for the threads."""
        if cancel:
            while True:
                try:
                    call = self._calls.get_nowait()
                except queue.Empty:
                    break
                call[0]._cancel()
        for _ in self._threads:
            self._calls.put(None)  # each thread takes one and ends, after the calls before it
        for thread in self._threads:
            thread.join()

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def _work(self) -> None:
        while True:
            call = self._calls.get()
            if call is None:
                return
            task, function, args = call
            task._run(function, args)
            del task, function, args, call  # nothing a call made outlives it while the thread waits
