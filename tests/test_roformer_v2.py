"""RoFormer-v2 (bert4keras `model='roformer_v2'`, keras-hub `RoformerV2MaskedLM`) against its
libraries, on fixtures each made (fixtures/make_bert4keras_position_fixtures.py, make_roformer_v2_fixtures.py): bert4keras' weights read,
run by both runtimes against its `predict` (padded too), written back (the same layers and weights,
bit for bit), refused by every target that has no RoFormer-v2, naming why; keras-hub's preset read
and computed against its own outputs, presets written from both loaded by keras-hub 0.32
(`kerashub`: its own environment), and conversions both ways.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from bertconv import formats
from bertconv.config import expected_parameters
from bertconv.runtime.numpy_bert import NumpyBert
from conftest import FIXTURES, needs, run_in_process
from kerashub_process import kerashub, load
from test_bert4keras_positions import _loaded, _predict as positions_predict
from test_bert4keras_positions import _softmax, oracle  # noqa: F401 (the fixture: bert4keras' build)

NAME = "roformer_v2/bert4keras/mlm"
SOURCE = FIXTURES / NAME
#: Probabilities (bert4keras' MLM output is a softmax): both runtimes measured within 8e-8 of its
#: predict (float32 sinusoids, RMS norms and products in another order); the issue's bound is 1e-4.
ATOL = 1e-6


def _inputs(padded: bool) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    ids, types = rng.integers(1, 40, size=(2, 11)), rng.integers(0, 2, size=(2, 11))
    if padded:
        ids[1, 7:] = 0  # bert4keras masks id 0 (mask_zero): padding
    return [ids, types]


def _predict(oracle, directory, inputs, with_mlm: bool = True) -> np.ndarray:
    """bert4keras' predict of the RoFormer-v2 in `directory` (its model called eagerly, as
    test_bert4keras_positions does): probabilities [B, S, V] (with_mlm)."""
    manifest = {"model": "roformer_v2", "with_pool": False, "with_nsp": False, "with_mlm": with_mlm}
    model = _loaded(oracle, directory / "bert_config.json", manifest, directory / "bert4keras_model.h5")
    return positions_predict(model, manifest, inputs)["mlm"]


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
        if with_mlm:  # the models `_predict` builds: bert4keras' predict from the written files is the source's
            inputs = _inputs(False)
            np.testing.assert_array_equal(written(inputs, training=False), source(inputs, training=False))


def test_verify_finds_its_head_present_and_tied():
    report = json.loads(run_in_process("verify", SOURCE, "--json").stdout)
    assert report["ok"], report["problems"]
    assert report["family"] == "roformer_v2"


@pytest.mark.parametrize("target, why", [
    ("hf", "transformers has no RoFormer-v2"),
    ("tf", "roformer_v2"),
    ("hf-tf", "roformer_v2"),
    ("hf-flax", "roformer_v2"),
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


# --- keras-hub presets --------------------------------------------------------------------------

PRESET = FIXTURES / "keras_hub" / "roformer_v2"
#: bertconv's runtimes against keras-hub's own outputs on its preset (logits.npz): measured 8.3e-7.
PRESET_ATOL = 1e-5
#: Written presets loaded by keras-hub against bert4keras' predict (probabilities), the issue's bound (measured 5.5e-8).
ISSUE_ATOL = 1e-4
#: A character vocabulary as the released RoFormer-v2 models have (chinese_roformer-v2-char_*), 40 tokens.
CHAR_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *(chr(0x4E00 + i) for i in range(35))]


def _keras_hub(tmp_path, *jobs) -> list[tuple[dict, dict]]:
    """keras-hub 0.32's `from_preset` of each (preset, inputs) job (tests/kerashub_process.py):
    what it says it loaded, and its weights and outputs."""
    found = []
    for index, (directory, inputs) in enumerate(jobs):
        np.savez(tmp_path / f"in{index}.npz", **inputs)
        found.append(load(directory, tmp_path / f"in{index}.npz", tmp_path / f"out{index}.npz"))
    return found


def _feed(vocab_size: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    token_ids = rng.integers(1, vocab_size, size=(2, 9)).astype("int32")  # no id 0: keras-hub masks it
    segment_ids = np.zeros_like(token_ids)
    segment_ids[:, 5:] = 1
    return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": np.ones_like(token_ids),
            "mask_positions": np.array([[1, 3, 8], [0, 2, 4]], dtype="int32")}


def _masked(logits: np.ndarray, positions: np.ndarray) -> np.ndarray:
    return np.take_along_axis(np.asarray(logits), positions[..., None], axis=1)


def test_a_keras_hub_preset_is_read_and_computes_its_outputs():
    from bertconv.runtime.torch_bert import TorchBert

    needs("torch")
    tree = formats.read(PRESET)
    config = tree.config
    assert (config.model_type, config.rms_norm, config.norm_scale, config.mlm_transform) == ("roformer_v2", True,
                                                                                              True, False)
    assert config.hidden_act == "relu" and config.layer_norm_eps == 1e-7 and config.provenance[
        "max_position_embeddings"] == "default"
    metadata = json.loads((PRESET / "metadata.json").read_text())
    assert expected_parameters(config, tree.heads) == metadata["parameter_count"]
    inputs, expected = dict(np.load(PRESET / "inputs.npz")), dict(np.load(PRESET / "logits.npz"))
    for model in (NumpyBert(tree), TorchBert(tree)):
        out = model(inputs["token_ids"], inputs["segment_ids"], inputs["padding_mask"])
        assert np.abs(np.asarray(out.sequence_output) - expected["sequence_output"]).max() <= PRESET_ATOL
        assert np.abs(_masked(out.mlm_logits, inputs["mask_positions"]) - expected["mlm_logits"]).max() <= PRESET_ATOL
    assert run_in_process("verify", PRESET).exit_code == 0
    assert run_in_process("audit", PRESET).exit_code == 0


@kerashub
def test_keras_hub_loads_what_bertconv_writes(oracle, tmp_path):
    """From bert4keras: RoformerV2MaskedLM.from_preset computes bert4keras' predict at the masked
    positions (unit scales written for its norms); from keras-hub's own preset: every weight back
    bit for bit, and keras-hub's outputs."""
    from_b4k, from_hub = tmp_path / "from-b4k", tmp_path / "from-hub"
    source_with_vocab = tmp_path / "b4k"
    shutil.copytree(SOURCE, source_with_vocab)
    (source_with_vocab / "vocab.txt").write_text("\n".join(CHAR_VOCAB) + "\n")
    for source, out in ((source_with_vocab, from_b4k), (PRESET, from_hub)):
        result = run_in_process("convert", source, out, "--to", "keras-hub")
        assert result.exit_code == 0, result.stderr
        assert "masks padded queries" in result.stderr
    feed = _feed(40)
    (info, loaded), (hub_info, hub_loaded), (own_info, own_loaded) = _keras_hub(
        tmp_path, (from_b4k, feed), (from_hub, dict(np.load(PRESET / "inputs.npz"))),
        (PRESET, dict(np.load(PRESET / "inputs.npz"))))
    assert info["class"] == hub_info["class"] == "RoformerV2MaskedLM"
    assert (info["preprocessor"], info["vocabulary_size"]) == ("RoformerV2MaskedLMPreprocessor", len(CHAR_VOCAB))
    predicted = _predict(oracle, SOURCE, [feed["token_ids"], feed["segment_ids"]])
    assert np.abs(_softmax(loaded["mlm_logits"]) - _masked(predicted, feed["mask_positions"])).max() <= ISSUE_ATOL
    assert hub_info["parameters"] == own_info["parameters"]
    params = sorted(k for k in own_loaded if k.startswith("param:"))
    assert params == sorted(k for k in hub_loaded if k.startswith("param:"))
    for key in params:
        assert np.array_equal(hub_loaded[key], own_loaded[key]), key
    np.testing.assert_array_equal(hub_loaded["mlm_logits"], own_loaded["mlm_logits"])


