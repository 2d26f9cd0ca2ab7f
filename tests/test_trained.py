"""Is the MLM head trained? Signs of fresh initialization, the probe, and `diff --outputs`.

The heads of fixtures/trained/ were trained (or broken) by fixtures/make_trained_fixtures.py with
transformers and bert4keras; the MiniLM case is built here, as users build it.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bertconv import formats
from bertconv.checks import trained
from bertconv.checks.verify import verify
from bertconv.dtypes import BFLOAT16, FLOAT16, FLOAT32, FLOAT64, all_elements_equal, as_float32
from bertconv.tensor import ArrayTensor
from bertconv.tree import ParameterTree

from conftest import FIXTURES, requires, run_in_process

TRAINED = FIXTURES / "trained"
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
ALL_SIGNS = [sign.key for sign in trained.SIGNS]
PROBE_KEYS = {"gain", "threshold_gain", "nll", "entropy", "top1", "distinct", "chance_nll", "positions", "rounds",
              "runtime"}
#: A logit budget that a float16 copy of a fixture meets and a different head does not.
FLOAT16_BUDGET = "0.05"


def verify_json(path: Path, *flags: str) -> tuple[int, dict]:
    result = run_in_process("verify", path, "--json", *flags)
    assert result.exit_code in (EXIT_OK, EXIT_FAILED), result.stderr
    return result.exit_code, json.loads(result.stdout)


def diff_json(a: Path, b: Path, *flags: str) -> tuple[int, dict]:
    result = run_in_process("diff", a, b, "--json", "--outputs", *flags)
    assert result.exit_code in (EXIT_OK, EXIT_FAILED), result.stderr
    return result.exit_code, json.loads(result.stdout)


def with_array(tree: ParameterTree, name: str, array: np.ndarray, dtype=FLOAT32) -> ParameterTree:
    params = dict(tree.params)
    params[name] = replace(params[name], tensor=ArrayTensor(array, dtype))
    return replace(tree, params=params)


# --- every fixture through the CLI -------------------------------------------------------------

CASES = [
    # fixture, flags, exit status, verdict, signs seen
    ("hf", (), EXIT_OK, "trained", []),
    ("tf", (), EXIT_OK, "trained", []),
    ("bert4keras", (), EXIT_OK, "trained", []),
    ("hf_untied", (), EXIT_OK, "trained", []),  # its unused cls.predictions.bias is zero: no sign
    ("encoder_then_mlm", (), EXIT_FAILED, "untrained", ALL_SIGNS),
    ("encoder_then_mlm", ("--allow-untrained-mlm",), EXIT_OK, "untrained", ALL_SIGNS),
    # Perturbed or copied heads show no sign: only running them tells.
    ("perturbed_fresh", (), EXIT_OK, "trained", []),
    ("perturbed_fresh", ("--probe",), EXIT_FAILED, "untrained", []),
    ("perturbed_fresh", ("--deep",), EXIT_FAILED, "untrained", []),
    ("copied_head", ("--probe",), EXIT_FAILED, "untrained", []),
    ("copied_head", ("--deep", "--allow-untrained-mlm"), EXIT_OK, "untrained", []),
    ("hf", ("--deep",), EXIT_OK, "trained", []),
    ("tf", ("--deep",), EXIT_OK, "trained", []),
    ("bert4keras", ("--deep",), EXIT_OK, "trained", []),
    ("hf_untied", ("--deep",), EXIT_OK, "trained", []),
    ("hf", ("--probe", "--runtime", "torch"), EXIT_OK, "trained", []),
]


@pytest.mark.parametrize("fixture, flags, status, verdict, signs", [
    pytest.param(*case, id=f"{case[0]}{''.join(case[1])}", marks=requires("torch") if "torch" in case[1] else ())
    for case in CASES])
def test_fixture_verdicts(fixture, flags, status, verdict, signs):
    code, report = verify_json(TRAINED / fixture, *flags)
    judged = report["mlm_trained"]
    assert (code, judged["verdict"], judged["signs"]) == (status, verdict, signs), report["problems"]
    probed = "--probe" in flags or "--deep" in flags
    assert (judged["probe"] is not None) is probed
    if probed:
        assert PROBE_KEYS <= set(judged["probe"])
        assert (judged["probe"]["gain"] >= trained.PROBE_GAIN_TRAINED) is (verdict == "trained")
    else:
        assert judged["probe_not_run"], "a probe that did not run says why"
    allowed = "--allow-untrained-mlm" in flags and verdict == "untrained"
    assert any("allowed (--allow-untrained-mlm)" in note for note in report["notes"]) is allowed


def test_probe_figures_add_up():
    _, report = verify_json(TRAINED / "hf", "--probe")
    probe, config = report["mlm_trained"]["probe"], report["config"]
    assert probe["chance_nll"] == pytest.approx(math.log(config["vocab_size"]))
    assert probe["positions"] == trained.SAMPLE_BATCH * trained.SAMPLE_LENGTH
    assert probe["rounds"] == trained.FILL_ROUNDS and probe["runtime"] == "numpy"
    assert probe["gain"] == pytest.approx(probe["entropy"] - probe["nll"])
    assert 0 < probe["entropy"] <= math.log(min(probe["distinct"], probe["positions"])) + 1e-12
    assert probe["nll"] < probe["chance_nll"]  # a trained head is surer of its sample than a uniform guess


def test_untrained_message_says_what_it_means_and_how_it_happens():
    _, report = verify_json(TRAINED / "encoder_then_mlm")
    message = report["problems"][0]
    for words in ("untrained MLM head", "cls.predictions.bias", "cls.predictions.transform.LayerNorm.weight",
                  "newly initialized", "save_pretrained", "--allow-untrained-mlm"):
        assert words in message, message
    human = run_in_process("verify", TRAINED / "encoder_then_mlm")
    assert human.exit_code == EXIT_FAILED
    assert any(line.startswith("trained:") and "untrained" in line for line in human.stdout.splitlines())


def test_probe_message_gives_the_figures():
    _, report = verify_json(TRAINED / "copied_head", "--probe")
    message = report["problems"][0]
    assert "context gain" in message and "entropy" in message and "--allow-untrained-mlm" in message
    human = run_in_process("verify", TRAINED / "copied_head", "--probe")
    line = next(line for line in human.stdout.splitlines() if line.startswith("trained:"))
    assert "untrained" in line and "sample it wrote itself" in line


def test_probe_figures_are_what_transformers_computes():
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    tree = formats.read(TRAINED / "hf")
    model = transformers.BertForMaskedLM.from_pretrained(TRAINED / "hf").eval()

    def their_logits(ids: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return model(input_ids=torch.from_numpy(ids), attention_mask=torch.ones(ids.shape, dtype=torch.long)).logits.numpy()

    # The sample as transformers writes it: the same start, the same refilling rounds.
    prior = trained.head_prior(tree, "mlm.output_bias")
    bias = model.cls.predictions.decoder.bias.detach().numpy().astype(np.float64)
    assert np.allclose(prior, np.exp(bias - bias.max()) / np.exp(bias - bias.max()).sum())
    ids = np.random.default_rng(trained.PROBE_SEED).choice(prior.size, size=(trained.SAMPLE_BATCH, trained.SAMPLE_LENGTH),
                                                           p=prior)
    for _ in range(trained.FILL_ROUNDS):
        ids = their_logits(ids).argmax(-1)
    theirs = trained.score(their_logits(ids), ids, "transformers")
    ours = trained.probe(tree)
    assert (ours.top1, ours.distinct) == (theirs.top1, theirs.distinct)
    assert ours.nll == pytest.approx(theirs.nll, abs=1e-4) and ours.entropy == theirs.entropy


@requires("torch")
def test_numpy_and_torch_probes_agree():
    tree = formats.read(TRAINED / "bert4keras")
    by_numpy, by_torch = trained.probe(tree, "numpy"), trained.probe(tree, "torch")
    assert by_numpy.top1 == by_torch.top1 and by_numpy.entropy == by_torch.entropy
    assert by_numpy.gain == pytest.approx(by_torch.gain, abs=1e-4)


# --- each sign alone, in any dtype ----------------------------------------------------------------


@pytest.mark.parametrize("sign", trained.SIGNS, ids=[s.key for s in trained.SIGNS])
@pytest.mark.parametrize("dtype", [FLOAT32, FLOAT16], ids=["float32", "float16"])
def test_each_initializer_value_alone_is_a_sign(sign, dtype):
    tree = formats.read(TRAINED / "hf")
    shape = tree[sign.tensor].tensor.shape
    tree = with_array(tree, sign.tensor, np.full(shape, sign.value, dtype=dtype.numpy), dtype)
    report = verify(tree)
    assert report["mlm_trained"]["signs"] == [sign.key] and not report["ok"]
    assert tree[sign.tensor].source in report["problems"][0]


def test_values_near_the_initializer_are_no_sign():
    tree = formats.read(TRAINED / "encoder_then_mlm")
    gamma = np.ones(tree["mlm.norm.gamma"].tensor.shape, np.float32)
    gamma[3] = np.nextafter(np.float32(1), np.float32(2))
    report = verify(with_array(tree, "mlm.norm.gamma", gamma))
    assert "norm_gamma_one" not in report["mlm_trained"]["signs"]
    assert len(report["mlm_trained"]["signs"]) == len(trained.SIGNS) - 1


def _bits_of(values: np.ndarray, dtype) -> np.ndarray:
    """float32 values in `dtype`'s storage (bfloat16: the top halves of the float32 bits)."""
    if dtype is BFLOAT16:
        return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return values.astype(dtype.numpy)


