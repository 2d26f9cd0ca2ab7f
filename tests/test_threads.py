"""bertconv.threads: the worker threads of a conversion (writers, loader, checksums, transposes)."""

from __future__ import annotations

import threading

import pytest

from bertconv.threads import Cancelled, Workers


def test_calls_run_in_order_on_named_threads_and_hand_back_their_values():
    ran: list[tuple[int, str]] = []

    def call(i: int) -> int:
        ran.append((i, threading.current_thread().name))
        return i * i

    with Workers(1, "bertconv-test") as workers:
        tasks = [workers.submit(call, i) for i in range(50)]
        assert [task.result() for task in tasks] == [i * i for i in range(50)]
    assert [i for i, _ in ran] == list(range(50))
    assert {name for _, name in ran} == {"bertconv-test_0"}
    assert all(task.done() for task in tasks)


def test_a_calls_error_is_raised_by_its_result_and_the_thread_goes_on():
    def fail():
        raise ValueError("the call's own error")

    with Workers(1, "bertconv-test") as workers:
        failed, after = workers.submit(fail), workers.submit(lambda: "next")
        with pytest.raises(ValueError, match="the call's own error"):
            failed.result()
        assert after.result() == "next"


def test_leaving_waits_for_every_call_and_ends_the_threads():
    release = threading.Event()
    finished: list[int] = []

    def slow(i: int) -> None:
        release.wait(5)
        finished.append(i)

    workers = Workers(2, "bertconv-test-end")
    for i in range(4):
        workers.submit(slow, i)
    threading.Timer(0.05, release.set).start()
    workers.shutdown()
    assert sorted(finished) == [0, 1, 2, 3]
    assert not [t for t in threading.enumerate() if t.name.startswith("bertconv-test-end")]


def test_cancel_drops_the_calls_not_started_and_says_so_in_their_results():
    started, release = threading.Event(), threading.Event()

    def first() -> str:
        started.set()
        release.wait(5)
        return "ran"

    workers = Workers(1, "bertconv-test-cancel")
    running = workers.submit(first)
    waiting = [workers.submit(lambda: "never") for _ in range(3)]
    assert started.wait(5)
    threading.Timer(0.05, release.set).start()
    workers.shutdown(cancel=True)
    assert running.result() == "ran"
    for task in waiting:
        assert task.done()
        with pytest.raises(Cancelled):
            task.result()
    assert not [t for t in threading.enumerate() if t.name.startswith("bertconv-test-cancel")]


def test_two_threads_run_two_calls_at_once():
    both = threading.Barrier(2, timeout=5)  # broken (an error) unless two calls wait on it together
    with Workers(2, "bertconv-test") as workers:
        tasks = [workers.submit(both.wait) for _ in range(2)]
        assert sorted(task.result() for task in tasks) == [0, 1]
