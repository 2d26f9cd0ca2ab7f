"""Relative positions and causal attention through the formats (issue 25, items 1 and 5): the
Hugging Face files keep them bit for bit, transformers 4.57 computes bertconv's outputs as it
computed the sources, and every target with no place for them refuses, naming the field, with
nothing written."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertconv import formats
from bertconv.config import COMPUTATION_FIELDS
from bertconv.conversion import convert
from bertconv.errors import BadInput
from bertconv.formats.hf import flax as hf_flax, tf as hf_tf

import oracle_process
from conftest import FIXTURES, run_in_process

RELPOS = FIXTURES / "relpos"
REFERENCE = np.load(RELPOS / "reference.npz")
NAMES = sorted({key.split(":")[0] for key in REFERENCE.files})
RELATIVE = [name for name in NAMES if "relative" in name]
#: float32 logits of the same sums in another order: measured at most 2.9e-6 here.
TOLERANCE = 1e-5


def assert_same_model(source, output) -> None:
    """Every computation field equal and every parameter bit for bit."""
    for name in COMPUTATION_FIELDS:
        assert getattr(output.config, name) == getattr(source.config, name), name
    counted = {name for name in source.params if source.is_counted(name)}  # a .bin stores tied copies too
    assert {name for name in output.params if output.is_counted(name)} == counted
    for name in counted:
        ours, theirs = source[name].tensor.read(), output[name].tensor.read()
        assert ours.dtype == theirs.dtype and ours.tobytes() == theirs.tobytes(), name


@pytest.mark.parametrize("name", [*NAMES, "bert_relative_key_query_bin"])
def test_hf_round_trip_is_bit_exact(name, tmp_path):
    source = formats.read(RELPOS / name)
    convert(source, tmp_path / "out", "hf")
    assert_same_model(source, formats.read(tmp_path / "out"))


def test_the_bin_and_the_safetensors_file_hold_the_same_model():
    assert_same_model(formats.read(RELPOS / "bert_relative_key_query"),
                      formats.read(RELPOS / "bert_relative_key_query_bin"))


def test_hf_output_states_the_attention_fields(tmp_path):
    convert(formats.read(RELPOS / "bert_causal_relative_key"), tmp_path / "out", "hf")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["position_embedding_type"] == "relative_key" and config["is_decoder"] is True
    assert config["architectures"] == ["BertLMHeadModel"]


def test_a_relative_hf_output_says_transformers_5_computes_another_model(tmp_path):
    notes = convert(formats.read(RELPOS / "bert_relative_key_query"), tmp_path / "rel", "hf").notes
    assert any("transformers 5" in note and "relative_key_query" in note for note in notes)
    notes = convert(formats.read(RELPOS / "bert_causal"), tmp_path / "abs", "hf").notes
    assert not any("transformers 5" in note for note in notes)


@pytest.mark.parametrize("target", ["tf", "bert4keras", "hf-tf", "hf-flax"])
@pytest.mark.parametrize("name", ["bert_relative_key_query", "bert_relative_key"])
def test_targets_without_relative_positions_refuse_naming_the_field(name, target, tmp_path):
    result = run_in_process("convert", RELPOS / name, tmp_path / "out", "--to", target)
    assert result.exit_code == 2, result.stdout + result.stderr
    assert "position_embedding_type" in result.stderr and "distance_embedding" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize("target", ["tf", "bert4keras"])
def test_targets_without_causal_attention_refuse_naming_the_field(target, tmp_path):
    result = run_in_process("convert", RELPOS / "bert_causal", tmp_path / "out", "--to", target)
    assert result.exit_code == 2, result.stdout + result.stderr
    assert "is_decoder" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("target", ["hf-tf", "hf-flax"])
def test_causal_attention_is_kept_by_transformers_tf_and_flax_files(target, tmp_path):
    source = formats.read(RELPOS / "bert_causal")
    convert(source, tmp_path / "out", target)
    assert formats.read(tmp_path / "out").config.is_decoder


@pytest.mark.parametrize("module", [hf_tf, hf_flax], ids=["hf-tf", "hf-flax"])
def test_a_writer_that_dropped_the_tables_would_be_caught_by_the_read_back(module, monkeypatch, tmp_path):
    """Were the TF or Flax writer to skip its own refusal and write the model without its
    distance tables, convert's read-back of the output refuses it: nothing is left."""
    monkeypatch.setattr(module, "refuse_unwritten", lambda *args, **kwargs: None)
    target = "hf-tf" if module is hf_tf else "hf-flax"
    with pytest.raises(BadInput, match="distance_embedding"):
        convert(formats.read(RELPOS / "bert_relative_key_query"), tmp_path / "out", target)
    assert not (tmp_path / "out").exists()


# --- transformers 4.57 on what bertconv writes -------------------------------------------------

#: (fixture, target, transformers 4.57 class that loads bertconv's output).
WRITTEN = [*((name, "hf", json.loads((RELPOS / name / "config.json").read_text())["architectures"][0])
             for name in NAMES),
           ("bert_causal", "hf-tf", "TFBertLMHeadModel"),
           ("bert_causal", "hf-flax", "FlaxBertForCausalLM")]


@pytest.fixture(scope="module")
def oracle_runs(tmp_path_factory):
    """The worker's one oracle process for every output: (fixture, JSON line, logits) per WRITTEN entry."""
    oracle_process.skip_unless_installed("transformers 4.57")
    tmp_path = tmp_path_factory.mktemp("relpos_oracle")
    runs = []
    for number, (name, target, cls) in enumerate(WRITTEN):
        directory = tmp_path / f"w{number}"
        convert(formats.read(RELPOS / name), directory, target)
        inputs = tmp_path / f"in{number}.npz"
        np.savez(inputs, **{key: REFERENCE[f"{name}:{key}"]
                            for key in ("input_ids", "token_type_ids", "attention_mask")})
        out = tmp_path / f"out{number}.npz"
        if target == "hf":  # PyTorch, eager attention (tests/oracle_relpos.py)
            [result] = oracle_process.run("relpos", cls, directory, inputs, out)
            runs.append((name, result, np.load(out)["logits"]))
        else:  # TF and Flax loaded as tests/oracle_hf_tf_flax.py loads them, Flax's missing weights listed too
            [result] = oracle_process.run("load-as", directory, inputs, out, cls)
            runs.append((name, result, np.load(out)["mlm_logits"]))
    return runs


@pytest.mark.oracle
def test_transformers_4_computes_bertconvs_outputs_as_it_computed_the_sources(oracle_runs):
    for (name, target, cls), (_, result, logits) in zip(WRITTEN, oracle_runs):
        assert result["transformers"].startswith("4.") and result["class"] == cls
        assert not result["missing"] and not result["unexpected"], (name, target, result)
        difference = np.abs(logits - REFERENCE[f"{name}:logits"]).max()
        assert difference <= TOLERANCE, (name, target, difference)
