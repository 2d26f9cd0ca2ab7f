"""Fuzzing bert4keras HDF5 weights files (Keras 2 layout) through the whole reader.

Two kinds of mutants of the fixtures in fixtures/bert4keras/:

- bytes: truncation at the superblock and at every dataset's start and end, bit flips,
  overwrites with extreme values and spliced ranges (`fuzzing.mutations`);
- structure: the file rewritten with h5py so that what Keras' attributes and datasets say is
  wrong while the HDF5 itself is sound: `layer_names` / `weight_names` deleted, of the wrong
  type or shape, with dangling, duplicate, reordered, absolute, `..` or non-UTF-8 names, split
  wrongly over `layer_names0, 1, ...`; weights of the wrong dtype or shape, huge unallocated or
  chunked shapes, compressed, replaced by groups, soft links.

Each case runs through `check_case` (read as `bertconv` reads it, then every tensor read, under
tracemalloc and a deadline): success or `BertconvError`, nothing else. HDF5 is C code that can
crash on a bad file, so the cases run in a forked child (`fuzzing.in_child`), and a crash fails
the test naming the case instead of ending the session.
"""

from __future__ import annotations

import math
import random
import shutil
from collections import Counter
from pathlib import Path

import h5py
import numpy as np
import pytest

from bertconv import formats
from conftest import FIXTURES
from fuzzing import (BYTE_SCHEDULE, Mutant, check_case, dataset_boundaries, fuzz_bytes_in_child, in_child, run_mutants,
                     share_of_cases)

B4K = FIXTURES / "bert4keras"
FILE = "bert4keras_model.h5"
#: Cases per fixture as shares of CASES (100 by default, `make fuzz`: 20000); a case costs
#: 100-150 ms (every HDF5 format's sniffer opens the file, the reader walks it twice, tracemalloc
#: on). The byte runs take at least two rounds of the byte kinds. The structure runs start their
#: rounds of STRUCTURE_KINDS at staggered kinds and together take every kind at least once (a run
#: takes at least its quarter of them: `structure_plan`), which is all `make test` runs of them.
BYTE_SHARES = {"v50-pool-nsp-mlm": 0.5, "v99-cond-mlm": 0.25}
#: (run number, fixture, with its bert_config.json or sizes read off the shapes, share of CASES)
STRUCTURE_CASES = [pytest.param(run, name, with_config, share, id=f"{name}-{'config' if with_config else 'shapes'}")
                   for run, (name, with_config, share) in enumerate((
                       ("v50-pool-nsp-mlm", True, 0.3), ("v50-pool-nsp-mlm", False, 0.1),
                       ("v99-cond-mlm", True, 0.1), ("v99-cond-mlm", False, 0.1)))]

pytestmark = [
    pytest.mark.fuzz,
    pytest.mark.skipif(not any("bert4keras" in f.target for f in formats.FORMATS) or not B4K.is_dir(),
                       reason="the bert4keras format or its fixtures are not there yet"),
]


@pytest.mark.parametrize("name", BYTE_SHARES)
def test_bytes(tmp_path, name):
    source = B4K / name / FILE
    original = source.read_bytes()
    target = tmp_path / FILE
    cases = share_of_cases(BYTE_SHARES[name], at_least=2 * len(BYTE_SCHEDULE), short=0)
    outcomes = fuzz_bytes_in_child(original, target, seed=21, count=cases, what=name,
                                   boundaries=dataset_boundaries(source))
    print(f"{name}: {cases} cases: {dict(outcomes)}")
    assert sum(outcomes.values()) == cases and outcomes["refused"] > 0


# --- structure-aware mutations ----------------------------------------------------------------


def _names(attrs, key: str) -> list[str]:
    return [n.decode() if isinstance(n, bytes) else str(n) for n in np.atleast_1d(attrs[key])]


def _set_names(attrs, key: str, names: list) -> None:
    attrs[key] = [n.encode() if isinstance(n, str) else n for n in names]


def _weighted_layers(f: h5py.File) -> list[str]:
    return [n for n in _names(f.attrs, "layer_names") if len(np.atleast_1d(f[n].attrs["weight_names"]))]


LAYER_NAMES_HOWS = ("delete", "int", "float", "empty", "2d", "duplicate", "dangling", "slash", "dotdot",
                    "not utf-8", "many dangling", "vlen str", "split", "split gap", "split and whole",
                    "drop one", "reverse", "huge name")


