"""Atomic outputs: a destination appears whole or not at all.

Writers write into `.<name>.bertconv-partial-<pid>` beside the destination and rename it at the
end (bertconv/destination/atomic.py). A run killed with SIGKILL leaves only that temporary; the next run
towards the same destination removes it (its process is gone) and succeeds. An existing
destination is replaced only with --force. A full disk is exit 2 with nothing left behind.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bertconv import formats
from bertconv.destination.atomic import PARTIAL_MARK
from bertconv.conversion import WriteOptions, convert
from bertconv.errors import BadInput
from conftest import FIXTURES, needs, run_cli

#: The documented temporary: `.<name>.bertconv-partial-<pid>`.
PARTIAL = re.compile(r"^\.(?P<name>.+)" + re.escape(PARTIAL_MARK) + r"(?P<pid>\d+)$")
SMALL = FIXTURES / "hf" / "pretraining"
#: Destination name per target: a directory for hf and tf, one file for bert4keras.
DESTINATIONS = {"hf": "out-hf", "tf": "out-tf", "bert4keras": "out-b4k"}
TARGETS = [t for t in ("hf", "tf", "bert4keras") if t in formats.TARGETS]

# The large input: BERT-base-like widths, 8 layers, fp32 random values: 322 MB.
BIG = dict(V=30522, H=768, L=8, I=3072, P=512)
KILL_ATTEMPTS = 3
POLL_SECONDS = 0.0005
STEP_SECONDS = 0.003  # the writer runs this long between two looks at the temporary
WAIT_LIMIT_SECONDS = 120


def _big_checkpoint(directory: Path) -> Path:
    """A Hugging Face BERT encoder (no heads) of random float32 values, ~322 MB, as
    `model.safetensors` + `config.json`, written one tensor at a time."""
    save_file = needs("safetensors.numpy").save_file

    V, H, L, I, P = BIG["V"], BIG["H"], BIG["L"], BIG["I"], BIG["P"]
    rng = np.random.default_rng(8)
    shapes = {"bert.embeddings.word_embeddings.weight": (V, H), "bert.embeddings.position_embeddings.weight": (P, H),
              "bert.embeddings.token_type_embeddings.weight": (2, H),
              "bert.embeddings.LayerNorm.weight": (H,), "bert.embeddings.LayerNorm.bias": (H,)}
    for i in range(L):
        layer = f"bert.encoder.layer.{i}"
        for name in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            shapes[f"{layer}.{name}.weight"] = (H, H)
            shapes[f"{layer}.{name}.bias"] = (H,)
        shapes[f"{layer}.intermediate.dense.weight"] = (I, H)
        shapes[f"{layer}.intermediate.dense.bias"] = (I,)
        shapes[f"{layer}.output.dense.weight"] = (H, I)
        shapes[f"{layer}.output.dense.bias"] = (H,)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[f"{layer}.{name}.weight"] = (H,)
            shapes[f"{layer}.{name}.bias"] = (H,)
    save_file({name: rng.random(shape, dtype=np.float32) for name, shape in shapes.items()},
              str(directory / "model.safetensors"))
    config = {"model_type": "bert", "architectures": ["BertModel"], "vocab_size": V, "hidden_size": H,
              "num_hidden_layers": L, "num_attention_heads": H // 64, "intermediate_size": I,
              "max_position_embeddings": P, "type_vocab_size": 2, "hidden_act": "gelu"}
    (directory / "config.json").write_text(json.dumps(config))
    return directory


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    return _big_checkpoint(tmp_path_factory.mktemp("big"))


def _size(path: Path) -> int:
    """Bytes under `path` (a file or a directory); raises FileNotFoundError once it is gone."""
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return path.stat().st_size


def _kill_midway(source: Path, destination: Path, target: str,
                 signum: int = signal.SIGKILL) -> tuple[int, list[int], int]:
    """Start `convert`, wait until its temporary exists and grows, SIGKILL it.

    The process is stopped (SIGSTOP) as soon as its temporary appears and then let run
    STEP_SECONDS at a time, so that the growth is seen whatever the machine's speed. Returns
    the pid, the sizes seen and the exit status. Retries when a run finishes before it could be
    caught. `signum` other than SIGKILL is delivered to the stopped process, then it is resumed."""
    for _ in range(KILL_ATTEMPTS):
        caught = _try_to_kill_midway(source, destination, target, signum)
        if caught is not None:
            return caught
        if destination.is_dir():
            shutil.rmtree(destination)
        elif destination.exists():
            destination.unlink()
    pytest.fail(f"convert --to {target} finished {KILL_ATTEMPTS} times before it could be caught mid-write")


def _as_a_shell_starts_it() -> None:
    """In the child before exec: the terminating signals at their defaults, as an interactive
    shell starts a command. A child inherits ignored signals, and whatever ran before in this test
    process may have left SIGINT ignored: Python then installs no KeyboardInterrupt handler."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def _try_to_kill_midway(source: Path, destination: Path, target: str,
                        signum: int) -> tuple[int, list[int], int] | None:
    proc = subprocess.Popen([sys.executable, "-m", "bertconv.cli", "convert", str(source), str(destination),
                             "--to", target, "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=_as_a_shell_starts_it)
    partial = destination.parent / f".{destination.name}{PARTIAL_MARK}{proc.pid}"
    deadline = time.monotonic() + WAIT_LIMIT_SECONDS
    try:
        while not partial.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
        if proc.poll() is not None:
            return None  # finished before its temporary was seen
        os.kill(proc.pid, signal.SIGSTOP)
        sizes = []
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                sizes.append(_size(partial))
            except FileNotFoundError:
                return None  # renamed into place: the run finished
            if len(sizes) >= 2 and 0 < sizes[-2] < sizes[-1]:
                os.kill(proc.pid, signum)
                os.kill(proc.pid, signal.SIGCONT)
                return proc.pid, sizes, proc.wait(timeout=60)
            os.kill(proc.pid, signal.SIGCONT)
            time.sleep(STEP_SECONDS)
            os.kill(proc.pid, signal.SIGSTOP)
        return None
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


@pytest.mark.parametrize("target", TARGETS)
def test_sigkill_leaves_only_the_documented_temporary_and_the_next_run_cleans_it(big, tmp_path, target):
    out = tmp_path / "out"
    out.mkdir()
    destination = out / DESTINATIONS[target]
    pid, sizes, status = _kill_midway(big, destination, target)
    assert status == -signal.SIGKILL
    left = sorted(p.name for p in out.iterdir())
    assert left == [f".{destination.name}{PARTIAL_MARK}{pid}"], left
    match = PARTIAL.match(left[0])
    assert match and match["name"] == destination.name and int(match["pid"]) == pid
    assert 0 < sizes[-1] < _size(big / "model.safetensors") + (1 << 20), sizes

    result = run_cli("convert", big, destination, "--to", target, "--quiet")
    assert result.exit_code == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == [destination.name], "the stale temporary was not removed"
    audit = run_cli("audit", destination)
    assert audit.exit_code == 0, audit.stdout + audit.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_terminating_signals_remove_the_temporary_and_exit_as_shells_expect(big, tmp_path, signum):
    out = tmp_path / "out"
    out.mkdir()
    destination = out / "out-hf"
    _, _, status = _kill_midway(big, destination, "hf", signum)
    assert status == 128 + signum  # 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP
    assert list(out.iterdir()) == [], "a temporary or a partial output was left behind"


def _digest(path: Path) -> dict[str, tuple[str, int]]:
    files = sorted(path.rglob("*")) if path.is_dir() else [path]
    return {str(f): (hashlib.sha256(f.read_bytes()).hexdigest(), f.stat().st_mtime_ns) for f in files if f.is_file()}


@pytest.mark.parametrize("target", TARGETS)
def test_existing_destination_is_replaced_only_with_force(tmp_path, target):
    destination = tmp_path / DESTINATIONS[target]
    assert run_cli("convert", FIXTURES / "tf" / "full", destination, "--to", target).exit_code == 0
    (destination / "tokenizer.json").write_text('{"kept": true}')
    before = _digest(destination)

    result = run_cli("convert", SMALL, destination, "--to", target)
    assert result.exit_code == 2
    assert str(destination) in result.stderr and "already exists" in result.stderr and "--force" in result.stderr
    assert "Traceback" not in result.stderr
    assert _digest(destination) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [destination.name]

    result = run_cli("convert", SMALL, destination, "--to", target, "--force")
    assert result.exit_code == 0, result.stderr
    assert _digest(destination) != before
    assert sorted(p.name for p in tmp_path.iterdir()) == [destination.name], "a temporary was left"
    assert run_cli("diff", SMALL, destination).exit_code == 0
    assert not (destination / "tokenizer.json").exists(), "--force kept a file this conversion did not write"


def test_a_forced_output_holds_exactly_what_the_conversion_wrote(tmp_path):
    """An earlier output's vocab.txt (83 tokens) is not left beside a new model of 99 rows whose
    source has none; the conversion says it is gone."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("model.safetensors", "config.json"):
        shutil.copy(SMALL / name, source / name)
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    for name in ("model.safetensors", "config.json"):
        shutil.copy(SMALL / name, earlier / name)
    (earlier / "vocab.txt").write_text("".join(f"t{i}\n" for i in range(83)))
    destination = tmp_path / "out"
    assert run_cli("convert", earlier, destination, "--to", "hf").exit_code == 0
    assert (destination / "vocab.txt").is_file()
    result = run_cli("convert", source, destination, "--to", "hf", "--force", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert not (destination / "vocab.txt").exists()
    listed = {Path(f).name for f in report["output"]["files"]}
    assert {p.name for p in destination.iterdir()} == listed
    assert any("vocab.txt" in note and "holds none" in note for note in report["notes"])
    people = run_cli("convert", earlier, destination, "--to", "hf", "--force")  # the vocab.txt comes back
    assert people.exit_code == 0 and (destination / "vocab.txt").is_file() and "holds none" not in people.stderr


def test_a_destination_holding_a_hard_link_to_an_input_is_refused(tmp_path):
    """Refused by device and inode, as the README promises, whatever the link is called."""
    source = tmp_path / "source"
    shutil.copytree(SMALL, source)
    destination = tmp_path / "out"
    assert run_cli("convert", source, destination, "--to", "hf").exit_code == 0
    (destination / "model.safetensors").unlink()
    os.link(source / "model.safetensors", destination / "model.safetensors")
    before = _digest(source), _digest(destination)
    result = run_cli("convert", source, destination, "--to", "hf", "--force")
    assert result.exit_code == 2
    assert "a hard link to" in result.stderr and str(source / "model.safetensors") in result.stderr
    assert (_digest(source), _digest(destination)) == before
    assert (destination / "model.safetensors").stat().st_ino == (source / "model.safetensors").stat().st_ino


def test_temporaries_of_live_runs_and_unrelated_files_are_left_alone(tmp_path):
    destination = tmp_path / "out"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".out{PARTIAL_MARK}{dead.pid}"
    live = tmp_path / f".out{PARTIAL_MARK}{os.getpid()}"  # this test's own process is alive
    others = [tmp_path / f".other{PARTIAL_MARK}{dead.pid}", tmp_path / f".out{PARTIAL_MARK}x1",
              tmp_path / f"out{PARTIAL_MARK}{dead.pid}"]
    for path in (stale, live, *others):
        path.mkdir()
        (path / "junk").write_text("x")
    result = run_cli("convert", SMALL, destination, "--to", "hf")
    assert result.exit_code == 0, result.stderr
    assert not stale.exists()
    assert live.exists() and all(p.exists() for p in others)


# --- a full disk ----------------------------------------------------------------------------


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 64 KiB tmpfs, smaller than any fixture's output; skipped where mounting is not allowed."""
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip() or proc.returncode}); "
                    f"the monkeypatched disk-full tests still run")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=False)


