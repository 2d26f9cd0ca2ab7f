"""bert4keras' models whose positions are computed, against bert4keras' own `predict` (fixtures made by
it: fixtures/make_bert4keras_position_fixtures.py): RoFormer (`model='roformer'`) read, run by both
runtimes, written to hf (transformers 5 computes bert4keras' outputs) and back, an hf RoFormer
written for bert4keras (its `predict` computes transformers 5's), and what bert4keras cannot hold;
NEZHA (`model='nezha'`) likewise, its stored relative sinusoids checked, set aside and computed again.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from bertconv import formats
from bertconv.runtime.numpy_bert import NumpyBert
from conftest import FIXTURES, keras_outputs, needs, run_in_process

ROFORMER = ["roformer/bert4keras/mlm", "roformer/bert4keras/pool-nsp-mlm"]
NEZHA = ["nezha/bert4keras/mlm", "nezha/bert4keras/pool-nsp-mlm"]
#: Probabilities (bert4keras' MLM output is a softmax): both runtimes measured within 3e-7 (RoFormer)
#: and 7e-7 (NEZHA) of bert4keras' predict, whose sinusoids are float32 computations (bertconv's
#: RoFormer angles are float64 ones, rounded, as transformers'; its NEZHA table is transformers 4's).
ATOL = 1e-5


@pytest.fixture(scope="module")
def oracle():
    """The fixture generator's `build` (bert4keras' `build_transformer_model` per fixture)."""
    needs("tensorflow")
    needs("bert4keras")
    path = FIXTURES / "make_bert4keras_position_fixtures.py"
    spec = importlib.util.spec_from_file_location("make_bert4keras_position_fixtures", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _manifest(name: str) -> dict:
    return json.loads((FIXTURES / name / "fixture.json").read_text())


def _inputs(vocab_size: int, type_vocab_size: int = 2) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    # No id 0: bert4keras masks it (mask_zero), as padding.
    return [rng.integers(1, vocab_size, size=(2, 11)), rng.integers(0, type_vocab_size, size=(2, 11))]


@pytest.fixture(scope="module")
def source_model(oracle):
    """bert4keras' model of a fixture (by name) built and loaded once for the module: several tests
    check against the same source model."""
    built = {}

    def model(name: str):
        if name not in built:
            built[name] = _loaded(oracle, FIXTURES / name / "bert_config.json", _manifest(name),
                                  FIXTURES / name / "bert4keras_model.h5")
        return built[name]
    return model


def _loaded(oracle, config: Path, manifest: dict, weights: Path):
    """bert4keras' model `manifest` says, built from `config`, with `weights` loaded."""
    model = oracle.build(config, manifest["model"], manifest)
    model.load_weights(str(weights))
    return model


def _predict(model, manifest: dict, inputs) -> dict[str, np.ndarray]:
    """bert4keras' own predict (`keras_outputs`) of the model `manifest` says, its outputs named."""
    outputs = keras_outputs(model, inputs)
    names = [key for key, present in (("nsp" if manifest["with_nsp"] else "pooled", manifest["with_pool"]),
                                      ("mlm", manifest["with_mlm"])) if present]
    return dict(zip(names, outputs, strict=True))


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("name", ROFORMER + NEZHA)
def test_both_runtimes_compute_bert4keras_predict(name, source_model):
    tree = formats.read(FIXTURES / name)
    inputs = _inputs(tree.config.vocab_size)
    expected = _predict(source_model(name), _manifest(name), inputs)
    from bertconv.runtime.torch_bert import TorchBert
    for model in (NumpyBert(tree), TorchBert(tree)):
        out = model(*inputs)
        mlm = out.mlm_logits if isinstance(out.mlm_logits, np.ndarray) else out.mlm_logits.numpy()
        assert np.abs(_softmax(mlm.astype(np.float64)) - expected["mlm"]).max() <= ATOL
        if "nsp" in expected:
            nsp = out.nsp_logits if isinstance(out.nsp_logits, np.ndarray) else out.nsp_logits.numpy()
            assert np.abs(_softmax(nsp.astype(np.float64)) - expected["nsp"]).max() <= ATOL


def test_bert4keras_to_hf_gives_bert4keras_predictions(source_model, tmp_path):
    torch = needs("torch")
    transformers = needs("transformers")
    name = "roformer/bert4keras/mlm"
    directory = FIXTURES / name
    out = tmp_path / "hf"
    assert run_in_process("convert", directory, out, "--to", "hf").exit_code == 0
    inputs = _inputs(40)
    expected = _predict(source_model(name), _manifest(name), inputs)
    model = transformers.AutoModelForMaskedLM.from_pretrained(out).eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(inputs[0]), token_type_ids=torch.tensor(inputs[1])).logits
    assert np.abs(logits.softmax(-1).numpy() - expected["mlm"]).max() <= ATOL
    back = tmp_path / "b4k"
    assert run_in_process("convert", out, back, "--to", "bert4keras").exit_code == 0
    assert run_in_process("diff", directory, back).exit_code == 0