_ALMOST_ZERO = np.float32(1e-30)  # 0 in float16; float32 and bfloat16 keep it


@pytest.mark.parametrize("dtype", [FLOAT32, FLOAT16, BFLOAT16, FLOAT64], ids=lambda d: d.name)
@pytest.mark.parametrize("values", [
    [0.0, 0.0, 0.0], [0.0, -0.0, 0.0], [-0.0], [1.0, 1.0], [1.0, -1.0], [0.0, 1.0], [1.0, 1.0000001],
    [0.0, _ALMOST_ZERO], [float("nan")], [0.0, float("nan")], [1.0, float("inf")], [2.0, 2.0], [-2.0, 0.0],
    [0.5, 1.0], [np.float32(1) + np.float32(2**-7)], [0.0, 2**-24], [np.float32(-2**-149)],
], ids=str)
def test_sign_values_compare_by_their_bytes_as_numpy_compares_the_values(dtype, values):
    """`dtypes.all_elements_equal` (plain verify's test for 0 and 1, on the stored bytes, no
    NumPy) says what NumPy's comparison of the widened values says, -0.0 and NaN included."""
    stored = _bits_of(np.array(values, np.float64), dtype)
    widened = as_float32(stored, dtype) if dtype is not FLOAT64 else stored
    for value in (0.0, 1.0):
        assert all_elements_equal(stored.tobytes(), dtype, value) == bool(np.all(widened == value)), value


