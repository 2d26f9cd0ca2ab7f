"""keras-hub presets whose backbone is saved in shards (model.weights.json and
model_0000N.weights.h5, `save_to_preset(max_shard_size=...)`), both ways.

fixtures/keras_hub/deberta_v3_sharded is fixtures/keras_hub/deberta_v3's model (the same weights)
saved by keras-hub 0.32 in shards of at most 4 KB. The tests marked `kerashub` load what bertconv
writes with keras-hub 0.32 (.cache/kerashub-venv), all in one subprocess for the module.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest

from bertconv import formats
from bertconv.checks.audit import audit
from bertconv.conversion import WriteOptions, convert
from bertconv.containers.hdf5.keras3_shards import plan_shards
from bertconv.containers.hdf5.keras3_write import Keras3Object
from bertconv.tensor import ArrayTensor
from bertconv import dtypes
from conftest import run_cli
from test_keras_hub import KERAS_HUB, KERASHUB_PYTHON, LOGITS_ATOL, ORACLE_SCRIPT, PRESET_ATOL, _inputs, bits, \
    kerashub, masked_logits

SHARDED = KERAS_HUB / "deberta_v3_sharded"
WHOLE = KERAS_HUB / "deberta_v3"
#: Small enough that the fixtures' 6.8 KB backbone takes three shards.
SMALL_SHARDS = 3000


def _shards(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob("model_*.weights.h5"))


def _same_values(a, b) -> None:
    assert set(a.params) == set(b.params)
    for param in a:
        assert np.array_equal(bits(param.tensor.read()), bits(b[param.name].tensor.read())), param.name


# --- reading what keras-hub saved -----------------------------------------------------------------


def test_a_sharded_preset_reads_as_the_same_model_whole():
    tree = formats.read(SHARDED)
    assert len(_shards(SHARDED)) >= 2 and tree.path.name == "model.weights.json"
    assert {p.name for p in tree.files} >= {"model.weights.json", *_shards(SHARDED), "task.weights.h5"}
    whole = formats.read(WHOLE)
    _same_values(tree, whole)
    assert tree.config == whole.config
    report = audit(tree)
    assert report["ok"], report["problems"]
    inputs = dict(np.load(SHARDED / "inputs.npz"))
    reference = dict(np.load(SHARDED / "logits.npz"))
    np.testing.assert_allclose(masked_logits(tree, inputs)["mlm_logits"], reference["mlm_logits"], atol=LOGITS_ATOL)


def test_a_shard_path_reads_the_whole_preset():
    assert formats.read(SHARDED / _shards(SHARDED)[-1]).path.name == "model.weights.json"


def _copy(tmp_path: Path) -> Path:
    return Path(shutil.copytree(SHARDED, tmp_path / "preset"))


def _edit_index(preset: Path, edit) -> None:
    index = json.loads((preset / "model.weights.json").read_text())
    edit(index["weight_map"])
    (preset / "model.weights.json").write_text(json.dumps(index))


def test_a_missing_shard_is_refused_naming_it(tmp_path):
    preset = _copy(tmp_path)
    (preset / _shards(preset)[-1]).unlink()
    result = run_cli("audit", preset)
    assert result.exit_code == 2 and _shards(SHARDED)[-1] in result.stderr and "is missing" in result.stderr


def test_a_shard_outside_the_preset_is_refused(tmp_path):
    preset = _copy(tmp_path)
    _edit_index(preset, lambda weight_map: weight_map.update({"/layers/layer_normalization/vars": "../x.weights.h5"}))
    result = run_cli("audit", preset)
    assert result.exit_code == 2 and "../x.weights.h5" in result.stderr


def test_a_dataset_in_a_shard_its_group_is_not_listed_in_is_refused(tmp_path):
    """Keras loads a group's variables from the files the index lists for it alone."""
    preset = _copy(tmp_path)
    group = "/layers/reversible_embedding/vars"
    other = next(name for name in _shards(preset) if name != json.loads(
        (preset / "model.weights.json").read_text())["weight_map"][group])
    _edit_index(preset, lambda weight_map: weight_map.update({group: other}))
    result = run_cli("audit", preset)
    assert result.exit_code == 2 and "layers/reversible_embedding/vars/0" in result.stderr


def test_a_dataset_in_two_shards_is_refused(tmp_path):
    preset = _copy(tmp_path)
    first, second = _shards(preset)[:2]
    with h5py.File(preset / first) as a, h5py.File(preset / second, "a") as b:
        b.create_dataset("layers/reversible_embedding/vars/0", data=a["layers/reversible_embedding/vars/0"][()])
    _edit_index(preset, lambda weight_map: weight_map.update({"/layers/reversible_embedding/vars": [first, second]}))
    result = run_cli("audit", preset)
    assert result.exit_code == 2 and "holds too" in result.stderr


