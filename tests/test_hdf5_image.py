"""HDF5 files laid out by bertconv (containers/hdf5/image.py, encoding.py) against h5py's.

For the same groups, attributes and datasets, h5py reads bertconv's file and h5py's own file
alike, object for object (every attribute's value, type and shape, every dataset's type, shape
and values); HDF5 can go on writing into bertconv's file (its B-trees, symbol nodes and heaps are
ones HDF5 itself can extend); and bertconv's own reader reads it as h5py does.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from bertconv import dtypes
from bertconv.containers.hdf5 import image
from bertconv.tensor import ArrayTensor
from test_hdf5_metadata import h5py_view, own_view

#: Every dtype a dataset may have, and NumPy's view of its stored bits.
DTYPES = [dtypes.FLOAT32, dtypes.FLOAT16, dtypes.FLOAT64, dtypes.BFLOAT16, dtypes.INT64, dtypes.INT32, dtypes.INT16,
          dtypes.INT8, dtypes.UINT8]


def values(shape: tuple[int, ...], dtype: dtypes.DType, seed: int) -> np.ndarray:
    raw = np.random.default_rng(seed).integers(0, 256, size=int(np.prod(shape)) * dtype.itemsize, dtype=np.uint8)
    return raw.view(dtype.storage).reshape(shape)


#: (path, kind, what): "group" with attributes {name: value}, or "dataset" (shape, dtype, attributes).
Spec = list[tuple[str, str, object]]


def many_names_spec(count: int) -> Spec:
    """A root with `count` groups (more than 256 take a B-tree of two levels), each with a dataset."""
    spec: Spec = [("/", "group", {"layer_names": [f"layer-{i:04d}".encode() for i in range(count)]})]
    for i in range(count):
        spec.append((f"layer-{i:04d}/w:0", "dataset", ((3, 2), dtypes.FLOAT32, {})))
    return spec


SPECS: dict[str, Spec] = {
    "keras 2": [
        ("/", "group", {"layer_names": [b"Embedding-Token", b"Input-Token", b"MLM-Bias"], "backend": b"tensorflow",
                        "keras_version": b"2.21.0"}),
        ("Embedding-Token", "group", {"weight_names": [b"embeddings:0"]}),
        ("Embedding-Token/embeddings:0", "dataset", ((11, 4), dtypes.FLOAT32, {})),
        ("Input-Token", "group", {"weight_names": []}),
        ("MLM-Bias/bias:0", "dataset", ((11,), dtypes.FLOAT16, {})),
        ("top_level_model_weights", "group", {"weight_names": []}),
    ],
    "keras 3": [
        ("layers/dense/vars", "group", {"name": "dense"}),
        ("layers/dense/vars/0", "dataset", ((4, 3), dtypes.FLOAT32, {})),
        ("layers/dense/vars/1", "dataset", ((3,), dtypes.BFLOAT16, {"dtype": "bfloat16"})),
        ("layers/ünïcode-名前/vars", "group", {"name": "ünïcode-名前"}),
        ("layers/ünïcode-名前/vars/0", "dataset", ((2,), dtypes.FLOAT32, {})),
        ("vars", "group", {"name": "bert_masked_lm"}),
    ],
    "every dtype, scalar and empty": [
        (f"d/{dtype.name}", "dataset", ((5, 2), dtype, {"dtype": "bfloat16"} if dtype is dtypes.BFLOAT16 else {}))
        for dtype in DTYPES
    ] + [("d/scalar", "dataset", ((), dtypes.FLOAT32, {})), ("d/empty", "dataset", ((0, 4), dtypes.FLOAT32, {})),
         ("d/after-empty", "dataset", ((2,), dtypes.INT32, {}))],
    "split list attributes": [
        ("/", "group", {"weight_names0": image.FixedStrings((b"a" * 30, b"b"), 30),
                        "weight_names1": image.FixedStrings((b"c",), 30)}),
    ],
    "300 groups": many_names_spec(300),
    "9 groups": many_names_spec(9),
}


def own_file(path: Path, spec: Spec) -> dict[str, np.ndarray]:
    """Write `spec` with bertconv's layout; the values of each dataset by path."""
    written = {}

    def lay_out(layout: image.Layout) -> list[image.Placed]:
        placed = []
        for n, (where, kind, what) in enumerate(spec):
            if kind == "group":
                group = layout.file if where == "/" else layout.group(where)
                for name, value in what.items():
                    group.attrs[name] = value
            else:
                shape, dtype, attrs = what
                dataset = layout.dataset(where, shape, dtype)
                for name, value in attrs.items():
                    dataset.attrs[name] = value
                written[where] = values(shape, dtype, n)
                placed.append((dataset, where, ArrayTensor(written[where], dtype)))
        return placed

    image.write_file(path, lay_out)
    return written


