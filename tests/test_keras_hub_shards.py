"""keras-hub presets whose backbone is saved in shards (model.weights.json and
model_0000N.weights.h5, `save_to_preset(max_shard_size=...)`), and presets in bfloat16, both ways.

fixtures/keras_hub/deberta_v3_sharded is fixtures/keras_hub/deberta_v3's model (the same weights)
saved by keras-hub 0.32 in shards of at most 4 KB; fixtures/keras_hub/bert_bfloat16 a BERT built
with `dtype="bfloat16"`. The tests marked `kerashub` load what bertconv writes with keras-hub 0.32
(.cache/kerashub-venv: tests/kerashub_process.py).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import h5py
import numpy as np
import pytest

from bertconv import formats
from bertconv.checks.audit import audit
from bertconv.conversion import WriteOptions, convert
from bertconv.errors import BadInput
from bertconv.tree import Parameter
from bertconv.containers.hdf5.keras3_shards import plan_shards
from bertconv.containers.hdf5.keras3_write import Keras3Object
from bertconv import dtypes
from bertconv.tensor import ArrayTensor
from conftest import run_in_process
from kerashub_process import kerashub, load
from test_keras_hub import KERAS_HUB, LOGITS_ATOL, PRESET_ATOL, _inputs, bits, masked_logits

SHARDED = KERAS_HUB / "deberta_v3_sharded"
WHOLE = KERAS_HUB / "deberta_v3"
#: Small enough that the fixtures' 6.8 KB backbone takes three shards.
SMALL_SHARDS = 3000
BFLOAT16 = KERAS_HUB / "bert_bfloat16"
#: keras-hub's BERT head (erf GELU, epsilon 1e-5), which transformers' config states otherwise.
HEAD_NUMERICS = ("mlm_hidden_act", "mlm_layer_norm_eps")
#: bertconv computes a bfloat16 model in float32, keras-hub in bfloat16 (8 bits of mantissa, each
#: operation rounding by up to 2^-9 of its value): measured 0.014 on logits of magnitude 2.
BFLOAT16_COMPUTE_ATOL = 0.05


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


def test_a_sharded_presets_tensors_are_named_by_the_shard_that_holds_them():
    """What `inspect` lists for a backbone tensor of a sharded preset names the shard it is read
    from, which holds it there: the preset has no model.weights.h5."""
    tree = formats.read(SHARDED)
    backbone = [p for p in tree if not p.source.startswith("task.weights.h5:")]
    assert {p.file.name for p in backbone} == set(_shards(SHARDED))
    for p in backbone:
        shard, _, inside = p.source.partition(":")
        assert shard == p.file.name
        with h5py.File(SHARDED / shard, "r") as f:
            assert isinstance(f.get(inside), h5py.Dataset), p.source


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
    result = run_in_process("audit", preset)
    assert result.exit_code == 2 and _shards(SHARDED)[-1] in result.stderr and "is missing" in result.stderr


def test_a_shard_outside_the_preset_is_refused(tmp_path):
    preset = _copy(tmp_path)
    _edit_index(preset, lambda weight_map: weight_map.update({"/layers/layer_normalization/vars": "../x.weights.h5"}))
    result = run_in_process("audit", preset)
    assert result.exit_code == 2 and "../x.weights.h5" in result.stderr


def test_a_dataset_in_a_shard_its_group_is_not_listed_in_is_refused(tmp_path):
    """Keras loads a group's variables from the files the index lists for it alone."""
    preset = _copy(tmp_path)
    group = "/layers/reversible_embedding/vars"
    other = next(name for name in _shards(preset) if name != json.loads(
        (preset / "model.weights.json").read_text())["weight_map"][group])
    _edit_index(preset, lambda weight_map: weight_map.update({group: other}))
    result = run_in_process("audit", preset)
    assert result.exit_code == 2 and "layers/reversible_embedding/vars/0" in result.stderr


def test_a_dataset_in_two_shards_is_refused(tmp_path):
    preset = _copy(tmp_path)
    first, second = _shards(preset)[:2]
    with h5py.File(preset / first) as a, h5py.File(preset / second, "a") as b:
        b.create_dataset("layers/reversible_embedding/vars/0", data=a["layers/reversible_embedding/vars/0"][()])
    _edit_index(preset, lambda weight_map: weight_map.update({"/layers/reversible_embedding/vars": [first, second]}))
    result = run_in_process("audit", preset)
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
    result = run_in_process("convert", WHOLE, tmp_path / "sharded", "--to", "keras-hub",
                            "--max-shard-size", str(SMALL_SHARDS))
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
    """Presets bertconv wrote, each with keras-hub's loading of it."""
    root = tmp_path_factory.mktemp("shards")
    convert(formats.read(BFLOAT16), root / "bfloat16-hf", "hf", accept_loss=HEAD_NUMERICS)
    cases = {"sharded-from-whole": (WHOLE, SMALL_SHARDS, None), "sharded-from-sharded": (SHARDED, 2000, None),
             "bfloat16-from-preset": (BFLOAT16, None, None),
             "bfloat16-from-preset-in-float32": (BFLOAT16, None, "float32"),
             "bfloat16-from-hf-in-float32": (root / "bfloat16-hf", None, "float32")}
    out = {}
    for name, (source, max_bytes, dtype) in cases.items():
        tree = formats.read(source)
        convert(tree, root / name, "keras-hub", options=WriteOptions(max_shard_bytes=max_bytes), accept_loss=HEAD_NUMERICS)
        if name == "bfloat16-from-preset":  # keras-hub's loading of its own preset, beside bertconv's
            info, outputs = load(BFLOAT16, BFLOAT16 / "inputs.npz", root / "bfloat16-fixture-out.npz")
            out["bfloat16-fixture"] = {"info": info, "outputs": outputs}
        inputs = dict(np.load(source / "inputs.npz")) if source == BFLOAT16 else _inputs(tree.config.vocab_size)
        np.savez(root / f"{name}-inputs.npz", **inputs)
        info, outputs = load(root / name, root / f"{name}-inputs.npz", root / f"{name}-out.npz", dtype=dtype)
        out[name] = {"source": tree, "written": formats.read(root / name), "inputs": inputs, "directory": root / name,
                     "info": info, "outputs": outputs}
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


