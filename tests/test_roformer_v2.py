"""RoFormer-v2 (bert4keras `model='roformer_v2'`) against bert4keras' own `predict`, on a fixture
bert4keras made (fixtures/make_roformer_v2_fixtures.py): read, run by both runtimes (padded too),
written back for bert4keras (the same layers and weights, bit for bit), and refused by every target
that has no RoFormer-v2, naming why.
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from bertconv import formats
from bertconv.config import expected_parameters
from bertconv.runtime.numpy_bert import NumpyBert
from conftest import FIXTURES, needs, run_in_process

NAME = "roformer_v2/bert4keras/mlm"
SOURCE = FIXTURES / NAME
#: Probabilities (bert4keras' MLM output is a softmax): both runtimes measured within 8e-8 of its
#: predict (float32 sinusoids, RMS norms and products in another order); the issue's bound is 1e-4.
ATOL = 1e-6


@pytest.fixture(scope="module")
def oracle():
    """The fixture generator's `build` (bert4keras' `build_transformer_model`)."""
    needs("tensorflow")
    needs("bert4keras")
    path = FIXTURES / "make_roformer_v2_fixtures.py"
    spec = importlib.util.spec_from_file_location("make_roformer_v2_fixtures", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _inputs(padded: bool) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    ids, types = rng.integers(1, 40, size=(2, 11)), rng.integers(0, 2, size=(2, 11))
    if padded:
        ids[1, 7:] = 0  # bert4keras masks id 0 (mask_zero): padding
    return [ids, types]


def _predict(oracle, directory, inputs, with_mlm: bool = True) -> np.ndarray:
    model = oracle.build(directory / "bert_config.json", "roformer_v2", {"with_mlm": with_mlm})
    model.load_weights(str(directory / "bert4keras_model.h5"))
    return model.predict(inputs, verbose=0)


def _softmax(logits) -> np.ndarray:
    logits = np.asarray(logits, dtype=np.float64)
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def test_it_is_read_as_roformer_v2_with_its_closed_form():
    tree = formats.read(SOURCE)
    config = tree.config
    assert (config.model_type, config.rms_norm, config.norm_scale, config.mlm_transform) == ("roformer_v2", True,
                                                                                              False, False)
    assert config.layer_norm_eps == 1e-7 and config.hidden_act == "relu"
    assert tree.heads.mlm and not tree.heads.pooler
    assert not any(name.endswith((".bias", ".gamma", ".beta")) for name in tree.params)
    manifest = json.loads((SOURCE / "fixture.json").read_text())
    assert expected_parameters(config, tree.heads) == manifest["count_params"]  # Keras' own count
    assert run_in_process("audit", SOURCE).exit_code == 0


@pytest.mark.parametrize("padded", [False, True], ids=["full", "padded"])
def test_both_runtimes_compute_bert4keras_predict(oracle, padded):
    from bertconv.runtime.torch_bert import TorchBert

    needs("torch")
    inputs = _inputs(padded)
    expected = _predict(oracle, SOURCE, inputs)
    mask = (inputs[0] != 0).astype(np.int64)
    tree = formats.read(SOURCE)
    for model in (NumpyBert(tree), TorchBert(tree)):
        got = _softmax(np.asarray(model(inputs[0], inputs[1], mask).mlm_logits))
        real = mask.astype(bool)  # bert4keras' outputs at padding are its own business
        assert np.abs(got - expected)[real].max() <= ATOL, type(model).__name__


def test_written_for_bert4keras_it_loads_bit_for_bit(oracle, tmp_path):
    out = tmp_path / "b4k"
    result = run_in_process("convert", SOURCE, out, "--to", "bert4keras")
    assert result.exit_code == 0, result.stderr
    assert run_in_process("diff", SOURCE, out).exit_code == 0
    for with_mlm in (True, False):  # its head has no weights: the encoder alone loads the same file
        written = oracle.build(out / "bert_config.json", "roformer_v2", {"with_mlm": with_mlm})
        written.load_weights(str(out / "bert4keras_model.h5"))
        source = oracle.build(SOURCE / "bert_config.json", "roformer_v2", {"with_mlm": with_mlm})
        source.load_weights(str(SOURCE / "bert4keras_model.h5"))
        assert [layer.name for layer in written.layers] == [layer.name for layer in source.layers]
        for got, expected in zip(written.weights, source.weights, strict=True):
            assert np.array_equal(got.numpy(), expected.numpy()), expected.name
    inputs = _inputs(False)
    np.testing.assert_array_equal(_predict(oracle, out, inputs), _predict(oracle, SOURCE, inputs))


def test_verify_finds_its_head_present_and_tied():
    report = json.loads(run_in_process("verify", SOURCE, "--json").stdout)
    assert report["ok"], report["problems"]
    assert report["family"] == "roformer_v2"


@pytest.mark.parametrize("target, why", [
    ("hf", "transformers has no RoFormer-v2"),
    ("tf", "roformer_v2"),
    ("hf-tf", "roformer_v2"),
    ("hf-flax", "roformer_v2"),
    ("onnx", "rms_norm"),
])
def test_targets_without_roformer_v2_refuse_it_naming_why(target, why, tmp_path):
    result = run_in_process("convert", SOURCE, tmp_path / "out", "--to", target)
    assert result.exit_code == 2 and why in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


def test_a_config_it_does_not_compute_is_refused(tmp_path):
    config = json.loads((SOURCE / "bert_config.json").read_text())
    for key, value in (("embedding_size", 8), ("tie_word_embeddings", False)):
        directory = tmp_path / key
        directory.mkdir()
        (directory / "bert4keras_model.h5").write_bytes((SOURCE / "bert4keras_model.h5").read_bytes())
        (directory / "bert_config.json").write_text(json.dumps({**config, key: value}))
        result = run_in_process("audit", directory)
        assert result.exit_code == 2 and key in result.stderr, result.stderr
