"""bertconv's own reader of HDF5 metadata (containers/hdf5/metadata.py) against h5py's.

It must answer exactly as h5py for every file it reads (links in order, attributes, each
dataset's shape, dtype and offset), read every Keras file the fixtures hold, and leave to h5py
(`Unsupported`) every file it does not read entirely: a format version it does not parse, data
stored otherwise than contiguously, links that are not hard links, types it does not map.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

import bertconv
from bertconv import formats
from bertconv.containers.hdf5 import metadata, nodes, objects
from conftest import FIXTURES, SHARED_REAL

HDF5_FIXTURES = sorted(p for p in FIXTURES.rglob("*") if p.suffix in (".h5", ".hdf5", ".keras") and p.is_file())


# --- what each reader says a file holds ----------------------------------------------------------


def _plain(value):
    """An attribute's value as h5py gives it, in the form bertconv's reader gives it."""
    if isinstance(value, np.ndarray):
        return [_plain(item) for item in value.reshape(-1)] if value.ndim else _plain(value[()])
    if isinstance(value, np.bytes_):
        return bytes(value)
    return value.item() if isinstance(value, np.generic) else value


def h5py_view(path: Path) -> dict:
    """Every object below the root as h5py reads it, by path: a group's attributes and links in
    h5py's order, a dataset's attributes, shape, dtype (NumPy's name) and offset."""
    view = {}
    with h5py.File(path, "r") as f:
        def describe(name: str, obj) -> None:
            attrs = {key: _plain(obj.attrs[key]) for key in obj.attrs}
            if isinstance(obj, h5py.Dataset):
                view[name] = ("dataset", attrs, obj.shape, obj.dtype.str, obj.id.get_offset())
            else:
                view[name] = ("group", attrs, list(obj.keys()))

        describe("/", f)
        f.visititems(lambda name, obj: describe(name, obj))
    return view


def own_view(path: Path) -> dict:
    """The same, as bertconv's reader gives it (bfloat16 stored as 2-byte opaque data is NumPy's
    `|V2`, as h5py reads it)."""
    root = metadata.read_tree(path)
    view = {}
    for name, node in [("/", root), *objects.walk(root)]:
        if isinstance(node, objects.Dataset):
            stored = "|V2" if node.dtype.name == "bfloat16" else np.dtype(node.dtype.storage).str
            view[name] = ("dataset", node.attrs, node.shape, stored, node.offset)
        else:
            view[name] = ("group", node.attrs, list(node.keys()))
    return view


def assert_same_or_unsupported(path: Path) -> bool:
    """bertconv's reader gives h5py's answer for `path` or says `Unsupported`; True if it read it."""
    try:
        mine = own_view(path)
    except objects.Unsupported:
        return False
    assert mine == h5py_view(path)
    with h5py.File(path, "r") as f:
        assert nodes.dataset_paths(metadata.read_tree(path)) == nodes.dataset_paths(f)
    return True


# --- the fixtures: every Keras file, read as h5py reads it ---------------------------------------


def test_the_fixtures_hold_many_hdf5_files():
    assert len(HDF5_FIXTURES) > 50


@pytest.mark.parametrize("path", HDF5_FIXTURES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_every_fixture_is_read_as_h5py_reads_it(path):
    assert assert_same_or_unsupported(path), f"{path} is left to h5py"


def test_a_real_keras_file_is_read_as_h5py_reads_it():
    path = SHARED_REAL / "keras2-bilstm-not-bert.weights.h5"
    if not path.is_file():
        pytest.skip(f"{path} is absent (../shared/real ships only beside the project, not in clones)")
    assert assert_same_or_unsupported(path)


def _tree_facts(checkpoint: Path) -> tuple:
    tree = formats.read(checkpoint)
    return (tree.format, tree.config, [(p.name, p.source, p.tensor.shape, str(p.tensor.dtype), p.tensor.byte_span())
                                        for p in tree], [(i.name, i.reason) for i in tree.ignored])


@pytest.mark.parametrize("checkpoint", ["bert4keras/v50-pool-nsp-mlm", "hf_tf/pretraining", "hf_tf/sharded",
                                        "family_hf_tf/albert/pretraining", "keras_hub/bert", "keras_hub/bert_bfloat16",
                                        "keras_hub/deberta_v3_sharded", "keras_bert/pretraining/model.h5", "keras_bert/pretraining/weights.h5",
                                        "tf2/bert-for-tf2-h5"])
def test_a_checkpoint_reads_the_same_through_either_reader(checkpoint, monkeypatch):
    """A checkpoint's tree, each tensor's bytes where they lie included, whichever reader reads
    its HDF5 files."""
    path = FIXTURES / checkpoint
    own = _tree_facts(path)
    monkeypatch.setattr(nodes, "own_tree", lambda path: None)
    assert own == _tree_facts(path)


@pytest.mark.parametrize("target", ["bert4keras", "hf-tf"])
def test_what_bertconv_writes_is_read_as_h5py_reads_it(tmp_path, target):
    bertconv.convert(FIXTURES / "hf" / "pretraining", tmp_path / "out", to=target)
    (written,) = (tmp_path / "out").glob("*.h5")
    assert assert_same_or_unsupported(written), f"{written} is left to h5py"


# --- files made with h5py: read alike, or left to h5py ------------------------------------------


def _keras_like(f: h5py.File) -> None:
    """What Keras' save_weights writes, in the kinds of attributes each version has used."""
    f.attrs["layer_names"] = np.array([b"dense", b"empty"])             # fixed-length strings
    f.attrs["backend"] = "tensorflow"                                   # a variable-length string
    f.attrs["keras_version"] = np.bytes_(b"2.3.1")
    dense = f.create_group("dense")
    dense.attrs["weight_names"] = ["dense/kernel:0", "dense/bias:0"]  # variable-length, a list
    f.create_group("empty").attrs["weight_names"] = np.array([], dtype=np.float64)
    dense.create_dataset("dense/kernel:0", data=np.arange(12, dtype=np.float32).reshape(3, 4))
    dense.create_dataset("dense/bias:0", data=np.zeros(4, dtype=np.float16))


def _every_type(f: h5py.File) -> None:
    for dtype in ("<f2", "<f4", "<f8", "<i1", "<i2", "<i4", "<i8", "<u1"):
        f.create_dataset(f"t/{dtype}", data=np.arange(6, dtype=dtype).reshape(2, 3))
        f["t"].attrs[f"a{dtype}"] = np.arange(3, dtype=dtype)
        f["t"].attrs[f"s{dtype}"] = np.array(7, dtype=dtype)
    f.create_dataset("scalar", data=np.float32(1.5))
    f.create_dataset("never_written", shape=(0, 4), dtype="<f4")
    f.attrs["utf8"] = "Gewichte – 重み"
    f.attrs["nul_padded"] = np.array([b"ab", b"a\0"], dtype="S4")


def _bfloat16(f: h5py.File) -> None:
    dataset = f.create_dataset("vars/0", data=np.arange(4, dtype="<u2").view("V2"))
    dataset.attrs["dtype"] = "bfloat16"


def _many_links(f: h5py.File) -> None:
    """Enough links for a symbol table B-tree of more than one level, names in HDF5's order."""
    group = f.create_group("many")
    for index in random.Random(0).sample(range(3000), 3000):
        group.create_dataset(f"w{index}", data=np.float32(index))
    group.create_dataset("Ä/é", data=np.int8(1))


def _shared_objects(f: h5py.File) -> None:
    """A dataset linked twice, and a group linked into its own child (each object visited once)."""
    f.create_dataset("a/x", data=np.ones(3, dtype="<f4"))
    f["b"] = f["a/x"]
    f["a/inner"] = f["a"]


def _long_attributes(f: h5py.File) -> None:
    """Attributes that overflow the first header block into continuation blocks."""
    group = f.create_group("g")
    for index in range(40):
        group.attrs[f"names{index}"] = [f"layer_{index}_{j}/kernel:0" for j in range(60)]
    group.create_dataset("d", data=np.ones((2, 2), dtype="<f4"))


READ = {"keras-like": _keras_like, "every type": _every_type, "bfloat16": _bfloat16, "many links": _many_links,
        "shared objects": _shared_objects, "long attributes": _long_attributes}


@pytest.mark.parametrize("make", READ.values(), ids=READ.keys())
def test_what_keras_writes_is_read_as_h5py_reads_it(tmp_path, make):
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        make(f)
    assert assert_same_or_unsupported(path), f"{path} is left to h5py"


def _chunked(f):
    f.create_dataset("d", data=np.ones((4, 4), dtype="<f4"), chunks=(2, 2))


def _compressed(f):
    f.create_dataset("d", data=np.ones((64, 64), dtype="<f4"), compression="gzip")


def _compact(f):
    space = h5py.h5s.create_simple((4,))
    plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    plist.set_layout(h5py.h5d.COMPACT)
    h5py.h5d.create(f.id, b"d", h5py.h5t.NATIVE_FLOAT, space, dcpl=plist)


def _big_endian(f):
    f.create_dataset("d", data=np.ones(4, dtype=">f4"))


def _soft_link(f):
    f.create_dataset("d", data=np.ones(4, dtype="<f4"))
    f["s"] = h5py.SoftLink("/d")


def _external_link(f):
    f["e"] = h5py.ExternalLink("elsewhere.h5", "/d")


def _string_dataset(f):
    f.create_dataset("d", data=np.array([b"a", b"b"]))


def _compound_attribute(f):
    f.attrs["c"] = np.zeros(2, dtype=[("a", "<i4"), ("b", "<f4")])


def _bool_dataset(f):
    f.create_dataset("d", data=np.array([True, False]))


def _tracked_order(f):
    group = f.create_group("g", track_order=True)
    group.create_dataset("b", data=np.ones(2, dtype="<f4"))
    group.create_dataset("a", data=np.ones(2, dtype="<f4"))


LEFT_TO_H5PY = {"chunked": _chunked, "compressed": _compressed, "compact": _compact, "big-endian": _big_endian,
                "soft link": _soft_link, "external link": _external_link, "string dataset": _string_dataset,
                "compound attribute": _compound_attribute, "bool dataset": _bool_dataset,
                "creation order tracked": _tracked_order}


@pytest.mark.parametrize("make", LEFT_TO_H5PY.values(), ids=LEFT_TO_H5PY.keys())
def test_what_it_does_not_read_is_left_to_h5py(tmp_path, make):
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        make(f)
    with pytest.raises(objects.Unsupported):
        metadata.read_tree(path)


@pytest.mark.parametrize("libver", ["v108", "v110", "latest"])
def test_newer_file_formats_are_left_to_h5py(tmp_path, libver):
    path = tmp_path / "f.h5"
    with h5py.File(path, "w", libver=libver) as f:
        _keras_like(f)
    with pytest.raises(objects.Unsupported):
        metadata.read_tree(path)


def test_a_user_block_is_left_to_h5py(tmp_path):
    path = tmp_path / "f.h5"
    with h5py.File(path, "w", userblock_size=512) as f:
        _keras_like(f)
    with pytest.raises(objects.Unsupported):
        metadata.read_tree(path)


# --- damaged files: Unsupported or an answer, never another error, never a hang ------------------


def test_damaged_files_raise_only_unsupported(tmp_path):
    """Bytes flipped, overwritten and cut across a Keras file's metadata: each parse ends within
    a deadline, with a tree or `Unsupported` (h5py then reads the file and reports on it)."""
    source = FIXTURES / "bert4keras" / "v50-pool-nsp-mlm" / "bert4keras_model.h5"
    original = source.read_bytes()
    metadata_end = min(o for o in (_offsets(source)) if o is not None)
    rng = random.Random(31)
    path = tmp_path / "mutant.h5"
    answered = refused = 0
    for case in range(400):
        data = bytearray(original)
        at = rng.randrange(metadata_end)
        kind = case % 4
        if kind == 0:
            data[at] ^= 1 << rng.randrange(8)
        elif kind == 1:
            data[at:at + 8] = rng.choice([b"\xff" * 8, bytes(8), (2**31).to_bytes(8, "little")])
        elif kind == 2:
            data = data[:at]
        else:
            data[at:at + 2] = rng.randrange(65536).to_bytes(2, "little")
        path.write_bytes(bytes(data))
        started = time.monotonic()
        try:
            metadata.read_tree(path)
            answered += 1
        except objects.Unsupported:
            refused += 1
        assert time.monotonic() - started < 5, f"case {case} took {time.monotonic() - started:.1f} s"
    assert answered and refused


def _offsets(path: Path) -> list[int | None]:
    with h5py.File(path, "r") as f:
        return [f[name.decode()].id.get_offset() for name in nodes.dataset_paths(f)]


def test_a_global_heap_hdf5_would_loop_on_is_left_to_its_check(tmp_path):
    """A global heap collection whose free space claims 0 bytes: bertconv's reader leaves it to
    h5py's path, where `workarounds.check_global_heaps` refuses it before HDF5 could loop."""
    data = bytearray((FIXTURES / "bert4keras" / "v50-mlm" / "bert4keras_model.h5").read_bytes())
    position = data.index(b"GCOL") + 16  # this file's collection ends in free space
    while int.from_bytes(data[position:position + 2], "little") != 0:
        position += 16 + -(-int.from_bytes(data[position + 8:position + 16], "little") // 8) * 8
    data[position + 8:position + 16] = bytes(8)
    path = tmp_path / "f.h5"
    path.write_bytes(bytes(data))
    with pytest.raises(objects.Unsupported, match="global heap"):
        metadata.read_tree(path)


def test_a_group_without_its_symbol_table_is_left_to_h5py(tmp_path):
    """The root group's symbol table message made a NIL message: an object that says neither
    where its links are nor that it has none is not read as an empty group."""
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("d", data=np.ones(2, dtype="<f4"))
    data = bytearray(path.read_bytes())
    root_header = int.from_bytes(data[64:72], "little")  # superblock 0: the root's symbol table entry
    position, end = root_header + 16, root_header + 16 + int.from_bytes(data[root_header + 8:root_header + 12], "little")
    while int.from_bytes(data[position:position + 2], "little") != 0x11:  # the header's one block
        position += 8 + int.from_bytes(data[position + 2:position + 4], "little")
        assert position < end, "no symbol table message in the root's header"
    data[position:position + 2] = bytes(2)
    path.write_bytes(bytes(data))
    with pytest.raises(objects.Unsupported, match="not one kind of group"):
        metadata.read_tree(path)
