"""HDF5 files laid out by bertconv and streamed (containers/hdf5/image.py), and what a reading
learns of one once (containers/one_reading.py)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

import bertconv
from bertconv import dtypes, formats
from bertconv.containers import direct_output
from bertconv.containers import one_reading
from bertconv.containers.hdf5 import image, keras_listing, nodes, workarounds
from bertconv.containers.hdf5 import keras as keras_h5
from bertconv.containers.hdf5.keras_write import LayerToWrite, write_weights_file
from bertconv.tensor import ArrayTensor, TransposedTensor
from conftest import FIXTURES, ROOT

B4K = FIXTURES / "bert4keras" / "v50-mlm"
WEIGHTS = "bert4keras_model.h5"


# --- the image ----------------------------------------------------------------------------------


def test_no_h5py_writes_the_file_and_the_stream_holds_every_value(tmp_path):
    """bertconv lays the file out itself (h5py not even imported: a process that writes a Keras
    file starts writing at once); the file it streams is one h5py and Keras' reader read alike, a
    transposed source included."""
    rng = np.random.default_rng(0)
    kernel = rng.standard_normal((7, 5)).astype(np.float32)
    bias = rng.standard_normal(5).astype(np.float32)
    np.save(tmp_path / "kernel.npy", kernel)
    np.save(tmp_path / "bias.npy", bias)
    path = tmp_path / "w.h5"
    script = f"""
import sys
import numpy as np
from bertconv import dtypes
from bertconv.containers.hdf5.keras_write import LayerToWrite, write_weights_file
from bertconv.tensor import ArrayTensor, TransposedTensor
kernel, bias = np.load({str(tmp_path / "kernel.npy")!r}), np.load({str(tmp_path / "bias.npy")!r})
layers = [LayerToWrite("Input-Token"),
          LayerToWrite("Dense", (("Dense/kernel:0", TransposedTensor(ArrayTensor(kernel.T.copy(), dtypes.FLOAT32))),
                                 ("Dense/bias:0", ArrayTensor(bias, dtypes.FLOAT32))))]