@kerashub
def test_keras_hub_computes_padded_batches_otherwise(tmp_path):
    """What the caveat says, measured: keras-hub's outputs at the real tokens of a padded row are not
    bertconv's (nor bert4keras', which both runtimes match padded), its unpadded row is."""
    feed = _feed(30)
    feed["token_ids"][1, 6:] = 0
    feed["padding_mask"] = (feed["token_ids"] != 0).astype("int32")
    [(_, loaded)] = _keras_hub(tmp_path, (PRESET, feed))
    ours = NumpyBert(formats.read(PRESET))(feed["token_ids"], feed["segment_ids"], feed["padding_mask"])
    gap = np.abs(ours.sequence_output - loaded["sequence_output"])
    assert gap[0].max() <= PRESET_ATOL and gap[1, :6].max() > 0.1


def test_bert4keras_and_keras_hub_convert_both_ways(tmp_path):
    preset, back = tmp_path / "preset", tmp_path / "back"
    assert run_in_process("convert", SOURCE, preset, "--to", "keras-hub").exit_code == 0
    # keras-hub's unit scales stand against bert4keras' scale-free norms: the same model.
    assert json.loads(run_in_process("diff", SOURCE, preset, "--json").stdout)["identical"]
    result = run_in_process("convert", preset, back, "--to", "bert4keras")
    assert result.exit_code == 0, result.stderr
    assert "a norm scale of all ones" in result.stderr
    assert run_in_process("diff", SOURCE, back).exit_code == 0  # bit for bit, and the same config
    assert json.loads((back / "bert_config.json").read_text())["max_position_embeddings"] == 512


