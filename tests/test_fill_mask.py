"""`bertconv fill-mask` against transformers' own fill-mask pipeline (a checkpoint with only a
vocab.txt, with only a spiece.model, with only vocab.json + merges.txt), its batches against one
text at a time, its many texts and their JSON, and its refusals."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from conftest import FIXTURES, needs, requires, run_in_process
from bertconv import load
from bertconv.runtime import Numerics, NumpyBert, fill_mask, open_tokenizer
from bertconv.runtime.fill_mask import predict
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


def model_for(runtime: str, tree):
    """The tree's model in the named runtime (torch skips where it is not installed)."""
    if runtime == "torch":
        needs("torch")
        from bertconv.runtime import TorchBert
        return TorchBert(tree)
    return NumpyBert(tree)


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("runtime", ["numpy", "torch"])
def test_library_matches_the_transformers_pipeline(pipeline_predictions, text, runtime):
    model = model_for(runtime, load(TIED))
    results = fill_mask(model, open_tokenizer(VOCAB), text, top_k=TOP_K)
    assert_same_predictions([[p.as_dict() for p in m.predictions] for m in results], pipeline_predictions[text])


def test_cli_json_matches_the_transformers_pipeline(pipeline_predictions):
    text = TEXTS[2]
    result = run_in_process("fill-mask", TIED, text, "--json", "--top-k", TOP_K)
    assert result.exit_code == 0, result.stderr
    printed = [mask["predictions"] for mask in json.loads(result.stdout)["masks"]]
    assert all(set(p) == {"token", "id", "prob"} for mask in printed for p in mask)
    tokens = open_tokenizer(VOCAB).tokens
    assert all(p["token"] == tokens[p["id"]] for mask in printed for p in mask)
    assert_same_predictions(printed, pipeline_predictions[text])


@requires("tokenizers", "torch")
def test_cli_text_output_names_numerics_and_predictions():
    result = run_in_process("fill-mask", TIED, "the cat [MASK] on the mat.", "--top-k", "3", "--runtime", "torch")
    assert result.exit_code == 0, result.stderr
    assert "activation=gelu " in result.stdout and "mask_adder=dtype-min" in result.stdout
    assert "[MASK] #1 (token 3):" in result.stdout
    assert "walk" in result.stdout


def test_without_an_mlm_head_exits_one_saying_so():
    result = run_in_process("fill-mask", ENCODER_ONLY, "the cat [MASK] on the mat.")
    assert result.exit_code == 1
    assert "has no MLM head" in result.stderr and "fill-mask" in result.stderr


def test_a_real_encoder_only_checkpoint_exits_one(minilm):
    result = run_in_process("fill-mask", minilm, "paris is the [MASK] of france.")
    assert result.exit_code == 1
    assert "has no MLM head" in result.stderr


@requires("tokenizers")
def test_text_without_mask_and_missing_vocab_exit_two(tmp_path):
    result = run_in_process("fill-mask", TIED, "no mask here")
    assert result.exit_code == 2 and "has no [MASK]" in result.stderr
    for name in ("model.safetensors", "config.json"):
        shutil.copy(TIED / name, tmp_path / name)
    result = run_in_process("fill-mask", tmp_path, "the [MASK]")
    assert result.exit_code == 2 and "--vocab" in result.stderr
    assert run_in_process("fill-mask", tmp_path, "the [MASK]", "--vocab", VOCAB).exit_code == 0


@requires("tokenizers")
def test_casing_flags():
    def predictions(*args):
        result = run_in_process("fill-mask", TIED, *args, "--json")
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout)["masks"]

    lower = predictions("the cat [MASK] on the mat.")
    assert predictions("THE Cat [MASK] ON the MAT.") == lower  # uncased vocab: lower-cased by default
    assert predictions("THE Cat [MASK] ON the MAT.", "--cased") != lower  # kept: unknown words
    assert predictions("THE Cat [MASK] ON the MAT.", "--cased", "--uncased") == lower