def _layer_names_op(f: h5py.File, rng: random.Random, how: str) -> str:
    names = _names(f.attrs, "layer_names")
    attrs = f.attrs
    if how == "delete":
        del attrs["layer_names"]
    elif how == "int":
        attrs["layer_names"] = np.arange(len(names))
    elif how == "float":
        attrs["layer_names"] = 3.5
    elif how == "empty":
        attrs["layer_names"] = np.array([], dtype="S1")
    elif how == "2d":
        attrs["layer_names"] = np.array([n.encode() for n in names[:2]] * 2).reshape(2, 2)
    elif how == "duplicate":
        _set_names(attrs, "layer_names", names + [rng.choice(names)])
    elif how == "dangling":
        _set_names(attrs, "layer_names", names + ["Transformer-9-FeedForward"])
    elif how == "slash":
        _set_names(attrs, "layer_names", names + ["MLM-Dense/MLM-Dense"])
    elif how == "dotdot":
        _set_names(attrs, "layer_names", names[:1] + [".."] + names[1:])
    elif how == "not utf-8":
        _set_names(attrs, "layer_names", names + [b"\xff\xfeEmbedding"])
    elif how == "many dangling":
        _set_names(attrs, "layer_names", names + [f"layer_{i}" for i in range(3000)])
    elif how == "vlen str":
        attrs.create("layer_names", names, dtype=h5py.string_dtype())
    elif how in ("split", "split gap", "split and whole"):
        half = len(names) // 2
        if how != "split and whole":
            del attrs["layer_names"]
        _set_names(attrs, "layer_names0", names[:half])
        _set_names(attrs, "layer_names2" if how == "split gap" else "layer_names1", names[half:])
    elif how == "drop one":
        _set_names(attrs, "layer_names", [n for n in names if n != rng.choice(names)])
    elif how == "reverse":
        _set_names(attrs, "layer_names", names[::-1])
    else:
        _set_names(attrs, "layer_names", names + ["E" * 60000])
    return f"layer_names {how}"


WEIGHT_NAMES_HOWS = ("delete", "int", "dangling", "group", "absolute", "dotdot", "swap", "duplicate", "drop",
                     "other layer", "not utf-8", "empty string", "reverse", "none")


def _weight_names_op(f: h5py.File, rng: random.Random, how: str) -> str:
    layer = rng.choice(_weighted_layers(f))
    attrs = f[layer].attrs
    names = _names(attrs, "weight_names")
    if how == "delete":
        del attrs["weight_names"]
    elif how == "int":
        attrs["weight_names"] = np.arange(len(names))
    elif how == "dangling":
        _set_names(attrs, "weight_names", names + [f"{layer}/ghost:0"])
    elif how == "group":
        _set_names(attrs, "weight_names", names[:-1] + [names[-1].rsplit("/", 1)[0]])
    elif how == "absolute":
        _set_names(attrs, "weight_names", ["/" + layer + "/" + names[0]] + names[1:])
    elif how == "dotdot":
        _set_names(attrs, "weight_names", [f"../{rng.choice(_weighted_layers(f))}/x:0"] + names[1:])
    elif how == "swap":  # a layer with one weight keeps it: the case is then unmutated
        if len(names) > 1:
            i, j = rng.sample(range(len(names)), 2)
            names[i], names[j] = names[j], names[i]
        _set_names(attrs, "weight_names", names)
    elif how == "duplicate":
        _set_names(attrs, "weight_names", names + [rng.choice(names)])
    elif how == "drop":
        _set_names(attrs, "weight_names", names[1:])
    elif how == "other layer":
        other = rng.choice(_weighted_layers(f))
        _set_names(attrs, "weight_names", names + _names(f[other].attrs, "weight_names")[:1])
    elif how == "not utf-8":
        _set_names(attrs, "weight_names", [b"\xc3\x28" + names[0].encode()] + names[1:])
    elif how == "empty string":
        _set_names(attrs, "weight_names", names + [""])
    elif how == "reverse":
        _set_names(attrs, "weight_names", names[::-1])
    else:
        attrs["weight_names"] = np.array([], dtype="S1")
    return f"weight_names of {layer} {how}"


DATASET_HOWS = ("int32", "float64", "float16", "bool", "complex", "bytes", "vlen str", "compound",
                "transposed", "extra dim", "scalar", "empty", "huge chunked", "huge contiguous",
                "huge compact", "gzip", "chunked", "group", "soft link", "big-endian", "fill only")


def _dataset_op(f: h5py.File, rng: random.Random, how: str) -> str:
    layer = rng.choice(_weighted_layers(f))
    group = f[layer]
    name = rng.choice(_names(group.attrs, "weight_names"))
    old = group[name]
    data, shape = old[()], old.shape
    del group[name]
    if how in ("int32", "float64", "float16", "bool", "complex"):
        group[name] = data.astype({"complex": np.complex64}.get(how, how))
    elif how == "bytes":
        group[name] = np.array([b"x" * 4] * max(1, data.size)).reshape(shape or (1,))
    elif how == "vlen str":
        group.create_dataset(name, data=["a"] * max(1, data.size), dtype=h5py.string_dtype())
    elif how == "compound":
        group[name] = np.zeros(shape, dtype=[("a", "f4"), ("b", "i4")])
    elif how == "transposed":
        group[name] = data.T.copy() if data.ndim == 2 else data[::-1].copy()
    elif how == "extra dim":
        group[name] = data[None]
    elif how == "scalar":
        group[name] = np.float32(1.0)
    elif how == "empty":
        group[name] = np.zeros((0,) + shape[1:], np.float32)
    elif how == "huge chunked":
        group.create_dataset(name, shape=(2**31, 2**20), dtype="f4", chunks=(1, 1024))
    elif how == "huge contiguous":
        group.create_dataset(name, shape=(2**25, 2**20), dtype="f4")
    elif how == "huge compact":
        group.create_dataset(name, shape=(2**20, 2**20), dtype="f4", chunks=(1, 64), fillvalue=1.0)
    elif how == "gzip":
        group.create_dataset(name, data=data, compression="gzip")
    elif how == "chunked":
        group.create_dataset(name, data=data, chunks=True)
    elif how == "group":
        group.create_group(name)
    elif how == "soft link":
        other = rng.choice(_weighted_layers(f))
        target = f"/{other}/{_names(f[other].attrs, 'weight_names')[0]}"
        group[name] = h5py.SoftLink(target)
    elif how == "big-endian":
        group[name] = data.astype(data.dtype.newbyteorder(">"))
    else:
        group.create_dataset(name, shape=shape, dtype=data.dtype, fillvalue=0.5)
    return f"{layer}/{name} {how}"