def test_hf_to_bert4keras_gives_transformers_predictions(oracle, tmp_path):
    torch = needs("torch")
    transformers = needs("transformers")
    source = FIXTURES / "roformer" / "hf" / "masked_lm"
    out = tmp_path / "b4k"
    result = run_in_process("convert", source, out, "--to", "bert4keras")
    assert result.exit_code == 0, result.stderr
    assert json.loads((out / "bert_config.json").read_text())["model_type"] == "roformer"
    inputs = _inputs(36)
    manifest = {"model": "roformer", "with_pool": False, "with_nsp": False, "with_mlm": True}
    got = _predict(_loaded(oracle, out / "bert_config.json", manifest, out / "bert4keras_model.h5"), manifest, inputs)
    model = transformers.AutoModelForMaskedLM.from_pretrained(source).eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(inputs[0]), token_type_ids=torch.tensor(inputs[1])).logits
    assert np.abs(got["mlm"] - logits.softmax(-1).numpy()).max() <= ATOL


def test_written_file_loads_with_the_source_heads(oracle, source_model, tmp_path):
    name = "roformer/bert4keras/pool-nsp-mlm"
    out = tmp_path / "b4k"
    assert run_in_process("convert", FIXTURES / name, out, "--to", "bert4keras").exit_code == 0
    manifest = _manifest(name)
    written = _loaded(oracle, out / "bert_config.json", manifest, out / "bert4keras_model.h5")
    source = source_model(name)
    assert [layer.name for layer in written.layers] == [layer.name for layer in source.layers]
    for got, expected in zip(written.weights, source.weights, strict=True):
        assert np.array_equal(got.numpy(), expected.numpy()), expected.name


def test_what_bert4keras_and_transformers_cannot_hold_is_refused(tmp_path):
    rotary_value = run_in_process("convert", FIXTURES / "roformer" / "hf" / "rotary_value", tmp_path / "a",
                                  "--to", "bert4keras")
    assert rotary_value.exit_code == 2 and "rotary_value" in rotary_value.stderr
    pooler = run_in_process("convert", FIXTURES / "roformer/bert4keras/pool-nsp-mlm", tmp_path / "b", "--to", "hf")
    assert pooler.exit_code == 2 and "Pooler-Dense" in pooler.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_nezha_round_trips_through_hf_and_its_sinusoids_are_bert4keras(oracle, source_model, tmp_path):
    name = "nezha/bert4keras/pool-nsp-mlm"
    hf, back = tmp_path / "hf", tmp_path / "b4k"
    assert run_in_process("convert", FIXTURES / name, hf, "--to", "hf").exit_code == 0
    assert json.loads((hf / "config.json").read_text())["max_relative_position"] == 64
    assert run_in_process("convert", hf, back, "--to", "bert4keras").exit_code == 0
    assert run_in_process("diff", FIXTURES / name, back).exit_code == 0
    written = _loaded(oracle, back / "bert_config.json", _manifest(name), back / "bert4keras_model.h5")
    source = source_model(name)
    assert [layer.name for layer in written.layers] == [layer.name for layer in source.layers]
    for got, expected in zip(written.weights, source.weights, strict=True):
        # bert4keras' own sinusoids from TensorFlow's float32 power and sines; bertconv's from NumPy's.
        assert np.abs(got.numpy() - expected.numpy()).max() <= (1e-6 if "Relative" in expected.name else 0)


def test_hf_nezha_to_bert4keras_gives_bertconvs_logits_in_bert4keras(oracle, tmp_path):
    """An hf NEZHA (transformers 4.57's, its distances clipped at bert4keras' 64) computes in bert4keras' predict
    what the runtimes compute from the hf files (within 2e-6 of transformers 4.57: tests/test_nezha.py)."""
    import shutil
    source = tmp_path / "hf"
    shutil.copytree(FIXTURES / "nezha" / "hf" / "masked_lm", source)
    config = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps({**config, "max_relative_position": 64}))
    out = tmp_path / "b4k"
    result = run_in_process("convert", source, out, "--to", "bert4keras")
    assert result.exit_code == 0, result.stderr
    inputs = _inputs(52)
    manifest = {"model": "nezha", "with_pool": False, "with_nsp": False, "with_mlm": True}
    got = _predict(_loaded(oracle, out / "bert_config.json", manifest, out / "bert4keras_model.h5"), manifest, inputs)
    expected = _softmax(NumpyBert(formats.read(source))(*inputs).mlm_logits.astype(np.float64))
    assert np.abs(got["mlm"] - expected).max() <= ATOL


def test_nezha_clipping_elsewhere_than_64_is_refused_by_bert4keras(tmp_path):
    result = run_in_process("convert", FIXTURES / "nezha" / "hf" / "masked_lm", tmp_path / "out", "--to", "bert4keras")
    assert result.exit_code == 2 and "max_relative_position 6" in result.stderr
    assert not (tmp_path / "out").exists()

