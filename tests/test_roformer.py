"""RoFormer against transformers 5 (fixtures made by it: fixtures/make_roformer_fixtures.py): logits of
both runtimes (rotary pairs, rotary values, a projection E -> H), byte-identical Hugging Face round
trips with the frozen sinusoid table computed again, a stored table unlike the config's unread,
refusals of the formats without rotary positions, and fill-mask refused for want of jieba.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from bertconv import formats
from bertconv.runtime.numpy_bert import NumpyBert
from bertconv.runtime.sinusoids import roformer_position_table
from conftest import FIXTURES, needs, run_in_process

HF = FIXTURES / "roformer" / "hf"
MASKED_LMS = [HF / "masked_lm", HF / "rotary_value"]
#: float32 logits of a 2-layer model (up to |4.4|): both runtimes measured within 1.2e-6 of transformers 5.
TOLERANCE = 1e-4


def _batch(vocab_size: int, seq_len: int = 9) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two sequences, the second padded after 6 and of two segments."""
    rng = np.random.default_rng(0)
    ids = rng.integers(5, vocab_size, size=(2, seq_len))
    attention = np.ones_like(ids)
    attention[1, 6:] = 0
    types = np.zeros_like(ids)
    types[1, 3:6] = 1
    return ids, types, attention


def _reference(path, ids, types, attention) -> np.ndarray:
    torch = needs("torch")
    transformers = needs("transformers")
    model = transformers.AutoModelForMaskedLM.from_pretrained(path).eval()
    with torch.no_grad():
        return model(input_ids=torch.tensor(ids), token_type_ids=torch.tensor(types),
                     attention_mask=torch.tensor(attention)).logits.numpy()


@pytest.mark.parametrize("path", MASKED_LMS, ids=lambda p: p.name)
@pytest.mark.parametrize("seq_len", [9, 32])
def test_both_runtimes_compute_transformers_5s_logits(path, seq_len):
    tree = formats.read(path)
    ids, types, attention = _batch(tree.config.vocab_size, seq_len)
    expected = _reference(path, ids, types, attention)
    real = attention.astype(bool)  # padding's outputs are never read
    got = NumpyBert(tree)(ids, types, attention).mlm_logits
    assert np.abs(got - expected)[real].max() <= TOLERANCE
    from bertconv.runtime.torch_bert import TorchBert
    got = TorchBert(tree)(ids, types, attention).mlm_logits.numpy()
    assert np.abs(got - expected)[real].max() <= TOLERANCE


def test_the_sinusoid_table_is_transformers_bit_for_bit():
    safetensors = needs("safetensors.numpy")
    stored = safetensors.load_file(HF / "masked_lm" / "model.safetensors")["roformer.encoder.embed_positions.weight"]
    np.testing.assert_array_equal(roformer_position_table(32, 4), stored)


def test_rotary_value_changes_the_computation():
    from dataclasses import replace
    tree = formats.read(HF / "rotary_value")
    ids, types, attention = _batch(tree.config.vocab_size)
    tree.config = replace(tree.config, rotary_value=False)
    unrotated = NumpyBert(tree)(ids, types, attention).mlm_logits
    assert np.abs(unrotated - _reference(HF / "rotary_value", ids, types, attention)).max() > 1e-2


@pytest.mark.parametrize("name", ["masked_lm", "rotary_value", "model"])
def test_hf_round_trip_is_byte_identical_to_save_pretrained(name, tmp_path):
    out = tmp_path / "out"
    result = run_in_process("convert", HF / name, out, "--to", "hf")
    assert result.exit_code == 0, result.stderr
    assert (out / "model.safetensors").read_bytes() == (HF / name / "model.safetensors").read_bytes()
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "roformer" and "position_embedding_type" not in config
    assert config["architectures"] == json.loads((HF / name / "config.json").read_text())["architectures"]
    assert run_in_process("diff", HF / name, out).exit_code == 0


def test_hf_output_loads_whole_in_transformers_5(tmp_path):
    transformers = needs("transformers")
    out = tmp_path / "out"
    assert run_in_process("convert", HF / "masked_lm", out, "--to", "hf").exit_code == 0
    _, info = transformers.AutoModelForMaskedLM.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info


@pytest.mark.parametrize("source, scheme", [(HF / "masked_lm", "rotary_interleaved"),
                                            (FIXTURES / "nezha" / "hf" / "pretraining", "sinusoidal_relative")],
                         ids=["roformer", "nezha"])
@pytest.mark.parametrize("target", ["hf-tf", "hf-flax", "keras-hub", "onnx"])
def test_formats_without_computed_positions_refuse_them_naming_why(source, scheme, target, tmp_path):
    """RoFormer's rotary and NEZHA's functional relative positions have no parameters to write (Google's
    TF names hold both, as their authors released them: tests/test_positionless_tf.py)."""
    out = tmp_path / "out"
    result = run_in_process("convert", source, out, "--to", target)
    assert result.exit_code == 2 and scheme in result.stderr, result.stderr
    # A weight format has no place for a computed scheme; the ONNX graph does not build it yet.
    assert ("no parameters" if target != "onnx" else "does not compute") in result.stderr
    assert not out.exists()


def test_a_stored_table_unlike_the_config_is_unread(tmp_path):
    numpy = needs("safetensors.numpy")
    directory = tmp_path / "roformer"
    shutil.copytree(HF / "masked_lm", directory)
    tensors = numpy.load_file(directory / "model.safetensors")
    name = "roformer.encoder.embed_positions.weight"
    tensors[name] = tensors[name] * 2
    numpy.save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    result = run_in_process("verify", directory)
    assert result.exit_code == 2 and name in result.stderr and "--accept-loss" in result.stderr
    assert run_in_process("verify", HF / "masked_lm").exit_code == 0


def test_fill_mask_refuses_for_want_of_jieba():
    result = run_in_process("fill-mask", HF / "masked_lm", "今天[MASK]气")
    assert result.exit_code == 2 and "jieba" in result.stderr, result.stderr


def test_inspect_and_audit_name_the_family():
    result = run_in_process("audit", HF / "masked_lm", "--json")
    report = json.loads(result.stdout)
    assert result.exit_code == 0 and report["config"]["position_embedding_type"] == "rotary_interleaved"
    assert report["config"]["embedding_projection"] is True
    assert run_in_process("inspect", HF / "model").exit_code == 0