@pytest.mark.parametrize("target", TARGETS)
def test_full_disk_is_exit_2_and_leaves_nothing(tiny_tmpfs, target):
    destination = tiny_tmpfs / DESTINATIONS[target]
    result = run_cli("convert", SMALL, destination, "--to", target)
    assert result.exit_code == 2, result.stderr
    assert "no space left on device" in result.stderr and str(destination) in result.stderr
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr
    assert list(tiny_tmpfs.iterdir()) == []


class _DiskFull:
    """An `on_tensor` callback that reports a full disk after `after` tensors were written."""

    def __init__(self, after: int):
        self.after = after
        self.calls = 0

    def __call__(self, nbytes: int) -> None:
        self.calls += 1
        if self.calls > self.after:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("after", [0, 5])
@pytest.mark.parametrize("target", TARGETS)
def test_disk_full_mid_write_in_process(tmp_path, target, after):
    """The writer's own code raises ENOSPC part-way (after `after` tensors): BadInput saying so,
    no destination, no temporary."""
    tree = formats.read(SMALL)
    destination = tmp_path / DESTINATIONS[target]
    failing = _DiskFull(after)
    with pytest.raises(BadInput, match="no space left on device") as error:
        convert(tree, destination, target, options=WriteOptions(on_tensor=failing))
    assert str(destination) in str(error.value)
    assert failing.calls >= after + 1
    assert list(tmp_path.iterdir()) == []


class _NoSpace(io.BufferedWriter):
    """A file on a full disk: it opens, and every write fails with ENOSPC."""

    def write(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("target", TARGETS)
def test_disk_full_at_the_first_write_in_process(tmp_path, monkeypatch, target):
    """Every file opened for writing inside the temporary is on a full disk."""
    real_open = io.open

    def full_open(file, mode="r", *args, **kwargs):
        if PARTIAL_MARK in str(file) and any(c in mode for c in "wax+"):
            buffered = _NoSpace(io.FileIO(file, "w"))
            return buffered if "b" in mode else io.TextIOWrapper(buffered, encoding="utf-8")
        return real_open(file, mode, *args, **kwargs)

    tree = formats.read(SMALL)
    destination = tmp_path / DESTINATIONS[target]
    monkeypatch.setattr("builtins.open", full_open)
    monkeypatch.setattr("io.open", full_open)
    with pytest.raises(BadInput, match="no space left on device"):
        convert(tree, destination, target)
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []
