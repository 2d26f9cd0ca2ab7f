"""Early writeback (bertconv/containers/writeback.py): the writers hand what they have written to
the disk as it accumulates, so the final fsync has little left; the bytes written do not change."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest

from bertconv import dtypes
from bertconv.containers import msgpack_file, safetensors_file, stream, writeback
from bertconv.containers.tensorflow import bundle_write as tf_bundle_write
from bertconv.containers.writeback import EarlyWriteback
from bertconv.tensor import ArrayTensor, MappedTensor, TransposedTensor

STEP = 4096


class Recorder:
    """Stands in for libc's sync_file_range: records (offset, nbytes, flags) and returns `result`."""

    def __init__(self, result: int = 0):
        self.calls: list[tuple[int, int, int]] = []
        self.result = result

    def __call__(self, fd, offset, nbytes, flags):
        self.calls.append((offset, nbytes, flags))
        return self.result


@pytest.fixture
def recorder(monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(writeback, "_sync_file_range", lambda: recorder)
    monkeypatch.setattr(writeback, "WRITEBACK_STEP", STEP)
    return recorder


def covers_from_start(calls: list[tuple[int, int, int]], at_least: int) -> bool:
    """The submitted ranges follow one another from byte 0 and reach `at_least`; each starts
    writing without waiting (SYNC_FILE_RANGE_WRITE alone)."""
    position = 0
    for offset, nbytes, flags in calls:
        if offset != position or nbytes <= 0 or flags != 2:
            return False
        position += nbytes
    return position >= at_least


def test_submits_each_step_once_it_is_written(tmp_path, recorder):
    with open(tmp_path / "f", "wb") as f:
        stream = EarlyWriteback(f, step=100)
        f.write(b"x" * 99)
        stream.written(99)
        assert recorder.calls == []  # not a whole step yet
        f.write(b"x" * 151)
        stream.written(250)
        f.write(b"x" * 10)
        stream.written(260)
    assert recorder.calls == [(0, 250, 2)]


def test_bytes_still_in_pythons_buffer_reach_the_page_cache_first(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(writeback, "_sync_file_range",
                        lambda: lambda fd, offset, nbytes, flags: seen.append(os.fstat(fd).st_size) or 0)
    with open(tmp_path / "f", "wb") as f:  # buffered: 300 bytes stay in Python's buffer
        f.write(b"x" * 300)
        EarlyWriteback(f, step=100).written(300)
    assert seen == [300]


@pytest.mark.parametrize("code", [errno.ENOSYS, errno.EINVAL, errno.ESPIPE, errno.EOPNOTSUPP])
def test_unsupported_is_skipped_for_good(tmp_path, monkeypatch, code):
    recorder = Recorder(result=-1)
    monkeypatch.setattr(writeback, "_sync_file_range", lambda: recorder)
    monkeypatch.setattr(writeback.ctypes, "get_errno", lambda: code)
    with open(tmp_path / "f", "wb") as f:
        stream = EarlyWriteback(f, step=1)
        f.write(b"ab")
        stream.written(1)
        stream.written(2)
    assert len(recorder.calls) == 1


def test_a_write_error_is_raised(tmp_path, monkeypatch):
    monkeypatch.setattr(writeback, "_sync_file_range", lambda: Recorder(result=-1))
    monkeypatch.setattr(writeback.ctypes, "get_errno", lambda: errno.EIO)
    with open(tmp_path / "f", "wb") as f, pytest.raises(OSError) as raised:
        f.write(b"ab")
        EarlyWriteback(f, step=1).written(2)
    assert raised.value.errno == errno.EIO


def test_the_real_call_leaves_the_bytes_as_written(tmp_path):
    data = np.random.default_rng(0).integers(0, 256, size=3 * STEP + 5, dtype=np.uint8).tobytes()
    with open(tmp_path / "f", "wb") as f:
        stream = EarlyWriteback(f, step=STEP)
        for start in range(0, len(data), 1000):
            f.write(data[start:start + 1000])
            stream.written(f.tell())
    assert (tmp_path / "f").read_bytes() == data


# --- the writers use it ---------------------------------------------------------------------


def arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {f"t{i}": rng.standard_normal((17 + i, 40), dtype=np.float32) for i in range(6)}


def written_twice(tmp_path, monkeypatch, recorder, write) -> bytes:
    """`write(path)` with writeback on (recorded) and off: the two files' bytes, checked equal,
    and the recorded ranges checked to cover the file (all but its last step)."""
    write(tmp_path / "with")
    monkeypatch.setattr(writeback, "_sync_file_range", lambda: None)
    write(tmp_path / "without")
    with_bytes, without_bytes = (tmp_path / "with").read_bytes(), (tmp_path / "without").read_bytes()
    assert with_bytes == without_bytes
    assert covers_from_start(recorder.calls, len(with_bytes) - STEP - 40 * 22 * 4)
    return with_bytes


def test_safetensors_writer(tmp_path, monkeypatch, recorder):
    values = arrays()
    raw = tmp_path / "raw.bin"
    np.concatenate([a.reshape(-1) for a in values.values()]).tofile(raw)
    offsets = np.cumsum([0] + [a.nbytes for a in values.values()])
    mapped = {name: MappedTensor(raw, int(offset), dtypes.FLOAT32, a.shape)
              for (name, a), offset in zip(values.items(), offsets)}
    # verbatim (copy_file_range), transposed (loaded, written from memory), and from a callable
    sources = [("copied." + n, dtypes.FLOAT32, a.shape, mapped[n]) for n, a in values.items()]
    sources += [("transposed." + n, dtypes.FLOAT32, a.shape[::-1], TransposedTensor(mapped[n])) for n, a in values.items()]
    sources += [("loaded." + n, dtypes.FLOAT32, a.shape, lambda a=a: a) for n, a in values.items()]
    written_twice(tmp_path, monkeypatch, recorder, lambda path: safetensors_file.write_file(path, sources))
    header = safetensors_file.read_header(tmp_path / "with")
    for name, a in values.items():
        assert np.array_equal(header.tensors["copied." + name].read(), a)
        assert np.array_equal(header.tensors["transposed." + name].read(), a.T)


def test_tf_bundle_writer(tmp_path, monkeypatch, recorder):
    values = arrays()
    sources = [(name, dtypes.FLOAT32, a.shape, lambda a=a: a) for name, a in values.items()]

    def write(path):
        tf_bundle_write.write_bundle(path, sources)
        os.replace(f"{path}.data-00000-of-00001", path)

    written_twice(tmp_path, monkeypatch, recorder, write)


def test_msgpack_writer(tmp_path, monkeypatch, recorder):
    tensors = [(("params", name), ArrayTensor(a, dtypes.FLOAT32)) for name, a in arrays().items()]
    written_twice(tmp_path, monkeypatch, recorder, lambda path: msgpack_file.write_file(path, tensors))


def test_keras_h5_writer(tmp_path, monkeypatch, recorder):
    from bertconv.containers.hdf5 import keras as keras_h5
    from bertconv.containers.hdf5 import keras_write as keras_h5_write

    values = arrays()
    layers = [keras_h5_write.LayerToWrite("dense", tuple((f"dense/{name}:0", ArrayTensor(a, dtypes.FLOAT32))
                                                   for name, a in values.items()))]
    written_twice(tmp_path, monkeypatch, recorder, lambda path: keras_h5_write.write_weights_file(
        path, layers, backend="tensorflow", keras_version="2.21.0"))
    weights = keras_h5.read_weights_file(tmp_path / "with")
    assert [np.array_equal(w.tensor.read(), a) for w, a in zip(weights.layers[0].weights, values.values())] == [True] * 6


# --- the safetensors writer's loader runs ahead within its budget -----------------------------


def test_safetensors_loader_runs_ahead_past_small_tensors_within_its_budget(tmp_path, monkeypatch):
    """Names sort a large kernel between small tensors (bias, kernel, bias, kernel, ...): while
    one kernel is written, the next kernel is already being loaded, and what is submitted and
    not yet written never exceeds the tensor in hand + PREFETCH_MAX_BYTES."""
    from bertconv import threads

    budget = 4000
    monkeypatch.setattr(stream, "PREFETCH_MAX_BYTES", budget)
    log: list[tuple[str, str, int]] = []  # ("submit" | "written", name, nbytes), in the main thread

    class Recording(threads.Workers):
        def submit(self, fn, source, *args):
            log.append(("submit", source.name, source.nbytes))
            return super().submit(fn, source, *args)

    monkeypatch.setattr(threads, "Workers", Recording)
    original_write = stream._Sink.array

    def recording_write(sink, array):
        original_write(sink, array)
        log.append(("written", "", array.nbytes))

    monkeypatch.setattr(stream._Sink, "array", recording_write)
    rng = np.random.default_rng(2)
    tensors = {}
    for layer in range(4):
        tensors[f"l{layer}.a_bias"] = rng.standard_normal((10,), dtype=np.float32)  # 40 bytes
        tensors[f"l{layer}.b_kernel"] = rng.standard_normal((30, 25), dtype=np.float32)  # 3000 bytes
    sources = []
    for name, values in tensors.items():
        tensor = ArrayTensor(values, dtypes.FLOAT32)
        tensor.name = name
        sources.append((name, dtypes.FLOAT32, values.shape, tensor))  # in memory: loaded, not copied
    safetensors_file.write_file(tmp_path / "m.safetensors", sources)

    header = safetensors_file.read_header(tmp_path / "m.safetensors")
    assert all(np.array_equal(header.tensors[name].read(), values) for name, values in tensors.items())
    submitted = [name for kind, name, _ in log if kind == "submit"]
    assert submitted == sorted(tensors)  # each once, in write order
    # The kernel after the next bias is submitted before the current kernel is written.
    writes = [k for k, (kind, _, _) in enumerate(log) if kind == "written"]
    first_kernel_written = writes[1]  # l0.a_bias, then l0.b_kernel
    assert log.index(("submit", "l1.b_kernel", 3000)) < first_kernel_written
    outstanding, largest = 0, 3000
    for kind, _, nbytes in log:
        outstanding += nbytes if kind == "submit" else -nbytes
        assert outstanding <= largest + budget