def test_a_sign_is_read_from_the_file_bytes_without_numpy(tmp_path):
    """Plain verify reads the head's small tensors with `LazyTensor.read_bytes`: one pread of the
    bytes where they lie, the same bytes `read()` gives, and a truncated file is bad input."""
    from bertconv.errors import BadInput

    tree = formats.read(TRAINED / "hf")
    tensor = tree["mlm.norm.gamma"].tensor
    assert tensor.copy_span() is not None
    assert tensor.read_bytes() == np.asarray(tensor.read()).tobytes()
    copy = tmp_path / "model.safetensors"
    data = (TRAINED / "hf" / "model.safetensors").read_bytes()
    copy.write_bytes(data)
    short = formats.read(copy)["mlm.norm.gamma"].tensor
    _, offset = short.copy_span()
    with open(copy, "r+b") as file:
        file.truncate(offset + short.nbytes - 1)
    with pytest.raises(BadInput, match="ends before byte"):
        short.read_bytes()


def test_an_untied_models_unused_output_bias_is_no_sign_but_its_decoder_bias_is():
    tree = formats.read(TRAINED / "hf_untied")
    assert verify(tree)["ok"]
    zero = np.zeros(tree["mlm.decoder_bias"].tensor.shape, np.float32)
    report = verify(with_array(tree, "mlm.decoder_bias", zero))
    assert report["mlm_trained"]["signs"] == ["output_bias_zero"]
    assert "cls.predictions.decoder.bias" in report["problems"][0]
    deep = verify(tree, deep=True)
    assert deep["ok"] and any("cls.predictions.bias" in n and "unused" in n for n in deep["notes"])


def test_non_finite_logits_fail_the_probe():
    report = verify(formats.read(FIXTURES / "verify" / "nan"), probe=True)
    assert report["mlm_trained"]["verdict"] == "untrained"
    assert any("not all finite" in p for p in report["problems"])


# --- what cannot be judged ---------------------------------------------------------------------


def test_without_the_data_file_signs_are_not_checked_and_the_probe_is_bad_input(tmp_path):
    copy = tmp_path / "tf"
    shutil.copytree(TRAINED / "tf", copy)
    next(copy.glob("*.data-*")).unlink()
    code, report = verify_json(copy, "--headers-only")
    assert code == EXIT_OK and report["mlm_trained"]["verdict"] == "n/a"
    assert any("not checked" in note for note in report["notes"])
    code, report = verify_json(copy)  # without --headers-only the absent data file fails
    assert code == EXIT_FAILED and any("data file does not exist" in p for p in report["problems"])
    probe = run_in_process("verify", copy, "--probe")
    assert probe.exit_code == EXIT_BAD_INPUT and "data-00000-of-00001" in probe.stderr
    assert "Traceback" not in probe.stderr