FILE_HOWS = ("delete layer", "layer is dataset", "backend int", "nested model", "top level weights")


def _file_op(f: h5py.File, rng: random.Random, how: str) -> str:
    names = _weighted_layers(f)
    if how == "delete layer":
        del f[rng.choice(names)]
    elif how == "layer is dataset":
        layer = rng.choice(names)
        del f[layer]
        f[layer] = np.zeros(3, np.float32)
    elif how == "backend int":
        f.attrs["backend"] = 7
        f.attrs["keras_version"] = np.arange(3)
    elif how == "nested model":  # a layer whose weights name another layer first: a nested model
        layer = rng.choice(names)
        _set_names(f[layer].attrs, "weight_names", [f"{rng.choice(names)}/x:0"])
    else:
        group = f.require_group("top_level_model_weights")
        _set_names(group.attrs, "weight_names", ["ghost:0"])
    return how


#: Every structure mutation as (operation, how), taken in turn: one round exercises each.
STRUCTURE_KINDS = tuple((op, how) for op, hows in ((_layer_names_op, LAYER_NAMES_HOWS),
                                                   (_weight_names_op, WEIGHT_NAMES_HOWS),
                                                   (_dataset_op, DATASET_HOWS), (_file_op, FILE_HOWS))
                        for how in hows)


def _kind(op, how: str) -> str:
    return f"{op.__name__.strip('_').removesuffix('_op')} {how}"


def structure_mutations(original: bytes, target: Path, seed: str, count: int, first: int = 0):
    """`count` structure mutants, each written to `target` (`Mutant.data` is None: the mutant is
    the file), their kinds taken in turn from STRUCTURE_KINDS, starting at kind number `first`."""
    rng = random.Random(seed)
    for number in range(count):
        op, how = STRUCTURE_KINDS[(first + number) % len(STRUCTURE_KINDS)]
        target.write_bytes(original)
        with h5py.File(target, "r+") as f:
            label = f"#{number} " + op(f, rng, how)
        yield Mutant(_kind(op, how), label, None)


def structure_plan(run: int, share: float) -> tuple[int, int, list[str]]:
    """The structure run number `run` of STRUCTURE_CASES: its case count (its share of CASES, at
    least its part of one round), the kind it starts at, and the kinds it must take."""
    part = math.ceil(len(STRUCTURE_KINDS) / len(STRUCTURE_CASES))
    cases, first = share_of_cases(share, at_least=part, short=0), run * part
    kinds = [_kind(*STRUCTURE_KINDS[(first + n) % len(STRUCTURE_KINDS)]) for n in range(min(cases, len(STRUCTURE_KINDS)))]
    return cases, first, kinds


def test_the_structure_runs_together_take_every_kind():
    taken = {kind for case in STRUCTURE_CASES for kind in structure_plan(case.values[0], case.values[3])[2]}
    assert taken == {_kind(op, how) for op, how in STRUCTURE_KINDS}


@pytest.mark.parametrize("run,name,with_config,share", STRUCTURE_CASES)
def test_structure(tmp_path, run, name, with_config, share):
    source = B4K / name / FILE
    original = source.read_bytes()
    if with_config:
        shutil.copy(B4K / name / "bert_config.json", tmp_path / "bert_config.json")
    target = tmp_path / FILE
    cases, first, kinds = structure_plan(run, share)

    def run(note) -> Counter:
        def case(mutant) -> str:
            note(mutant.label)
            return check_case(target, f"{name} {mutant.label}")

        mutants = structure_mutations(original, target, f"h5-structure-{name}-{with_config}", cases, first)
        return run_mutants(mutants, kinds, case)

    outcomes = in_child(run, f"{name} structure mutations")
    print(f"{name}: {cases} cases: {dict(outcomes)}")
    assert sum(outcomes.values()) == cases and outcomes["refused"] > cases // 3 and outcomes["ok"] > 0