def test_trained_norm_scales_are_refused_by_bert4keras(tmp_path):
    result = run_in_process("convert", PRESET, tmp_path / "out", "--to", "bert4keras")
    assert result.exit_code == 2 and "embeddings.norm.gamma" in result.stderr and "scale" in result.stderr
    assert not (tmp_path / "out").exists()
    hf = run_in_process("convert", PRESET, tmp_path / "hf", "--to", "hf")
    assert hf.exit_code == 2 and "transformers has no RoFormer-v2" in hf.stderr


@pytest.mark.parametrize("key, value", [("use_bias", True), ("max_wavelength", 500), ("head_size", 2),
                                        ("activation", "silu")])
def test_a_preset_bertconv_does_not_compute_is_refused(key, value, tmp_path):
    preset = tmp_path / "preset"
    shutil.copytree(PRESET, preset)
    config = json.loads((preset / "config.json").read_text())
    config["config"][key] = value
    (preset / "config.json").write_text(json.dumps(config))
    result = run_in_process("audit", preset)
    assert result.exit_code == 2 and key in result.stderr, result.stderr


def test_fill_mask_splits_as_bert_does(tmp_path):
    """Its tokenizer is BERT's WordPiece (keras-hub's RoformerV2Tokenizer is a BertTokenizer), not
    RoFormer's jieba: fill-mask runs, a Chinese character a token."""
    needs("tokenizers")
    source = tmp_path / "b4k"
    shutil.copytree(SOURCE, source)
    (source / "vocab.txt").write_text("\n".join(CHAR_VOCAB) + "\n")
    result = run_in_process("fill-mask", source, "\u4e00\u4e01[MASK]\u4e03", "--json")
    assert result.exit_code == 0, result.stderr
    tree = formats.read(source)
    ids = np.array([[2, 5, 6, 4, 8, 3]])  # [CLS] 一 丁 [MASK] 七 [SEP]
    logits = NumpyBert(tree)(ids, np.zeros_like(ids)).mlm_logits[0, 3]
    report = json.loads(result.stdout)
    assert report["masks"][0]["predictions"][0]["id"] == int(np.argmax(logits)), report
