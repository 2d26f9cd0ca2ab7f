"""Header-only reading of tf_model.h5 (Keras HDF5) and flax_model.msgpack, as the benchmark
measures it: after evicting the file from the page cache, reading its headers leaves only
header pages cached (no kernel readahead into tensor data), and the msgpack walk reads only
the pages of its headers, each once. A torch zip's member headers are read through one descriptor."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest

from benchmarks.measure import evict, resident_bytes
from bertconv import dtypes
from bertconv.containers.hdf5 import keras as keras_h5, keras_listing, workarounds
from bertconv.containers import msgpack_file
from bertconv.containers.hdf5 import keras_write as keras_h5_write
from bertconv.formats.hf import flax as hf_flax
from bertconv.tensor import ArrayTensor
from conftest import FIXTURES, without_system_call

#: 24 layers of 4 tensors of 256 KiB: many headers, each between data a readahead would pull in.
LAYERS, PER_LAYER = 24, 4
TENSORS = LAYERS * PER_LAYER
TENSOR_VALUES = 1 << 16  # float32: 256 KiB
PAGE = 4096


def tensors() -> list[tuple[str, ArrayTensor]]:
    rng = np.random.default_rng(15)
    return [(f"w{i}", ArrayTensor(rng.standard_normal(TENSOR_VALUES, dtype=np.float32), dtypes.from_name("float32")))
            for i in range(TENSORS)]


def cold(path: Path) -> None:
    """Flush `path` to disk and drop it from the page cache; skip where that cannot be done."""
    with open(path, "rb+") as f:
        os.fsync(f.fileno())
    evict([path])
    if resident_bytes(path) > 0:
        pytest.skip(f"{path.parent} cannot be evicted from the page cache (tmpfs?)")


@pytest.fixture
def msgpack_path(tmp_path) -> Path:
    path = tmp_path / "flax_model.msgpack"
    msgpack_file.write_file(path, [(("model", f"layer_{i // PER_LAYER}", name), tensor)
                                   for i, (name, tensor) in enumerate(tensors())])
    return path


@pytest.fixture
def h5_path(tmp_path) -> Path:
    path = tmp_path / "tf_model.h5"
    weights = tensors()
    layers = [keras_h5_write.LayerToWrite(f"layer_{i}", tuple((f"model/layer_{i}/{name}:0", tensor)
                                                        for name, tensor in weights[i * PER_LAYER:(i + 1) * PER_LAYER]))
              for i in range(LAYERS)]
    keras_h5_write.write_weights_file(path, layers, backend="tensorflow", keras_version="2.21.0")
    return path


def test_msgpack_walk_reads_only_the_pages_of_its_headers_once_each(monkeypatch, msgpack_path):
    """Each `pread` is of whole pages that hold header bytes (the kernel would read those pages
    anyway), and a header's page is read once: not once per type byte."""
    reads: list[tuple[int, int]] = []
    pread = os.pread

    def recording(fd, count, position):
        reads.append((position, count))
        return pread(fd, count, position)

    monkeypatch.setattr(os, "pread", recording)
    arrays = msgpack_file.read_file(msgpack_path)
    monkeypatch.undo()
    size = os.path.getsize(msgpack_path)
    spans = sorted((array.tensor.byte_span()[1], array.tensor.nbytes) for array in arrays)
    assert len(spans) == TENSORS and reads
    header_pages: set[int] = set()
    for header_start, header_end in zip([0] + [start + nbytes for start, nbytes in spans],
                                        [start for start, _ in spans] + [size]):
        header_pages.update(range(header_start // PAGE, -(-header_end // PAGE)))
    for position, count in reads:
        assert position % PAGE == 0 and (count % PAGE == 0 or position + count == size), (position, count)
        read_pages = set(range(position // PAGE, -(-(position + count) // PAGE)))
        assert read_pages <= header_pages, f"read of {count} bytes at {position} takes a page of tensor data only"
    assert len(reads) <= 2 * (TENSORS + 1), f"{len(reads)} reads for {TENSORS} arrays' headers"


def test_msgpack_headers_from_a_cold_cache_pull_in_no_tensor_data(msgpack_path):
    cold(msgpack_path)
    hf_flax.sniff(msgpack_path)
    arrays = msgpack_file.read_file(msgpack_path)
    assert len(arrays) == TENSORS
    # Two pages per header at most: one readahead window into a tensor would be 64 pages.
    assert resident_bytes(msgpack_path) <= (TENSORS + 1) * 2 * PAGE


def test_keras_h5_headers_from_a_cold_cache_pull_in_no_tensor_data(h5_path):
    cold(h5_path)
    assert keras_listing.layout(h5_path) == "keras2" and keras_listing.layer_names(h5_path)
    weights = keras_h5.read_layers_unexpanded(h5_path)
    assert sum(len(layer.weights) for layer in weights.layers) == TENSORS
    tensor_bytes = TENSORS * TENSOR_VALUES * 4
    # HDF5 metadata and h5py's own small reads (with the kernel's modest readahead for them);
    # a readahead window around every header would cache a large share of the tensors.
    assert resident_bytes(h5_path) <= tensor_bytes // 16, \
        f"{resident_bytes(h5_path) // 1024} KiB of {os.path.getsize(h5_path) // 1024} KiB cached"


@pytest.mark.parametrize("fadvise", ["absent", "refused"])
def test_headers_are_read_where_the_system_takes_no_advice(fadvise, monkeypatch, msgpack_path, h5_path):
    """`posix_fadvise` shapes the reads, never their result: where the system has none (macOS) or
    refuses it, a msgpack file's headers are read, and an HDF5 file's global heaps checked, as
    elsewhere."""
    expected = [(array.path, array.tensor.shape) for array in msgpack_file.read_file(msgpack_path)]
    without_system_call(monkeypatch, "posix_fadvise", fadvise, errno.EINVAL)
    assert [(array.path, array.tensor.shape) for array in msgpack_file.read_file(msgpack_path)] == expected
    workarounds.check_global_heaps(h5_path)
    assert keras_listing.layer_names(h5_path)[:LAYERS] == [f"layer_{i}" for i in range(LAYERS)]


def test_a_torch_zip_is_opened_once_for_all_its_members_local_headers(monkeypatch):
    """Where each storage's bytes start is read from its member's local header, exactly 30 bytes
    each, through one descriptor (once the head is checked): not one open per tensor."""
    from bertconv.containers import torch_pickle

    path = FIXTURES / "hf/pretraining_bin/pytorch_model.bin"
    opened = []

    def counting_open(file, mode="r", *args, **kwargs):
        opened.append((Path(file), mode, kwargs.get("buffering", -1)))
        return open(file, mode, *args, **kwargs)

    monkeypatch.setattr(torch_pickle, "open", counting_open, raising=False)
    checkpoint = torch_pickle.read_checkpoint(path)
    assert len(checkpoint.tensors) > 20
    assert opened == [(path, "rb", -1), (path, "rb", 0)]


def test_a_torch_pickle_is_unpickled_once_per_reading(monkeypatch):
    """Finding a .bin file's format asks fairseq's, fair-esm's and Megatron-LM's readers too, and
    each reads the file: within one `formats.read` it is unpickled once, its tensors listed once
    for the readers that take it as saved, and read alike; outside one, each reading unpickles it
    again (the file may have changed). Their modules are imported first: an imported format is
    always asked (`Format.may_claim`), so without that the count would hang on which tests ran
    before in this process."""
    import bertconv.formats.fairseq  # noqa: F401
    import bertconv.formats.pytorch.fair_esm  # noqa: F401
    import bertconv.formats.pytorch.megatron_lm  # noqa: F401
    from bertconv import formats
    from bertconv.containers import torch_pickle

    path = FIXTURES / "hf/pretraining_bin/pytorch_model.bin"
    unpickled = []
    real = torch_pickle._unpickle

    def counting(*args):
        unpickled.append(args[1])
        return real(*args)

    assembled = []
    real_assemble = torch_pickle._assemble

    def counting_assemble(*args):
        assembled.append(args[0])
        return real_assemble(*args)

    monkeypatch.setattr(torch_pickle, "_unpickle", counting)
    monkeypatch.setattr(torch_pickle, "_assemble", counting_assemble)
    tree = formats.read(path)
    assert unpickled == [path]
    # taken as saved by Hugging Face's, fairseq's and fair-esm's readers: assembled once for them,
    # and once more by Megatron-LM's, which flattens its nested dicts first
    assert assembled == [path, path]
    assert [(p.name, p.tensor.shape) for p in formats.read(path)] == [(p.name, p.tensor.shape) for p in tree]
    assert unpickled == [path, path]