@requires("tokenizers")
def test_numerics_flags_reach_the_runtime():
    result = run_in_process("fill-mask", TIED, "the cat [MASK] on the mat.", "--json", "--act", "gelu_tanh",
                 "--layer-norm-eps", "1e-6", "--mask-adder", "-10000")
    assert result.exit_code == 0, result.stderr
    model = NumpyBert(load(TIED), Numerics(activation=GELU_TANH, layer_norm_eps=1e-6, mask_adder=-10000.0))
    expected = fill_mask(model, open_tokenizer(VOCAB), "the cat [MASK] on the mat.")
    report = json.loads(result.stdout)
    assert report["masks"] == [{"position": m.position, "predictions": [p.as_dict() for p in m.predictions]}
                               for m in expected]
    bad = run_in_process("fill-mask", TIED, "the [MASK]", "--mask-adder", "lots")
    assert bad.exit_code == 2 and "dtype-min" in bad.stderr
    for spelling in (["--mask-adder=-inf"], ["--mask-adder", "-inf"], ["--mask-adder", "-1e9"],
                     ["--mask-adder", "-1.5E+4"], ["--mask-adder", "-.5"]):
        assert run_in_process("fill-mask", TIED, "the [MASK]", *spelling, "--json").exit_code == 0, spelling
    # an option, not a number
    assert run_in_process("fill-mask", TIED, "the [MASK]", "--mask-adder", "-q").exit_code == 2


@requires("tokenizers")
def test_a_google_checkpoint_uses_googles_numerics():
    result = run_in_process("fill-mask", FIXTURES / "tf" / "full", "the [MASK] of")
    assert result.exit_code == 0, result.stderr
    assert "activation=gelu_tanh" in result.stdout and "mask_adder=-10000.0" in result.stdout


# --- the family's tokenizer files, without a tokenizer.json -----------------------------------------

FAMILY = FIXTURES / "family_hf"
TOKENIZERS = FIXTURES / "tokenizers"
#: family -> (model fixture, its transformers class, tokenizer files, mask token)
FILES_ONLY = {
    "albert": (FAMILY / "albert" / "masked_lm", "AlbertForMaskedLM", ["albert_spiece/spiece.model"], "[MASK]"),
    "roberta": (FAMILY / "roberta" / "masked_lm", "RobertaForMaskedLM",
                ["roberta_bpe/vocab.json", "roberta_bpe/merges.txt"], "<mask>"),
}
#: Short: the ALBERT fixture's SentencePiece model spells most words letter by letter, in 20 positions.
FAMILY_TEXTS = ["the cat {mask} on", "{mask} is {mask}.", "a Dog, {mask}"]


def files_only_checkpoint(family: str, directory) -> None:
    """The family's model with its tokenizer files and no tokenizer.json."""
    model, _, files, _ = FILES_ONLY[family]
    for name in ("model.safetensors", "config.json"):
        shutil.copy(model / name, directory / name)
    for name in files:
        shutil.copy(TOKENIZERS / name, directory)


@pytest.mark.parametrize("family", list(FILES_ONLY))
def test_files_only_checkpoints_match_the_transformers_pipeline(family, tmp_path):
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    files_only_checkpoint(family, tmp_path)
    _, cls_name, _, mask = FILES_ONLY[family]
    if family == "roberta":  # RoBERTa's mask takes the space before it (see tokenizer_files.ROBERTA_MASK_LSTRIP)
        from tokenizers import AddedToken
        tokenizer = transformers.RobertaTokenizer.from_pretrained(
            tmp_path, mask_token=AddedToken(mask, lstrip=True, special=True, normalized=False))
    else:
        tokenizer = transformers.AlbertTokenizer.from_pretrained(tmp_path)
    model = getattr(transformers, cls_name).from_pretrained(tmp_path).eval()
    pipeline = transformers.pipeline("fill-mask", model=model, tokenizer=tokenizer, top_k=3)
    texts = [text.format(mask=mask) for text in FAMILY_TEXTS]
    result = run_in_process("fill-mask", tmp_path, *texts, "--json", "--top-k", 3)
    assert result.exit_code == 0, result.stderr
    reports = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["index"] for r in reports] == [0, 1, 2] and [r["text"] for r in reports] == texts
    for report, text in zip(reports, texts):
        expected = pipeline(text)
        expected = expected if isinstance(expected[0], list) else [expected]
        assert_same_predictions([m["predictions"] for m in report["masks"]],
                                [[(r["token"], r["score"]) for r in mask] for mask in expected])
    assert reports[0]["tokenizer"]["kind"] == {"albert": "SentencePiece Unigram model",
                                               "roberta": "byte-level BPE vocab.json + merges.txt"}[family]