def h5py_file(path: Path, spec: Spec, written: dict[str, np.ndarray]) -> None:
    """The same objects made by h5py (bfloat16 as h5py stores ml_dtypes' arrays: 2-byte opaque)."""
    with h5py.File(path, "w") as f:
        for where, kind, what in spec:
            if kind == "group":
                obj = f if where == "/" else f.require_group(where)
                attrs = what
            else:
                shape, dtype, attrs = what
                stored = np.dtype("V2") if dtype is dtypes.BFLOAT16 else np.dtype(dtype.storage)
                obj = f.create_dataset(where, shape=shape, dtype=stored)
                if written[where].size:
                    obj[...] = written[where].view(stored) if dtype is dtypes.BFLOAT16 else written[where]
            for name, value in attrs.items():
                obj.attrs[name] = (np.array(value.values, dtype=f"S{value.length}")
                                   if isinstance(value, image.FixedStrings) else value)


def described(path: Path) -> dict:
    """Every object as h5py reads it: attributes with their type (a string's kind, encoding and
    length) and shape, datasets with their type, shape and values' bytes; no offsets."""
    seen = {}
    with h5py.File(path, "r") as f:
        def describe(name: str, obj) -> None:
            attrs = {}
            for key in obj.attrs:
                info = h5py.check_string_dtype(obj.attrs.get_id(key).dtype)
                kind = (info.encoding, info.length) if info else obj.attrs.get_id(key).dtype.str
                value = obj.attrs[key]
                attrs[key] = (kind, obj.attrs.get_id(key).shape, value.tolist() if isinstance(value, np.ndarray) else value)
            if isinstance(obj, h5py.Dataset):
                seen[name] = ("dataset", attrs, obj.shape, obj.dtype.str, obj[()].tobytes() if obj.size else b"")
            else:
                seen[name] = ("group", attrs, sorted(obj.keys()))

        describe("/", f)
        f.visititems(describe)
    return seen


@pytest.mark.parametrize("name", list(SPECS))
def test_h5py_reads_bertconvs_file_as_it_reads_its_own(tmp_path, name):
    written = own_file(tmp_path / "own.h5", SPECS[name])
    h5py_file(tmp_path / "h5py.h5", SPECS[name], written)
    assert described(tmp_path / "own.h5") == described(tmp_path / "h5py.h5")


@pytest.mark.parametrize("name", list(SPECS))
def test_bertconvs_reader_reads_it_as_h5py_does(tmp_path, name):
    own_file(tmp_path / "own.h5", SPECS[name])
    assert own_view(tmp_path / "own.h5") == h5py_view(tmp_path / "own.h5")


@pytest.mark.parametrize("name", ["keras 2", "300 groups"])
def test_hdf5_can_go_on_writing_into_it(tmp_path, name):
    """HDF5 adds groups, datasets and attributes to bertconv's file (splitting its B-tree nodes,
    growing its local heaps) and everything reads back."""
    path = tmp_path / "own.h5"
    written = own_file(path, SPECS[name])
    with h5py.File(path, "a") as f:
        for i in range(40):
            f.create_group(f"added-{i:02d}").attrs["note"] = f"group {i}"
            f[f"added-{i:02d}"].create_dataset("x", data=np.arange(i + 1))
        f.attrs["added"] = "yes"
    with h5py.File(path, "r") as f:
        for where, values_written in written.items():
            assert f[where][()].tobytes() == values_written.tobytes()
        assert all(f[f"added-{i:02d}/x"][()].tolist() == list(range(i + 1)) for i in range(40))
        assert f.attrs["added"] == "yes"


def test_the_same_objects_give_the_same_bytes(tmp_path):
    own_file(tmp_path / "a.h5", SPECS["keras 3"])
    own_file(tmp_path / "b.h5", SPECS["keras 3"])
    assert (tmp_path / "a.h5").read_bytes() == (tmp_path / "b.h5").read_bytes()


def test_what_cannot_be_written_is_refused_before_anything_is(tmp_path):
    layout = image.Layout()
    with pytest.raises(ValueError, match="bool"):
        layout.dataset("x", (2,), dtypes.BOOL)
    layout.dataset("a/b", (2,), dtypes.FLOAT32)
    with pytest.raises(ValueError, match="a/b exists already"):
        layout.dataset("a/b", (2,), dtypes.FLOAT32)
    with pytest.raises(ValueError, match="is a dataset, not a group"):
        layout.group("a/b/c")
    with pytest.raises(TypeError, match="not written"):
        layout.file.attrs["x"] = 3
    with pytest.raises(ValueError, match="exactly one tensor"):
        image.write_file(tmp_path / "x.h5", lambda layout: [] if layout.dataset("x", (1,), dtypes.FLOAT32) else [])
    assert not (tmp_path / "x.h5").exists()


def test_what_hdf5_cannot_hold_is_refused_by_name_before_anything_is_written(tmp_path):
    """An attribute too long for a header message (h5py refuses it too), and more variable-length
    strings than a heap collection numbers: a ValueError saying so, and no file."""
    def long_attribute(layout: image.Layout) -> list:
        layout.file.attrs["names"] = [b"n"] * 5000  # 5000 references of 16 bytes
        return []

    def many_strings(layout: image.Layout) -> list:
        for i in range(70_000):
            layout.group(f"g{i}").attrs["name"] = f"g{i}"
        return []

    with pytest.raises(ValueError, match="header message of 80.* bytes; at most 65535"):
        image.write_file(tmp_path / "long.h5", long_attribute)
    with pytest.raises(ValueError, match="70000 variable-length strings"):
        image.write_file(tmp_path / "many.h5", many_strings)
    assert list(tmp_path.iterdir()) == []
