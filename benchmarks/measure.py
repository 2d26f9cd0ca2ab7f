"""Run a command as a whole process and measure it: wall time, peak RSS, bytes read.

Each run goes through a fresh, minimal wrapper process (`python -I -S benchmarks/measure.py
--child ...`, importing only `os`, `sys`, `time`, `json`) that spawns the command, waits for it
without reaping it (`waitid(WNOWAIT)`), reads `/proc/<pid>/io` of the finished process, then
reaps it with `wait4`, whose rusage gives `ru_maxrss`: the peak resident set of the command or of
any descendant it waited for (the largest single process of its tree, not their sum). Runs are
isolated from one another and from the harness.

Caveat of `ru_maxrss` on Linux: a spawned process starts with its parent's high-water mark, so
no run reports less than the wrapper's own ~8-9 MiB (seen only on `cp` and `cat`).

The `/proc/<pid>/io` figures: `rchar` counts bytes returned by read-like system calls (page
faults on memory maps are not in it); `read_bytes` counts bytes fetched from the block device
(page faults included; 0 for data already in the page cache).
"""

from __future__ import annotations

import json
import os
import sys
import time

WRAPPER = os.path.abspath(__file__)
KIB = 1024


def _child(argv: list[str]) -> int:
    """Wrapper mode: `--child STDOUT STDERR -- cmd...`; prints one JSON line on its own stdout."""
    stdout_path, stderr_path, sep, *command = argv
    if sep != "--" or not command:
        raise SystemExit("usage: measure.py --child STDOUT STDERR -- command...")
    actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
               (os.POSIX_SPAWN_OPEN, 1, stdout_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
               (os.POSIX_SPAWN_OPEN, 2, stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)]
    started = time.perf_counter()
    pid = os.posix_spawnp(command[0], command, os.environ, file_actions=actions)
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    wall = time.perf_counter() - started
    io = {}
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                key, _, value = line.partition(":")
                io[key.strip()] = int(value)
    except OSError:
        pass
    _, status, usage = os.wait4(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    print(json.dumps({"wall_s": wall, "maxrss_bytes": usage.ru_maxrss * KIB, "exit_code": code,
                      "user_s": usage.ru_utime, "sys_s": usage.ru_stime, "io": io}))
    return 0


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "--child":
    raise SystemExit(_child(sys.argv[2:]))

# --- the harness side --------------------------------------------------------------------------

import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable, Sequence  # noqa: E402


class CommandFailed(RuntimeError):
    pass


@dataclass(frozen=True)
class Sample:
    """One run of a command."""

    wall_s: float
    maxrss_bytes: int
    exit_code: int
    user_s: float
    sys_s: float
    io: dict = field(default_factory=dict)
    busy: bool = False  # other processes were using the CPUs when this run started


@dataclass(frozen=True)
class Measurement:
    """Several runs of one command."""

    command: tuple[str, ...]
    samples: tuple[Sample, ...]

    @property
    def median_s(self) -> float:
        return statistics.median(s.wall_s for s in self.samples)

    @property
    def peak_rss_bytes(self) -> int:
        """The largest peak over the runs."""
        return max(s.maxrss_bytes for s in self.samples)

    @property
    def reps(self) -> int:
        return len(self.samples)

    @property
    def busy_runs(self) -> int:
        return sum(s.busy for s in self.samples)


def run_once(command: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None,
             timeout: float = 3600, check: bool = True, stdout: str | None = None) -> Sample:
    """Run `command` once through a fresh wrapper process and return what was measured.

    The command's stdout (unless `stdout` names a file for it, e.g. os.devnull) and stderr go to
    temporary files; with `check`, a non-zero exit raises `CommandFailed` quoting the end of its
    stderr.
    """
    with tempfile.TemporaryDirectory(prefix="bertconv-bench-") as tmp:
        out, err = Path(stdout or Path(tmp, "stdout")), Path(tmp, "stderr")
        wrapper = [sys.executable, "-I", "-S", WRAPPER, "--child", str(out), str(err), "--", *map(str, command)]
        proc = subprocess.run(wrapper, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
        if proc.returncode != 0:
            raise CommandFailed(f"measuring wrapper failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
        data = json.loads(proc.stdout.strip().splitlines()[-1])
        sample = Sample(**data)
        if check and sample.exit_code != 0:
            tail = err.read_text(errors="replace").strip()[-3000:]
            if not tail and stdout is None:
                tail = out.read_text(errors="replace").strip()[-3000:]
            raise CommandFailed(f"{' '.join(map(str, command))} exited {sample.exit_code}:\n{tail}")
        return sample


@dataclass(frozen=True)
class Job:
    """A command to measure and what its runs need: `before_each()` runs (untimed) before every
    run, e.g. to remove the previous run's output; `stdout` names a file for its output; with
    `check`, a non-zero exit is a failure (`CommandFailed`)."""

    command: Sequence[str]
    before_each: Callable[[], None] | None = None
    stdout: str | None = None
    check: bool = True


def measure_alternating(jobs: Sequence[Job], *, reps: int = 3, env: dict[str, str] | None = None,
                        cwd: Path | None = None, timeout: float = 3600, idle_wait: float = 0) -> list[Measurement]:
    """Run each job `reps` times, taking turns (A, B, A, B, ...); a Measurement per job.

    Taking turns makes a ratio of two commands fair: measured one block after the other, the
    ratio also measures whatever changed between the blocks (other work, page-cache reclaim, the
    CPU's clock); on this VM the same `audit` took 80 ms in one block and 55 ms in the next
    section's. Dirty pages are flushed (`sync`) before each run so one run's write-back does not
    slow the next. With `idle_wait`, each run waits up to that many seconds for the CPUs to be
    idle (see `wait_for_idle`); a run that starts busy is marked."""
    samples: list[list[Sample]] = [[] for _ in jobs]
    for _ in range(reps):
        for job, taken in zip(jobs, samples):
            if job.before_each:
                job.before_each()
            os.sync()
            busy = bool(idle_wait) and not wait_for_idle(idle_wait)
            sample = run_once(job.command, env=env, cwd=cwd, timeout=timeout, stdout=job.stdout, check=job.check)
            taken.append(Sample(**{**sample.__dict__, "busy": busy}))
    return [Measurement(tuple(map(str, job.command)), tuple(taken)) for job, taken in zip(jobs, samples)]


#: The machine counts as idle when at least this share of all CPU time was idle over the window.
IDLE_SHARE = 0.85
IDLE_WINDOW_S = 0.5


def _cpu_times() -> tuple[int, int]:
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return idle, sum(values)


def wait_for_idle(max_wait: float) -> bool:
    """Wait until the CPUs are idle (other work on this machine, e.g. concurrent test suites, would
    slow a measured run); True if they became idle within `max_wait` seconds."""
    deadline = time.monotonic() + max_wait
    while True:
        idle0, total0 = _cpu_times()
        time.sleep(IDLE_WINDOW_S)
        idle1, total1 = _cpu_times()
        if total1 > total0 and (idle1 - idle0) / (total1 - total0) >= IDLE_SHARE:
            return True
        if time.monotonic() >= deadline:
            return False


def remove(path: Path) -> Callable[[], None]:
    """A `before_each` that deletes `path` (a file or a directory) if present."""
    def clean() -> None:
        if Path(path).is_dir():
            shutil.rmtree(path)
        elif Path(path).exists() or Path(path).is_symlink():
            Path(path).unlink()
    return clean


def warm(paths: Sequence[Path]) -> None:
    """Read files once so every measured run starts with them in the page cache."""
    for path in paths:
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass


def evict(paths: Sequence[Path]) -> None:
    """Drop files' pages from the page cache (posix_fadvise DONTNEED), for cold-read figures."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident_bytes(path: Path) -> int:
    """How many bytes of `path` are in the page cache now (mincore over a map of the file)."""
    import mmap

    return min(os.path.getsize(path), sum(resident_pages(path)) * mmap.PAGESIZE)


def resident_pages(path: Path) -> list[bool]:
    """Which pages of `path` are in the page cache now, in file order (mincore over a map of the file)."""
    import ctypes
    import mmap

    size = os.path.getsize(path)
    if size == 0:
        return []
    page = mmap.PAGESIZE
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    fd = os.open(path, os.O_RDONLY)
    try:
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap of {path} failed")
        try:
            vector = ctypes.create_string_buffer((size + page - 1) // page)
            if libc.mincore(ctypes.c_void_p(address), size, vector) != 0:
                raise OSError(ctypes.get_errno(), f"mincore of {path} failed")
            return [bool(b & 1) for b in vector.raw]
        finally:
            libc.munmap(ctypes.c_void_p(address), size)
    finally:
        os.close(fd)