@requires("tokenizers")
def test_a_files_only_roberta_reads_mask_for_its_mask_token(tmp_path):
    files_only_checkpoint("roberta", tmp_path)
    own, bert = (json.loads(run_in_process("fill-mask", tmp_path, f"the cat {m} on the mat", "--json").stdout)
                 for m in ("<mask>", "[MASK]"))
    assert own["masks"] == bert["masks"] and own["ok"]


# --- many texts, in batches -----------------------------------------------------------------------


@requires("tokenizers")
@pytest.mark.parametrize("runtime", ["numpy", "torch"])
def test_batches_give_what_one_text_at_a_time_gives(runtime):
    model = model_for(runtime, load(TIED))
    tokenizer = open_tokenizer(VOCAB)
    texts = TEXTS + ["[MASK]", "a much longer text about the [MASK] cat and the dog that sat on the mat ."]
    encodings = tokenizer.encode_batch(texts)
    assert len({len(e.ids) for e in encodings}) > 2  # padded to unequal lengths, with unequal mask counts
    batched = predict(model, tokenizer, encodings, top_k=TOP_K, batch_size=4)
    for text, together in zip(texts, batched):
        alone = fill_mask(model, tokenizer, text, top_k=TOP_K)
        assert [m.position for m in together] == [m.position for m in alone]
        for a, b in zip(together, alone):
            assert [p.id for p in a.predictions] == [p.id for p in b.predictions]
            np.testing.assert_allclose([p.prob for p in a.predictions], [p.prob for p in b.predictions],
                                       rtol=0, atol=1e-6)


@requires("tokenizers")
def test_a_roberta_batch_keeps_each_texts_positions(tmp_path):
    """RoBERTa counts positions past padding: padded rows must take the padding id."""
    from bertconv import formats
    files_only_checkpoint("roberta", tmp_path)
    model, tokenizer = NumpyBert(formats.read(tmp_path)), open_tokenizer(tmp_path / "vocab.json")
    texts = ["<mask>", "the cat <mask> on the mat and the dog sat on the log"]
    batched = predict(model, tokenizer, tokenizer.encode_batch(texts), top_k=3)
    for text, together in zip(texts, batched):
        alone = fill_mask(model, tokenizer, text, top_k=3)
        assert [p.id for p in together[0].predictions] == [p.id for p in alone[0].predictions]
        np.testing.assert_allclose([p.prob for p in together[0].predictions],
                                   [p.prob for p in alone[0].predictions], rtol=0, atol=1e-6)


@requires("tokenizers")
def test_texts_from_arguments_a_file_and_stdin_in_order(tmp_path):
    listing = tmp_path / "texts.txt"
    listing.write_text("the [MASK] of france is paris.\n\n[MASK] dog ran in the [MASK] house!\n", encoding="utf-8")
    from_file = run_in_process("fill-mask", TIED, TEXTS[0], "--file", listing, "--json", "--batch-size", 2)
    assert from_file.exit_code == 0, from_file.stderr
    reports = [json.loads(line) for line in from_file.stdout.splitlines()]
    assert [r["text"] for r in reports] == [TEXTS[0], TEXTS[1], TEXTS[2]]  # the blank line skipped
    for report in reports:
        alone = json.loads(run_in_process("fill-mask", TIED, report["text"], "--json").stdout)
        assert [[p["id"] for p in m["predictions"]] for m in report["masks"]] == \
            [[p["id"] for p in m["predictions"]] for m in alone["masks"]]
    from conftest import ROOT
    import subprocess
    import sys
    piped = subprocess.run([sys.executable, "-m", "bertconv.cli", "fill-mask", str(TIED), "--file", "-", "--json"],
                           input=listing.read_text(), capture_output=True, text=True, cwd=ROOT)
    assert piped.returncode == 0 and [json.loads(l)["index"] for l in piped.stdout.splitlines()] == [0, 1]


@requires("tokenizers")
def test_one_text_that_cannot_be_filled_is_its_own_error_and_exit_two():
    result = run_in_process("fill-mask", TIED, TEXTS[0], "no mask here", TEXTS[1], "--json")
    assert result.exit_code == 2
    first, bad, last = (json.loads(line) for line in result.stdout.splitlines())
    assert first["ok"] and last["ok"] and last["index"] == 2
    assert bad["ok"] is False and bad["index"] == 1 and bad["text"] == "no mask here"
    assert "has no [MASK]" in bad["error"]["message"]
    people = run_in_process("fill-mask", TIED, TEXTS[0], "no mask here")
    assert people.exit_code == 2 and "text #2: no mask here" in people.stdout and "has no [MASK]" in people.stdout
    assert "walk" in people.stdout
    textless = run_in_process("fill-mask", TIED)
    assert textless.exit_code == 2 and "no text" in textless.stderr


def test_without_the_tokenizers_library_it_names_the_extra(tmp_path):
    blocker = tmp_path / "tokenizers.py"
    blocker.write_text("raise ImportError('not installed')\n")
    import os
    import subprocess
    import sys
    from conftest import ROOT
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-m", "bertconv.cli", "fill-mask", str(TIED), TEXTS[0]],
                          capture_output=True, text=True, env=env, cwd=ROOT)
    assert proc.returncode == 2 and "bertconv[fill-mask]" in proc.stderr and "Traceback" not in proc.stderr


def test_loading_reports_every_byte_it_reads():
    from bertconv.runtime import weights
    tree = load(TIED)
    seen = []
    NumpyBert(tree, on_tensor=seen.append)
    plan = weights.plan(tree)
    assert sum(seen) == weights.plan_nbytes(tree, plan) > 0 and len(seen) == len(plan.names)


# --- the tokenizer transformers builds, and a vocabulary of another size ------------------------------


def cased_vocab_checkpoint(directory) -> None:
    """The tied checkpoint with a bare vocab.txt (no tokenizer_config.json) that has upper-case tokens."""
    for name in ("model.safetensors", "config.json"):
        shutil.copy(TIED / name, directory / name)
    tokens = VOCAB.read_text(encoding="utf-8").splitlines()
    cased = {"paris": "Paris", "big": "Big", "france": "France"}
    (directory / "vocab.txt").write_text("\n".join(cased.get(t, t) for t in tokens) + "\n", encoding="utf-8")


def test_a_bare_cased_vocab_fills_as_transformers_5_on_the_same_directory(tmp_path):
    """transformers 5 lower-cases a vocab.txt with no tokenizer_config.json (BertTokenizer's default),
    whatever its tokens: "Paris" becomes [UNK]; fill-mask gives its ids and probabilities and says so."""
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    cased_vocab_checkpoint(tmp_path)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path)
    model = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    pipeline = transformers.pipeline("fill-mask", model=model, tokenizer=tokenizer, top_k=TOP_K)
    text = "Paris is [MASK] Big"
    result = run_in_process("fill-mask", tmp_path, text, "--json", "--top-k", TOP_K)
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert_same_predictions([m["predictions"] for m in report["masks"]],
                            [[(r["token"], r["score"]) for r in pipeline(text)]])
    assert report["tokenizer"]["settings"] == {"do_lower_case": True, "tokenize_chinese_chars": True,
                                               "strip_accents": None}
    assert report["tokenizer"]["casing"] == "do_lower_case true, BertTokenizer's default"
    assert len(report["notes"]) == 1 and "upper-case letters" in report["notes"][0]
    people = run_in_process("fill-mask", tmp_path, text)
    assert "tokenizer settings: do_lower_case=true, tokenize_chinese_chars=true, strip_accents=null" in people.stdout
    assert "warning:" in people.stderr and "--cased" in people.stderr


@requires("tokenizers")
def test_a_vocab_shorter_than_the_embeddings_warns_naming_both_sizes(tmp_path):
    """Rows no token names are kept (a vocabulary padded for speed leaves them on purpose), and said."""
    for name in ("model.safetensors", "config.json"):
        shutil.copy(TIED / name, tmp_path / name)
    tokens = VOCAB.read_text(encoding="utf-8").splitlines()
    (tmp_path / "vocab.txt").write_text("\n".join(tokens[:83]) + "\n", encoding="utf-8")
    people = run_in_process("fill-mask", tmp_path, "the cat [MASK] on the mat.")
    assert people.exit_code == 0, people.stderr
    assert "warning:" in people.stderr and "83 tokens" in people.stderr and "99 rows" in people.stderr
    assert "rows 83..98 have no token" in people.stderr
    report = json.loads(run_in_process("fill-mask", tmp_path, "the cat [MASK] on the mat.", "--json").stdout)
    assert any("83 tokens" in note and "99 rows" in note for note in report["notes"])
    assert "warning" not in run_in_process("fill-mask", TIED, "the cat [MASK] on the mat.").stderr
