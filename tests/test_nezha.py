"""NEZHA against transformers 4.57, which still has it (fixtures made by it: fixtures/make_nezha_fixtures.py;
the tests marked `oracle` run it in .cache/oracle-venv): logits of both runtimes at lengths within
and beyond the clipped relative distance, byte-identical Hugging Face round trips that 4.57 loads
whole and computes the same, the transformers 5 caveat, and fill-mask with its BERT WordPiece
vocabulary (the formats without computed positions refuse it: tests/test_roformer.py).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertconv import formats
from bertconv.runtime.numpy_bert import NumpyBert
import oracle_process
from conftest import FIXTURES, needs, run_in_process

HF = FIXTURES / "nezha" / "hf"
MASKED_LMS = {"pretraining": "NezhaForPreTraining", "masked_lm": "NezhaForMaskedLM"}
#: float32 logits of a 2-layer model: both runtimes measured within 2e-6 of transformers 4.57.
TOLERANCE = 1e-4
#: 5 tokens (all distances within K = 6) and 20 (distances clipped at 6), the second row padded.
LENGTHS = (5, 20)


def _batch(vocab_size: int, seq_len: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seq_len)
    ids = rng.integers(5, vocab_size, size=(2, seq_len))
    attention = np.ones_like(ids)
    attention[1, seq_len - 2:] = 0
    types = np.zeros_like(ids)
    types[1, 2:] = 1
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": attention}


@pytest.fixture(scope="module")
def oracle_logits(tmp_path_factory) -> dict[tuple[str, str, int], np.ndarray]:
    """(fixture, "source" or "written", length) -> transformers 4.57's logits, in the worker's one oracle process."""
    oracle_process.skip_unless_installed("transformers 4.57")
    tmp_path = tmp_path_factory.mktemp("nezha_oracle")
    logits = {}
    for name, cls in MASKED_LMS.items():
        written = tmp_path / f"{name}-hf"
        assert run_in_process("convert", HF / name, written, "--to", "hf").exit_code == 0
        for which, directory in (("source", HF / name), ("written", written)):
            for length in LENGTHS:
                inputs, out = tmp_path / f"{name}-{which}-{length}.npz", tmp_path / f"{name}-{which}-{length}-out.npz"
                np.savez(inputs, **_batch(52, length))
                [result] = oracle_process.run("relpos", cls, directory, inputs, out)
                assert result["transformers"].startswith("4.57") and not result["missing"], result
                logits[(name, which, length)] = np.load(out)["logits"]
    return logits


@pytest.mark.oracle
@pytest.mark.parametrize("name", MASKED_LMS)
@pytest.mark.parametrize("length", LENGTHS)
def test_both_runtimes_compute_transformers_4_57s_logits(name, length, oracle_logits):
    tree = formats.read(HF / name)
    batch = _batch(tree.config.vocab_size, length)
    expected = oracle_logits[(name, "source", length)]
    real = batch["attention_mask"].astype(bool)
    got = NumpyBert(tree)(*batch.values()).mlm_logits
    assert np.abs(got - expected)[real].max() <= TOLERANCE
    needs("torch")  # the torch runtime (an extra)
    from bertconv.runtime.torch_bert import TorchBert
    got = TorchBert(tree)(*batch.values()).mlm_logits.numpy()
    assert np.abs(got - expected)[real].max() <= TOLERANCE


@pytest.mark.oracle
def test_transformers_4_57_computes_the_hf_output_as_the_source(oracle_logits):
    for name in MASKED_LMS:
        for length in LENGTHS:
            np.testing.assert_array_equal(oracle_logits[(name, "written", length)],
                                          oracle_logits[(name, "source", length)])


def test_max_relative_position_changes_the_computation():
    from dataclasses import replace
    tree = formats.read(HF / "masked_lm")
    batch = _batch(tree.config.vocab_size, 20)
    before = NumpyBert(tree)(*batch.values()).mlm_logits
    tree.config = replace(tree.config, max_relative_position=64)
    assert np.abs(NumpyBert(tree)(*batch.values()).mlm_logits - before).max() > 1e-2


@pytest.mark.parametrize("name", ["pretraining", "masked_lm", "model"])
def test_hf_round_trip_is_byte_identical_and_notes_transformers_5(name, tmp_path):
    out = tmp_path / "out"
    result = run_in_process("convert", HF / name, out, "--to", "hf")
    assert result.exit_code == 0, result.stderr
    assert "transformers 5 removed nezha" in result.stderr
    assert (out / "model.safetensors").read_bytes() == (HF / name / "model.safetensors").read_bytes()
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "nezha" and config["max_relative_position"] == 6
    assert config["architectures"] == json.loads((HF / name / "config.json").read_text())["architectures"]
    assert run_in_process("diff", HF / name, out).exit_code == 0


def test_fill_mask_with_its_wordpiece_vocabulary():
    needs("tokenizers")
    result = run_in_process("fill-mask", HF / "masked_lm", "the cat [MASK] on the mat", "--json")
    assert result.exit_code == 0, result.stderr
    assert "sinusoidal_relative" == json.loads(run_in_process("audit", HF / "masked_lm", "--json").stdout)[
        "config"]["position_embedding_type"]