def test_no_head_and_conditional_layernorm_are_not_judged():
    missing = verify(formats.read(FIXTURES / "verify" / "encoder_only"), allow_missing_mlm=True, probe=True)
    assert missing["mlm_trained"]["verdict"] == "n/a" and missing["mlm_trained"]["probe"] is None
    conditional = verify(formats.read(FIXTURES / "bert4keras" / "v99-cond-mlm"), probe=True)
    assert conditional["mlm_trained"]["probe"] is None and conditional["mlm_trained"]["probe_not_run"]
    assert conditional["ok"]  # the runtimes cannot run it: a note, not a failure


# --- the real MiniLM, loaded into BertForMaskedLM and saved --------------------------------------


def test_minilm_loaded_into_a_masked_lm_and_saved_fails(minilm, tmp_path):
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    transformers.BertForMaskedLM.from_pretrained(minilm).save_pretrained(tmp_path / "minilm-mlm")
    code, report = verify_json(tmp_path / "minilm-mlm")
    assert code == EXIT_FAILED and report["mlm_head"] == "complete" and report["tying"] == "tied"
    assert report["mlm_trained"]["signs"] == ALL_SIGNS
    allowed = run_in_process("verify", tmp_path / "minilm-mlm", "--allow-untrained-mlm")
    assert allowed.exit_code == EXIT_OK, allowed.stdout
    # Even with its initializer values disguised, the probe finds it at chance.
    tree = formats.read(tmp_path / "minilm-mlm")
    bias = np.random.default_rng(0).normal(0, 0.02, tree["mlm.output_bias"].tensor.shape).astype(np.float32)
    result = trained.probe(with_array(tree, "mlm.output_bias", bias))
    assert not result.trained and result.gain < 0


# --- diff --outputs ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def float16_copy(tmp_path_factory) -> Path:
    """fixtures/trained/hf converted to float16 by transformers."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    directory = tmp_path_factory.mktemp("fp16") / "hf-fp16"
    transformers.BertForMaskedLM.from_pretrained(TRAINED / "hf").to(torch.float16).save_pretrained(directory)
    return directory


def test_diff_outputs_passes_a_float16_conversion_within_its_budget(float16_copy):
    code, report = diff_json(TRAINED / "hf", float16_copy, "--outputs-atol", FLOAT16_BUDGET)
    outputs = report["outputs"]
    assert code == EXIT_OK and report["ok"] and not report["tensors_ok"]  # every tensor rounded
    assert outputs["compared"] == "mlm_logits" and 0 < outputs["max_abs_diff"] <= float(FLOAT16_BUDGET)
    assert outputs["top1_agreement"] == 1.0


def test_diff_outputs_default_tolerance_is_float32_noise(float16_copy):
    code, report = diff_json(TRAINED / "hf", float16_copy)
    assert code == EXIT_FAILED and report["outputs"]["atol"] == pytest.approx(1e-4)
    human = run_in_process("diff", TRAINED / "hf", float16_copy, "--outputs")
    assert human.exit_code == EXIT_FAILED and "--outputs-atol" in human.stdout


def test_diff_outputs_of_a_lossless_conversion_are_equal():
    code, report = diff_json(TRAINED / "tf", TRAINED / "hf")
    # Equal bits, but the NumPy runtime multiplies by a Hugging Face kernel as the transposed view
    # of its [out, in] map, and BLAS may sum in another order for that layout (OpenBLAS does on
    # some processors: 9.5e-7 here), so the logits agree to float32 rounding, not always to the bit.
    outputs = report["outputs"]
    assert code == EXIT_OK and report["tensors_ok"] and outputs["max_abs_diff"] < 1e-5
    assert outputs["top1_agreement"] == 1.0


@pytest.mark.parametrize("other", ["copied_head", "perturbed_fresh"])
def test_diff_outputs_fails_a_different_head(other):
    base = "hf" if other == "copied_head" else "encoder_then_mlm"
    code, report = diff_json(TRAINED / base, TRAINED / other, "--outputs-atol", FLOAT16_BUDGET)
    assert code == EXIT_FAILED and not report["outputs"]["ok"]
    assert report["outputs"]["max_abs_diff"] > float(FLOAT16_BUDGET)


def test_diff_outputs_still_fails_a_missing_tensor():
    code, report = diff_json(FIXTURES / "hf" / "pretraining", FIXTURES / "hf" / "masked_lm")
    assert code == EXIT_FAILED and report["only_in_a"]
