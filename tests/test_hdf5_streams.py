"""HDF5 files laid out in memory and streamed (containers/hdf5/image.py), and what a reading learns
of one once (containers/hdf5/one_reading.py)."""

from __future__ import annotations

import os

import h5py
import numpy as np

from bertconv import dtypes, formats
from bertconv.containers.hdf5 import image, keras_listing, one_reading, workarounds
from bertconv.containers.hdf5 import keras as keras_h5
from bertconv.containers.hdf5.keras_write import LayerToWrite, write_weights_file
from bertconv.tensor import ArrayTensor, TransposedTensor
from conftest import FIXTURES

B4K = FIXTURES / "bert4keras" / "v50-mlm"
WEIGHTS = "bert4keras_model.h5"


# --- the image ----------------------------------------------------------------------------------


def test_the_image_reads_back_what_was_written_and_zeros_elsewhere():
    f = image.MetadataImage()
    f.seek(5000)
    assert f.write(b"abc") == 3 and f.tell() == 5003 and f.size == 5003
    f.seek(4094)
    f.write(b"XYZW")  # across a page boundary
    f.seek(0)
    data = f.read()
    assert len(data) == 5003 and data[4094:4098] == b"XYZW" and data[5000:] == b"abc"
    assert data[:4094] == bytes(4094) and data[4098:5000] == bytes(902)
    assert f.bytes_between(4090, 5003) == data[4090:]
    f.truncate(4096)
    f.seek(0, os.SEEK_END)
    assert f.tell() == 4096 and f.bytes_between(0, 4096) == data[:4096] and set(f.pages) == {0}


def test_hdf5_never_writes_the_file_and_the_stream_holds_every_value(tmp_path, monkeypatch):
    """h5py is handed the in-memory image, never the output's path (after a failed write HDF5
    crashes the process); the file bertconv streams is one h5py and Keras' reader read alike,
    a transposed source included."""
    opened = []
    real = h5py.File

    def recording(name, *args, **kwargs):
        opened.append(name)
        return real(name, *args, **kwargs)

    image.h5py.File  # the lazy module imported first: it then holds h5py's names, where the patch goes  # noqa: B018
    monkeypatch.setattr(image.h5py, "File", recording)
    rng = np.random.default_rng(0)
    kernel = rng.standard_normal((7, 5)).astype(np.float32)
    bias = rng.standard_normal(5).astype(np.float32)
    layers = [LayerToWrite("Input-Token"),
              LayerToWrite("Dense", (("Dense/kernel:0", TransposedTensor(ArrayTensor(kernel.T.copy(), dtypes.FLOAT32))),
                                     ("Dense/bias:0", ArrayTensor(bias, dtypes.FLOAT32))))]
    path = tmp_path / "w.h5"
    write_weights_file(path, layers, backend="tensorflow", keras_version="2.21.0")
    assert opened and all(isinstance(name, image.MetadataImage) for name in opened)
    monkeypatch.undo()
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["Dense/Dense/kernel:0"][()], kernel)
        np.testing.assert_array_equal(f["Dense/Dense/bias:0"][()], bias)
    read = keras_h5.read_weights_file(path)
    assert [layer.name for layer in read.layers] == ["Input-Token", "Dense"]
    np.testing.assert_array_equal(read.layers[1].weights[0].tensor.read(), kernel)


# --- one reading --------------------------------------------------------------------------------


def test_a_reading_checks_and_lists_each_hdf5_file_once(tmp_path, monkeypatch):
    """Finding a bert4keras file's format asks four readers about it; within `formats.read` its
    global heaps are checked and its names listed once."""
    checks, listings = [], []
    check, listing = workarounds._check_global_heaps, keras_listing._list_weights
    monkeypatch.setattr(workarounds, "_check_global_heaps", lambda path: checks.append(path) or check(path))
    monkeypatch.setattr(keras_listing, "_list_weights", lambda path: listings.append(path) or listing(path))
    tree = formats.read(B4K)
    assert tree.format == "bert4keras-h5"
    assert checks == [B4K / WEIGHTS] and listings == [B4K / WEIGHTS]


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