# --- writing ----------------------------------------------------------------------------------------


def test_shards_take_whole_objects_up_to_the_limit():
    def obj(name: str, floats: int) -> Keras3Object:
        return Keras3Object(name, name, (ArrayTensor(np.zeros(floats, np.float32), dtypes.FLOAT32),))
    objects = [obj("a", 10), obj("b", 10), obj("c", 30), obj("d", 1)]
    assert [[o.path for o in shard] for shard in plan_shards(objects, 80)] == [["a", "b"], ["c"], ["d"]]
    assert [[o.path for o in shard] for shard in plan_shards(objects, 1000)] == [["a", "b", "c", "d"]]


def test_written_in_shards_past_the_limit_and_whole_below_it(tmp_path):
    tree = formats.read(WHOLE)
    result = run_cli("convert", WHOLE, tmp_path / "sharded", "--to", "keras-hub", "--max-shard-size", str(SMALL_SHARDS))
    assert result.exit_code == 0, result.stderr
    assert len(_shards(tmp_path / "sharded")) == 3 and not (tmp_path / "sharded" / "model.weights.h5").exists()
    for name in _shards(tmp_path / "sharded"):
        with h5py.File(tmp_path / "sharded" / name) as f:
            stored = []
            f.visititems(lambda n, o: stored.append(o.nbytes) if isinstance(o, h5py.Dataset) else None)
        assert sum(stored) <= SMALL_SHARDS
    _same_values(formats.read(tmp_path / "sharded"), tree)
    convert(formats.read(SHARDED), tmp_path / "whole", "keras-hub", options=WriteOptions(max_shard_bytes=10**6))
    assert (tmp_path / "whole" / "model.weights.h5").is_file() and not _shards(tmp_path / "whole")
    _same_values(formats.read(tmp_path / "whole"), tree)


# --- keras-hub loads what bertconv writes ----------------------------------------------------------


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """Presets bertconv wrote, each with keras-hub's loading of it (one process)."""
    if not KERASHUB_PYTHON.exists():
        pytest.skip(f"needs keras-hub 0.32 in {KERASHUB_PYTHON.parent.parent} (make kerashub)")
    root = tmp_path_factory.mktemp("shards")
    cases = {"sharded-from-whole": (WHOLE, SMALL_SHARDS), "sharded-from-sharded": (SHARDED, 2000)}
    jobs, out = [], {}
    for name, (source, max_bytes) in cases.items():
        tree = formats.read(source)
        convert(tree, root / name, "keras-hub", options=WriteOptions(max_shard_bytes=max_bytes))
        inputs = _inputs(tree.config.vocab_size)
        np.savez(root / f"{name}-inputs.npz", **inputs)
        jobs += [root / name, root / f"{name}-inputs.npz", root / f"{name}-out.npz"]
        out[name] = {"source": tree, "written": formats.read(root / name), "inputs": inputs, "directory": root / name}
    env = {k: v for k, v in os.environ.items() if k not in ("TF_USE_LEGACY_KERAS", "TF_KERAS")}
    proc = subprocess.run([str(KERASHUB_PYTHON), str(ORACLE_SCRIPT), *map(str, jobs)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name, line in zip(cases, proc.stdout.strip().splitlines()[-len(cases):]):
        out[name].update(info=json.loads(line), outputs=dict(np.load(root / f"{name}-out.npz")))
    return out


@kerashub
@pytest.mark.parametrize("name", ["sharded-from-whole", "sharded-from-sharded"])
def test_keras_hub_loads_the_sharded_preset(loaded, name):
    """Every variable keras-hub loads is the source's, bit for bit, and its logits are bertconv's
    (measured 1.4e-6)."""
    case = loaded[name]
    source, written, info, outputs = case["source"], case["written"], case["info"], case["outputs"]
    assert len(_shards(case["directory"])) >= 3
    assert info["class"] == "DebertaV3MaskedLM" and info["parameters"] == audit(written)["parameters"]
    stored = {}
    for file in ("model.weights.h5", "task.weights.h5"):
        with h5py.File(WHOLE / file) as f:
            f.visititems(lambda n, o: stored.update({f"{file}:{n}": o[()]})
                         if isinstance(o, h5py.Dataset) and "optimizer" not in n else None)
    keras_values = [v for k, v in outputs.items() if k.startswith("param:")]
    assert len(keras_values) == len(stored)
    assert sorted(bits(v).tobytes() for v in keras_values) == sorted(bits(v).tobytes() for v in stored.values())
    np.testing.assert_allclose(outputs["mlm_logits"], masked_logits(written, case["inputs"])["mlm_logits"],
                               atol=PRESET_ATOL)
    np.testing.assert_allclose(outputs["mlm_logits"], masked_logits(source, case["inputs"])["mlm_logits"],
                               atol=PRESET_ATOL)
