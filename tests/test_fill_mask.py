"""`bertconv fill-mask` against transformers' own fill-mask pipeline, and its refusals."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from conftest import FIXTURES
from bertconv import load
from bertconv.runtime import Numerics, NumpyBert, WordPieceTokenizer, fill_mask
from bertconv.runtime.numerics import GELU_TANH

RUNTIME = FIXTURES / "runtime"
TIED, ENCODER_ONLY = RUNTIME / "pretraining", RUNTIME / "encoder_only"
VOCAB = TIED / "vocab.txt"
TOP_K = 5
#: Probabilities against the pipeline's, absolute.
PROB_ATOL = 1e-5

TEXTS = ["the cat [MASK] on the mat.", "the [MASK] of france is paris.", "[MASK] dog ran in the [MASK] house!",
         "中国 is a big [MASK]."]


@pytest.fixture(scope="module")
def pipeline_predictions():
    """transformers' fill-mask pipeline on the same checkpoint and vocab.txt: text -> per mask, [(id, prob)]."""
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    model = transformers.BertForMaskedLM.from_pretrained(TIED, attn_implementation="eager").eval()
    tokenizer = transformers.BertTokenizer(vocab=str(VOCAB))
    fill = transformers.pipeline("fill-mask", model=model, tokenizer=tokenizer, top_k=TOP_K)
    out = {}
    for text in TEXTS:
        result = fill(text)
        per_mask = result if isinstance(result[0], list) else [result]
        out[text] = [[(r["token"], r["score"]) for r in mask] for mask in per_mask]
    return out


def assert_same_predictions(ours: list[list[dict]], expected: list[list[tuple[int, float]]]) -> None:
    assert len(ours) == len(expected)
    for mask, reference in zip(ours, expected):
        assert [p["id"] for p in mask] == [token for token, _ in reference]
        assert np.abs(np.array([p["prob"] for p in mask]) - [prob for _, prob in reference]).max() <= PROB_ATOL


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("runtime", ["numpy", "torch"])
def test_library_matches_the_transformers_pipeline(pipeline_predictions, text, runtime):
    tree = load(TIED)
    if runtime == "torch":
        pytest.importorskip("torch")
        from bertconv.runtime import TorchBert
        model = TorchBert(tree)
    else:
        model = NumpyBert(tree)
    results = fill_mask(model, WordPieceTokenizer.from_file(VOCAB), text, top_k=TOP_K)
    assert_same_predictions([[p.as_dict() for p in m.predictions] for m in results], pipeline_predictions[text])


def test_cli_json_matches_the_transformers_pipeline(cli, pipeline_predictions):
    text = TEXTS[2]
    result = cli("fill-mask", TIED, text, "--json", "--top-k", TOP_K)
    assert result.exit_code == 0, result.stderr
    printed = [mask["predictions"] for mask in json.loads(result.stdout)["masks"]]
    assert all(set(p) == {"token", "id", "prob"} for mask in printed for p in mask)
    tokens = WordPieceTokenizer.from_file(VOCAB).tokens
    assert all(p["token"] == tokens[p["id"]] for mask in printed for p in mask)
    assert_same_predictions(printed, pipeline_predictions[text])


def test_cli_text_output_names_numerics_and_predictions(cli):
    result = cli("fill-mask", TIED, "the cat [MASK] on the mat.", "--top-k", "3", "--runtime", "torch")
    assert result.exit_code == 0, result.stderr
    assert "activation=gelu " in result.stdout and "mask_adder=dtype-min" in result.stdout
    assert "[MASK] #1 (token 3):" in result.stdout
    assert "walk" in result.stdout


def test_without_an_mlm_head_exits_one_saying_so(cli):
    result = cli("fill-mask", ENCODER_ONLY, "the cat [MASK] on the mat.")
    assert result.exit_code == 1
    assert "has no MLM head" in result.stderr and "fill-mask" in result.stderr


def test_a_real_encoder_only_checkpoint_exits_one(cli, minilm):
    result = cli("fill-mask", minilm, "paris is the [MASK] of france.")
    assert result.exit_code == 1
    assert "has no MLM head" in result.stderr


def test_text_without_mask_and_missing_vocab_exit_two(cli, tmp_path):
    result = cli("fill-mask", TIED, "no mask here")
    assert result.exit_code == 2 and "has no [MASK]" in result.stderr
    for name in ("model.safetensors", "config.json"):
        shutil.copy(TIED / name, tmp_path / name)
    result = cli("fill-mask", tmp_path, "the [MASK]")
    assert result.exit_code == 2 and "--vocab" in result.stderr
    assert cli("fill-mask", tmp_path, "the [MASK]", "--vocab", VOCAB).exit_code == 0


def test_casing_flags(cli):
    def predictions(*args):
        result = cli("fill-mask", TIED, *args, "--json")
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout)["masks"]

    lower = predictions("the cat [MASK] on the mat.")
    assert predictions("THE Cat [MASK] ON the MAT.") == lower  # uncased vocab: lower-cased by default
    assert predictions("THE Cat [MASK] ON the MAT.", "--cased") != lower  # kept: unknown words
    assert predictions("THE Cat [MASK] ON the MAT.", "--cased", "--uncased") == lower


def test_numerics_flags_reach_the_runtime(cli):
    result = cli("fill-mask", TIED, "the cat [MASK] on the mat.", "--json", "--act", "gelu_tanh",
                 "--layer-norm-eps", "1e-6", "--mask-adder", "-10000")
    assert result.exit_code == 0, result.stderr
    model = NumpyBert(load(TIED), Numerics(activation=GELU_TANH, layer_norm_eps=1e-6, mask_adder=-10000.0))
    expected = fill_mask(model, WordPieceTokenizer.from_file(VOCAB), "the cat [MASK] on the mat.")
    report = json.loads(result.stdout)
    assert report["masks"] == [{"position": m.position, "predictions": [p.as_dict() for p in m.predictions]}
                               for m in expected]
    bad = cli("fill-mask", TIED, "the [MASK]", "--mask-adder", "lots")
    assert bad.exit_code == 2 and "dtype-min" in bad.stderr


def test_a_google_checkpoint_uses_googles_numerics(cli):
    result = cli("fill-mask", FIXTURES / "tf" / "full", "the [MASK] of")
    assert result.exit_code == 0, result.stderr
    assert "activation=gelu_tanh" in result.stdout and "mask_adder=-10000.0" in result.stdout