# --- bfloat16 ---------------------------------------------------------------------------------------


def _stored(path: Path) -> dict[str, tuple[np.ndarray, str | None]]:
    """Every dataset's raw bytes as unsigned integers and its `dtype` attribute."""
    found = {}
    with h5py.File(path) as f:
        f.visititems(lambda n, o: found.update({n: (o[()].view(f"<u{o.dtype.itemsize}"), o.attrs.get("dtype"))})
                     if isinstance(o, h5py.Dataset) and "optimizer" not in n else None)
    return found


def test_a_bfloat16_preset_reads_bit_for_bit():
    tree = formats.read(BFLOAT16)
    assert {p.tensor.dtype.name for p in tree} == {"bfloat16"}
    stored = _stored(BFLOAT16 / "model.weights.h5")
    assert np.array_equal(tree["embeddings.word"].tensor.read(), stored["layers/reversible_embedding/vars/0"][0])
    assert stored["layers/reversible_embedding/vars/0"][1] == "bfloat16"
    report = audit(tree)
    assert report["ok"], report["problems"]
    inputs = dict(np.load(BFLOAT16 / "inputs.npz"))
    reference = dict(np.load(BFLOAT16 / "logits.npz"))  # keras-hub's, computed in bfloat16
    np.testing.assert_allclose(masked_logits(tree, inputs)["mlm_logits"], reference["mlm_logits"],
                               atol=BFLOAT16_COMPUTE_ATOL)


def test_a_bfloat16_preset_is_written_as_keras_writes_it(tmp_path):
    """Through Hugging Face's safetensors and back: every dataset the same bits, stored as Keras
    stores bfloat16 (2-byte opaque data, `dtype` attribute "bfloat16")."""
    convert(formats.read(BFLOAT16), tmp_path / "hf", "hf", accept_loss=HEAD_NUMERICS)
    convert(formats.read(tmp_path / "hf"), tmp_path / "kh", "keras-hub", accept_loss=HEAD_NUMERICS)
    for file in ("model.weights.h5", "task.weights.h5"):
        source, written = _stored(BFLOAT16 / file), _stored(tmp_path / "kh" / file)
        for name, (values, attribute) in source.items():
            if name in written or attribute == "bfloat16":
                assert np.array_equal(values, written[name][0]) and written[name][1] == attribute, (file, name)
        with h5py.File(BFLOAT16 / file) as a, h5py.File(tmp_path / "kh" / file) as b:
            assert a["layers/reversible_embedding/vars/0" if file.startswith("model") else
                     "layers/masked_lm_head/vars/0"].id.get_type() == b[
                "layers/reversible_embedding/vars/0" if file.startswith("model") else
                "layers/masked_lm_head/vars/0"].id.get_type()
    config = json.loads((tmp_path / "kh" / "config.json").read_text())["config"]
    assert config["dtype"]["config"]["name"] == "bfloat16"


def test_mixed_dtypes_are_refused(tmp_path):
    tree = formats.read(BFLOAT16)
    word = tree["embeddings.word"]
    wide = ArrayTensor(dtypes.as_float32(word.tensor.read(), dtypes.BFLOAT16), dtypes.FLOAT32)
    mixed = replace(tree, params={**tree.params, word.name: Parameter(word.name, wide, word.source, word.file)})
    with pytest.raises(BadInput, match="bfloat16 and float32"):
        formats.TARGETS["keras-hub"].write(mixed, tmp_path / "out", options=WriteOptions())


@kerashub
@pytest.mark.parametrize("name", ["bfloat16-from-preset", "bfloat16-from-preset-in-float32",
                                  "bfloat16-from-hf-in-float32"])
def test_keras_hub_loads_a_bfloat16_preset(loaded, name):
    """Every weight keras-hub loads is the source's bfloat16 value; it computes the logits it
    computes for its own preset (the same weights and inputs), and in float32 bertconv's."""
    case = loaded[name]
    source, written, info, outputs = case["source"], case["written"], case["info"], case["outputs"]
    assert info["class"] == "BertMaskedLM" and info["parameters"] == audit(written)["parameters"]
    embeddings = next(v for k, v in outputs.items() if k.endswith("token_embedding/embeddings"))
    assert np.array_equal(bits(embeddings.astype(np.float32)),
                          bits(dtypes.as_float32(source["embeddings.word"].tensor.read(), dtypes.BFLOAT16)))
    if name == "bfloat16-from-preset":
        np.testing.assert_array_equal(outputs["mlm_logits"], loaded["bfloat16-fixture"]["outputs"]["mlm_logits"])
    else:
        np.testing.assert_allclose(outputs["mlm_logits"], masked_logits(written, case["inputs"])["mlm_logits"],
                                   atol=PRESET_ATOL)