write_weights_file({str(path)!r}, layers, backend="tensorflow", keras_version="2.21.0")
print("h5py" in sys.modules)
"""
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "False"
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["Dense/Dense/kernel:0"][()], kernel)
        np.testing.assert_array_equal(f["Dense/Dense/bias:0"][()], bias)
    read = keras_h5.read_weights_file(path)
    assert [layer.name for layer in read.layers] == ["Input-Token", "Dense"]
    np.testing.assert_array_equal(read.layers[1].weights[0].tensor.read(), kernel)


def test_a_file_written_past_the_cache_has_its_metadata_read_ahead_and_nothing_else(tmp_path, monkeypatch):
    """What is read ahead for the read-back is the file's metadata, all of it: every byte before
    the first tensor's values but their alignment; between and after the values, nothing but
    alignment zeros."""
    advised = []
    real_advise = os.posix_fadvise

    def recording(fd, offset, length, advice):
        if advice == os.POSIX_FADV_WILLNEED:
            advised.append((offset, offset + length))
        return real_advise(fd, offset, length, advice)

    monkeypatch.setattr(direct_output, "DIRECT_MIN_BYTES", 0)  # this small file written as a large one is
    monkeypatch.setattr(os, "posix_fadvise", recording)
    rng = np.random.default_rng(0)
    layers = [LayerToWrite(f"Dense-{i}", ((f"Dense-{i}/kernel:0", ArrayTensor(rng.standard_normal((64, 96)).astype(np.float32),
                                                                              dtypes.FLOAT32)),
                                          (f"Dense-{i}/bias:0", ArrayTensor(np.ones(96, np.float32), dtypes.FLOAT32))))
              for i in range(3)]
    path = tmp_path / "w.h5"
    write_weights_file(path, layers, backend="tensorflow", keras_version="2.21.0")
    with h5py.File(path, "r") as f:
        stored = sorted((f[f"Dense-{i}/Dense-{i}/{w}"].id.get_offset(), f[f"Dense-{i}/Dense-{i}/{w}"].id.get_storage_size())
                        for i in range(3) for w in ("kernel:0", "bias:0"))
    tensors = [(offset, offset + size) for offset, size in stored]
    assert len(advised) == 1 and advised[0][0] == 0
    metadata_end = advised[0][1]
    assert metadata_end <= tensors[0][0] < metadata_end + image.DATA_ALIGNMENT
    data = path.read_bytes()
    assert tensors[-1][1] == len(data)
    gaps = [(end, begin) for (_, end), (begin, _) in zip([(0, metadata_end)] + tensors, tensors)]
    assert all(data[begin:end] == bytes(end - begin) for begin, end in gaps)


def test_a_refused_read_ahead_still_writes_the_file(tmp_path, monkeypatch):
    """Reading ahead is advice: where the file system refuses it, the file is written all the same."""
    def refused(fd, offset, length, advice):
        raise OSError(errno.EINVAL, "refused")

    monkeypatch.setattr(direct_output, "DIRECT_MIN_BYTES", 0)
    monkeypatch.setattr(os, "posix_fadvise", refused)
    bias = np.arange(96, dtype=np.float32)
    write_weights_file(tmp_path / "w.h5", [LayerToWrite("Dense", (("Dense/bias:0", ArrayTensor(bias, dtypes.FLOAT32)),))],
                       backend="tensorflow", keras_version="2.21.0")
    with h5py.File(tmp_path / "w.h5", "r") as f:
        np.testing.assert_array_equal(f["Dense/Dense/bias:0"][()], bias)


# --- one reading --------------------------------------------------------------------------------


@pytest.mark.parametrize("own_reader", [True, False], ids=["bertconv's reader", "h5py"])
def test_a_reading_parses_checks_and_lists_each_hdf5_file_once(tmp_path, monkeypatch, own_reader):
    """Finding a bert4keras file's format asks four readers about it; within `formats.read` it is
    parsed by bertconv's own reader once, and its names listed once. When that reader leaves the
    file to h5py, its global heaps are checked once (bertconv's reader walks them itself)."""
    parses, checks, listings = [], [], []
    parse, check, listing = nodes._parse, workarounds._check_global_heaps, keras_listing._list_weights
    monkeypatch.setattr(nodes, "_parse", lambda path: parses.append(path) or (parse(path) if own_reader else None))
    monkeypatch.setattr(workarounds, "_check_global_heaps", lambda path: checks.append(path) or check(path))
    monkeypatch.setattr(keras_listing, "_list_weights", lambda path: listings.append(path) or listing(path))
    tree = formats.read(B4K)
    assert tree.format == "bert4keras-h5"
    assert parses == listings == [B4K / WEIGHTS]
    assert checks == ([] if own_reader else [B4K / WEIGHTS])


def test_outside_a_reading_every_question_is_answered_afresh(tmp_path):
    """Only a `one_reading` block remembers: outside one a file rewritten in place within a clock
    tick (same size, same times) could otherwise skip the heap check HDF5 needs; a changed file
    is asked again even inside one."""
    path = tmp_path / "f.h5"
    path.write_bytes(b"x")
    asked = []
    learn = lambda: asked.append(1) or len(asked)  # noqa: E731
    assert [one_reading.remembered(path, "q", learn) for _ in range(2)] == [1, 2]
    with one_reading.one_reading():
        assert [one_reading.remembered(path, "q", learn) for _ in range(2)] == [3, 3]
        assert one_reading.remembered(path, "another question", learn) == 4
        path.write_bytes(b"yy")
        assert one_reading.remembered(path, "q", learn) == 5
    assert one_reading.remembered(path, "q", learn) == 6


def test_a_reading_reads_each_layers_weight_names_once(monkeypatch):
    """The reader takes each layer's weight names from the listing format detection made of the
    same file in the same reading: every `weight_names` attribute is read once, and the tree is
    the one a reading without that listing gives."""
    read_names = []
    string_list = keras_h5.string_list

    def recording(path, attrs, name, where):
        read_names.append((name, where))
        return string_list(path, attrs, name, where)

    alone = keras_h5.read_weights_file(B4K / WEIGHTS)  # outside a reading: nothing listed before
    monkeypatch.setattr(keras_h5, "string_list", recording)
    monkeypatch.setattr(keras_listing, "string_list", recording)
    assert formats.read(B4K).format == "bert4keras-h5"
    layers = [where for name, where in read_names if name == keras_h5.WEIGHT_NAMES]
    assert layers and len(layers) == len(set(layers))
    with one_reading.one_reading():
        keras_listing.layer_names(B4K / WEIGHTS)
        listed_first = keras_h5.read_weights_file(B4K / WEIGHTS)
    assert [(layer.name, [(w.name, w.tensor.shape) for w in layer.weights]) for layer in listed_first.layers] == \
        [(layer.name, [(w.name, w.tensor.shape) for w in layer.weights]) for layer in alone.layers]


def test_a_reading_parses_each_keras3_file_once(monkeypatch):
    """bert4keras' sniffer parses a keras-hub preset's Keras 3 files to see whether they are its
    own; the preset's reader then takes the same parse: each file is opened once per reading."""
    from bertconv.containers.hdf5 import keras3

    opened = []
    parse = keras3._read_keras3_open
    monkeypatch.setattr(keras3, "_read_keras3_open", lambda path, f, **kw: opened.append(path.name) or parse(path, f, **kw))
    tree = formats.read(FIXTURES / "keras_hub" / "bert")
    assert tree.format == "keras-hub-preset"
    assert sorted(opened) == ["model.weights.h5", "task.weights.h5"]


def test_a_layer_without_weight_names_is_refused_after_a_listing(tmp_path):
    """The listing notes a layer group without `weight_names` as such (not as a layer without
    weights), so the reader still refuses it, naming the layer."""
    path = tmp_path / WEIGHTS
    path.write_bytes((B4K / WEIGHTS).read_bytes())
    with h5py.File(path, "r+") as f:
        del f["Embedding-Token"].attrs["weight_names"]
    with one_reading.one_reading():
        assert "Embedding-Token" in keras_listing.layer_names(path)
        try:
            keras_h5.read_weights_file(path)
        except Exception as error:  # noqa: BLE001 - the message is what is checked
            assert "layer 'Embedding-Token' has no weight_names attribute" in str(error)
        else:
            raise AssertionError("a layer without weight_names was read")


def test_known_answers_only_what_this_reading_learnt_of_this_file(tmp_path):
    path = tmp_path / "f.h5"
    path.write_bytes(b"x")
    assert one_reading.known(path, "q") is None
    with one_reading.one_reading():
        assert one_reading.known(path, "q") is None  # never learns
        one_reading.remembered(path, "q", lambda: {"a": []})
        assert one_reading.known(path, "q") == {"a": []} and one_reading.known(path, "other") is None
        path.write_bytes(b"yy")
        assert one_reading.known(path, "q") is None
    assert one_reading.known(path, "q") is None


# --- the same bytes -----------------------------------------------------------------------------


def _objects_with_times(path) -> list[str]:
    """The objects of HDF5 file `path` that record when they were made or changed."""
    timed = []
    with h5py.File(path, "r") as f:
        def check(name, obj):
            info = h5py.h5o.get_info(obj.id)
            if info.ctime or info.mtime or info.btime:
                timed.append(name)
        check("/", f)
        f.visititems(check)
    return timed


@pytest.mark.parametrize("source, target, options", [
    (FIXTURES / "hf" / "masked_lm", "bert4keras", {}),
    (FIXTURES / "hf" / "masked_lm", "hf-tf", {}),
    (FIXTURES / "keras_hub" / "bert", "keras-hub", {}),
    (FIXTURES / "keras_hub" / "deberta_v3_sharded", "keras-hub", {"max_shard_size": 2000}),
    (FIXTURES / "hf" / "masked_lm", "hf", {}),
    (FIXTURES / "hf" / "masked_lm", "tf", {}),
    (FIXTURES / "hf" / "masked_lm", "hf-flax", {}),
    (FIXTURES / "hf" / "masked_lm", "onnx", {}),
])
def test_an_output_records_no_time_and_repeats_byte_for_byte(tmp_path, source, target, options):
    """HDF5 stamps a new object with the clock unless told not to; no object bertconv writes
    carries a time, and converting one checkpoint twice gives the same bytes in every format."""
    first, second = tmp_path / "first", tmp_path / "second"
    bertconv.convert(source, first, to=target, **options)
    bertconv.convert(source, second, to=target, **options)
    written = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    assert written == sorted(p.relative_to(second) for p in second.rglob("*") if p.is_file())
    for name in written:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
        if name.suffix == ".h5":
            assert _objects_with_times(first / name) == [], name
