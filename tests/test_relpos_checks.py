"""audit, diff, verify and fill-mask on relative-position and causal models (issue 25, items 1
and 5): the tables are counted by the closed form and never set aside, a model that lost either
field is a difference in tensors, config and outputs, and a causal head is not called a masked
LM's."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from bertconv import formats
from bertconv.config import expected_components

from conftest import FIXTURES, run_in_process

RELPOS = FIXTURES / "relpos"
safetensors_numpy = pytest.importorskip("safetensors.numpy")


def json_of(*args) -> tuple[int, dict]:
    result = run_in_process(*args, "--json")
    return result.exit_code, json.loads(result.stdout)


def edited_copy(name: str, destination: Path, *, keep_tables: bool = True, **config) -> Path:
    """The fixture with its config.json fields replaced by `config`, its distance tables kept or
    dropped: the same tensors as a model that lost a field."""
    shutil.copytree(RELPOS / name, destination)
    values = json.loads((destination / "config.json").read_text())
    (destination / "config.json").write_text(json.dumps({**values, **config}))
    if not keep_tables:
        file = destination / "model.safetensors"
        tensors = safetensors_numpy.load_file(file)
        safetensors_numpy.save_file({k: v for k, v in tensors.items() if "distance_embedding" not in k}, file,
                                    metadata={"format": "pt"})
    return destination


def test_audit_counts_the_issues_model_with_its_tables():
    """The issue's transformers 4 BertForMaskedLM (V 99, H 32, A 4, I 37, P 40, 2 layers):
    20,637 parameters, 1,264 of them in two [2P - 1, H / A] = [79, 8] tables."""
    code, report = json_of("audit", RELPOS / "bert_relative_key_query")
    assert code == 0 and report["ok"]
    assert report["parameters"] == report["expected_parameters"] == 20_637
    tree = formats.read(RELPOS / "bert_relative_key_query")
    tables = [p for p in tree if p.name.endswith("distance_embedding")]
    assert [tuple(p.tensor.shape) for p in tables] == [(79, 8), (79, 8)]
    assert sum(p.numel for p in tables) == 1_264
    absolute = dataclasses.replace(tree.config, position_embedding_type="absolute")
    assert sum(expected_components(absolute, tree.heads).values()) == 20_637 - 1_264
    assert not report["ignored"]


@pytest.mark.parametrize("name", ["bert_relative_key_query", "roberta_relative_key", "electra_relative_key_query",
                                  "albert_relative_key_query", "bert_causal_relative_key"])
def test_verify_sets_no_distance_table_aside(name):
    code, report = json_of("verify", RELPOS / name)
    assert report["consistency"] == [] and report["audit"]["ok"], report["problems"]
    assert not any("distance_embedding" in entry["name"] for entry in report["ignored"])
    assert not any("distance_embedding" in note for note in report["notes"])


def test_diff_sees_a_model_that_lost_its_relative_positions(tmp_path):
    lost = edited_copy("bert_relative_key_query", tmp_path / "absolute", keep_tables=False,
                       position_embedding_type="absolute")
    code, report = json_of("diff", RELPOS / "bert_relative_key_query", lost)
    assert code == 1 and not report["identical"]
    assert [d["field"] for d in report["config_differences"]] == ["position_embedding_type"]
    assert report["only_in_a"] and all("distance_embedding" in n["name"] for n in report["only_in_a"])
    code, report = json_of("diff", RELPOS / "bert_relative_key_query", lost, "--outputs")
    assert code == 1 and report["outputs"]["max_abs_diff"] > 1e-2 and not report["outputs"]["ok"]


def test_diff_sees_a_field_changed_over_the_same_tensors(tmp_path):
    """Only position_embedding_type differs (both files hold the same tensors): still different."""
    relabeled = edited_copy("bert_relative_key", tmp_path / "key_query", position_embedding_type="relative_key_query")
    code, report = json_of("diff", RELPOS / "bert_relative_key", relabeled, "--outputs")
    assert code == 1 and not report["identical"] and not report["only_in_a"] and not report["only_in_b"]
    assert [d["field"] for d in report["config_differences"]] == ["position_embedding_type"]
    assert report["outputs"]["max_abs_diff"] > 1e-3


def test_diff_sees_a_causal_model_made_bidirectional(tmp_path):
    bidirectional = edited_copy("bert_causal", tmp_path / "bidirectional", is_decoder=False)
    code, report = json_of("diff", RELPOS / "bert_causal", bidirectional)
    assert code == 1 and not report["identical"] and report["compared"] > 0
    assert [d["field"] for d in report["config_differences"]] == ["is_decoder"]
    code, report = json_of("diff", RELPOS / "bert_causal", bidirectional, "--outputs")
    assert code == 1 and report["outputs"]["max_abs_diff"] > 1e-2


def test_verify_says_a_causal_head_is_not_a_masked_lms():
    code, report = json_of("verify", RELPOS / "bert_causal", "--deep")
    assert code == 0 and report["mlm_head"] == "complete"
    assert any("causal model (is_decoder)" in note and "not a masked LM" in note for note in report["notes"])
    # The reconstruction probe asks for the token shown, which a next-token head does not predict.
    assert report["mlm_trained"]["probe"] is None and "next token" in report["mlm_trained"]["probe_not_run"]
    code, report = json_of("verify", RELPOS / "bert_relative_key_query")
    assert not any("causal" in note for note in report["notes"])


def test_fill_mask_refuses_a_causal_model():
    result = run_in_process("fill-mask", RELPOS / "bert_causal", "the [MASK] sat")
    assert result.exit_code == 2 and "is_decoder" in result.stderr and "Traceback" not in result.stderr


def test_the_library_fill_mask_refuses_a_causal_model():
    from bertconv.errors import BadInput
    from bertconv.runtime import NumpyBert
    from bertconv.runtime.fill_mask import fill_mask

    model = NumpyBert(formats.read(RELPOS / "bert_causal"))
    with pytest.raises(BadInput, match="is_decoder"):
        fill_mask(model, tokenizer=None, text="the [MASK] sat")
    assert np.isfinite(model(np.array([[5, 6, 7]])).mlm_logits).all()  # it runs, as a causal LM
