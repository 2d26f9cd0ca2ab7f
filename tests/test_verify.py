"""`bertconv verify`: MLM head, tying, consistency and deep checks, one fixture per property."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bertconv import formats
from bertconv.checks import arrays
from bertconv.checks.verify import verify
from bertconv.dtypes import FLOAT32
from bertconv.errors import BadInput, bad_input
from bertconv.tensor import ArrayTensor, LazyTensor
from bertconv.tree import ParameterTree

from conftest import FIXTURES, run_in_process, real_file

VERIFY = FIXTURES / "verify"
HF = FIXTURES / "hf"
TF_FULL = FIXTURES / "tf" / "full"
REPORT_KEYS = {"ok", "mlm_head", "tying", "problems", "notes", "audit", "missing", "path", "format", "family", "config", "heads",
               "ignored"}
AUDIT_KEYS = {"parameters", "expected_parameters", "components", "tied_copies", "ok"}
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def tf_reader_available() -> bool:
    return any("google-tf" in fmt.names for fmt in formats.FORMATS)


def verify_json(path: Path, *flags: str) -> tuple[int, dict]:
    result = run_in_process("verify", path, "--json", *flags)
    assert result.exit_code in (EXIT_OK, EXIT_FAILED), result.stderr
    assert "Traceback" not in result.stderr
    return result.exit_code, json.loads(result.stdout)


def with_tensor(tree: ParameterTree, name: str, tensor: LazyTensor) -> ParameterTree:
    """A copy of `tree` whose parameter `name` holds `tensor`."""
    params = dict(tree.params)
    params[name] = replace(params[name], tensor=tensor)
    return replace(tree, params=params)


# --- one fixture per property ----------------------------------------------------------------

CASES = [
    # fixture, flags, mlm_head, tying, exit status
    ("complete_tied", (), "complete", "tied", EXIT_OK),
    # The fixtures' heads are random: --deep also runs the MLM probe, which fails them (the probe's
    # own cases are in test_trained.py); --no-probe or --allow-untrained-mlm checks the rest.
    ("complete_tied", ("--deep",), "complete", "tied", EXIT_FAILED),
    ("complete_tied", ("--deep", "--no-probe"), "complete", "tied", EXIT_OK),
    ("complete_tied", ("--deep", "--allow-untrained-mlm"), "complete", "tied", EXIT_OK),
    ("encoder_only", (), "missing", "n/a", EXIT_FAILED),
    ("encoder_only", ("--allow-missing-mlm",), "missing", "n/a", EXIT_OK),
    ("no_output_bias", (), "partial", "tied", EXIT_FAILED),
    ("decoder_copy_equal", ("--deep", "--allow-untrained-mlm"), "complete", "tied", EXIT_OK),
    ("decoder_differs", (), "complete", "untied", EXIT_FAILED),
    ("untied", (), "complete", "untied", EXIT_OK),
    ("nan", (), "complete", "tied", EXIT_OK),  # values are read only with --deep
    ("nan", ("--deep",), "complete", "tied", EXIT_FAILED),
    ("zero_mlm_kernel", (), "complete", "tied", EXIT_OK),
    ("zero_mlm_kernel", ("--deep",), "complete", "tied", EXIT_FAILED),
]


@pytest.mark.parametrize("fixture, flags, head, tying, status", CASES,
                         ids=[f"{c[0]}{''.join(c[1])}" for c in CASES])
def test_fixture_verdicts(fixture, flags, head, tying, status):
    code, report = verify_json(VERIFY / fixture, *flags)
    assert REPORT_KEYS <= set(report) and AUDIT_KEYS <= set(report["audit"])
    assert (report["mlm_head"], report["tying"], code) == (head, tying, status), report["problems"]
    assert report["ok"] is (status == EXIT_OK)
    assert bool(report["problems"]) is (status != EXIT_OK)


@pytest.mark.parametrize("fixture, flags, names", [
    ("decoder_differs", (), ("cls.predictions.decoder.weight", "mlm.decoder", "[17, 5]", "tie_word_embeddings")),
    ("nan", ("--deep",), ("bert.encoder.layer.1.attention.self.value.weight",
                          "layers.1.attention.value.kernel", "nan at [7, 3]")),
    ("zero_mlm_kernel", ("--deep",), ("cls.predictions.transform.dense.weight", "mlm.transform.kernel", "zero")),
    ("no_output_bias", (), ("partial MLM head", "mlm.output_bias")),
])
def test_problems_name_the_tensor(fixture, flags, names):
    _, report = verify_json(VERIFY / fixture, *flags)
    first = report["problems"][0]
    assert all(name in first for name in names), first


def test_partial_head_lists_what_is_missing():
    _, report = verify_json(VERIFY / "no_output_bias")
    assert report["missing"] == ["mlm.output_bias"]


def test_untied_decoder_is_a_note_when_the_config_says_untied():
    _, report = verify_json(VERIFY / "untied")
    assert any("untied decoder, as the config says" in note for note in report["notes"])


def test_human_report_is_short_and_readable():
    result = run_in_process("verify", VERIFY / "complete_tied")
    assert result.exit_code == EXIT_OK, result.stderr
    for line_start in ("MLM head:", "tying:", "consistency:", "deep checks:"):
        assert any(line.startswith(line_start) for line in result.stdout.splitlines()), result.stdout
    assert "complete" in result.stdout and "tied" in result.stdout
    assert result.stdout.rstrip().endswith("verify ok")


def test_shared_storage_and_other_dtypes_verify_deep():
    for fixture in ("pretraining_bin", "bf16", "fp16", "legacy_bin"):
        report = verify(formats.read(HF / fixture), deep=True, allow_untrained_mlm=True)
        assert (report["ok"], report["mlm_head"], report["tying"]) == (True, "complete", "tied"), fixture
        # Random heads: the probe runs on every dtype and finds them untrained (allowed here).
        assert report["mlm_trained"]["verdict"] == "untrained" and report["mlm_trained"]["probe"], fixture


# --- the real MiniLM file (encoder only) -------------------------------------------------------


def test_minilm_has_no_mlm_head_and_says_so(minilm):
    code, report = verify_json(minilm)
    assert (code, report["mlm_head"], report["tying"]) == (EXIT_FAILED, "missing", "n/a")
    message = report["problems"][0]
    assert "no MLM head" in message and "randomly initialized" in message and "--allow-missing-mlm" in message
    human = run_in_process("verify", minilm)
    assert human.exit_code == EXIT_FAILED and "no MLM head" in human.stdout and "FAILED" in human.stdout


def test_minilm_passes_when_a_missing_head_is_allowed(minilm):
    code, report = verify_json(minilm, "--allow-missing-mlm")
    assert code == EXIT_OK and report["ok"] and report["problems"] == []
    # Its position-ids buffer is set aside: reported as a note, never a failure.
    assert any("embeddings.position_ids" in note for note in report["notes"])


# --- deep: each tensor read once, unreadable tensors named, absent data is bad input -----------


class CountingTensor(LazyTensor):
    """Wraps a lazy tensor and counts its reads."""

    def __init__(self, base: LazyTensor):
        self.base, self.dtype, self.shape, self.reads = base, base.dtype, base.shape, 0

    def read(self) -> np.ndarray:
        self.reads += 1
        return self.base.read()


class CorruptTensor(LazyTensor):
    """A tensor whose data fails its checksum, as a TF bundle tensor reports it."""

    def __init__(self, base: LazyTensor):
        self.dtype, self.shape = base.dtype, base.shape

    def read(self) -> np.ndarray:
        raise bad_input("bert_model.ckpt.data-00000-of-00001", "tensor 'x': crc32c mismatch (corrupt data file?)")


def test_deep_reads_every_tensor_exactly_once():
    tree = formats.read(VERIFY / "decoder_copy_equal")
    for name in list(tree.params):
        tree = with_tensor(tree, name, CountingTensor(tree[name].tensor))
    assert verify(tree, deep=True, probe=False)["ok"]  # the probe reads the model again, into a runtime
    assert {p.name: p.tensor.reads for p in tree} == {name: 1 for name in tree.params}


def test_without_deep_only_the_tying_pair_and_the_small_head_tensors_are_read():
    tree = formats.read(VERIFY / "decoder_copy_equal")
    for name in list(tree.params):
        tree = with_tensor(tree, name, CountingTensor(tree[name].tensor))
    verify(tree)
    read = {p.name for p in tree if p.tensor.reads}
    tying = {"embeddings.word", "mlm.decoder", "mlm.output_bias", "mlm.decoder_bias"}
    signs_of_fresh_initialization = {"mlm.output_bias", "mlm.transform.bias", "mlm.norm.gamma", "mlm.norm.beta"}
    assert read == tying | signs_of_fresh_initialization


def test_an_unreadable_tensor_is_a_problem_naming_it():
    tree = formats.read(VERIFY / "complete_tied")
    tree = with_tensor(tree, "layers.0.ffn.output.bias", CorruptTensor(tree["layers.0.ffn.output.bias"].tensor))
    report = verify(tree, deep=True)
    assert not report["ok"]
    assert any("bert.encoder.layer.0.output.dense.bias (layers.0.ffn.output.bias)" in p and "crc32c" in p
               for p in report["problems"])


def test_deep_without_the_data_files_is_bad_input(tmp_path):
    tree = formats.read(VERIFY / "complete_tied")
    tree = replace(tree, files=[tmp_path / "absent.data"])
    with pytest.raises(BadInput, match="absent.data"):
        verify(tree, deep=True)


def test_all_zero_layernorm_gamma_fails_deep_only():
    tree = formats.read(VERIFY / "complete_tied")
    tree = with_tensor(tree, "layers.1.ffn_norm.gamma", ArrayTensor(np.zeros(32, np.float32), FLOAT32))
    assert verify(tree)["ok"]
    report = verify(tree, deep=True, probe=False)
    assert any("bert.encoder.layer.1.output.LayerNorm.weight (layers.1.ffn_norm.gamma)" in p
               for p in report["problems"])


def test_an_all_zero_pooler_bias_is_a_note_but_a_zero_pooler_kernel_fails():
    """Sentence encoders never train the pooler: its bias keeps its initial zeros."""
    tree = formats.read(HF / "pretraining")
    zero_bias = with_tensor(tree, "pooler.bias", ArrayTensor(np.zeros(32, np.float32), FLOAT32))
    report = verify(zero_bias, deep=True, probe=False)
    assert report["ok"] and any("pooler.bias" in n and "zero" in n for n in report["notes"])
    zero_kernel = with_tensor(tree, "pooler.kernel", ArrayTensor(np.zeros((32, 32), np.float32), FLOAT32))
    assert not verify(zero_kernel, deep=True, probe=False)["ok"]


def test_decoder_bias_must_equal_the_output_bias_when_tied():
    tree = formats.read(VERIFY / "decoder_copy_equal")
    bias = tree["mlm.output_bias"].tensor.read().copy()
    bias[42] = np.float32(-0.0) if bias[42] == 0 else -bias[42]
    report = verify(with_tensor(tree, "mlm.decoder_bias", ArrayTensor(bias, FLOAT32)))
    assert report["decoder_bias"] == "differs" and not report["ok"]
    assert "cls.predictions.decoder.bias (mlm.decoder_bias)" in report["problems"][0] and "[42]" in report["problems"][0]


def test_tying_comparison_streams_in_chunks(monkeypatch):
    """With chunks of a few values, the first difference is still found at its row-major index."""
    monkeypatch.setattr(arrays, "CHUNK_ELEMENTS", 40)
    report = verify(formats.read(VERIFY / "decoder_differs"))
    assert report["tying"] == "untied" and "[17, 5]" in report["problems"][0]


# --- TF bundles (need the TF reader) -----------------------------------------------------------

needs_tf = pytest.mark.skipif(not tf_reader_available(),
                              reason='the TF reader ("google-tf" in bertconv.formats.FORMATS) is not there yet')


@needs_tf
def test_corrupted_byte_in_a_tf_data_file_fails_deep_naming_the_tensor(tmp_path):
    if not TF_FULL.exists():
        pytest.skip(f"{TF_FULL} does not exist yet (written by fixtures/make_tf_fixtures.py)")
    copy = tmp_path / "full"
    shutil.copytree(TF_FULL, copy)
    data = next(copy.glob("*.data-00000-of-*"))
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    code, report = verify_json(copy, "--deep")
    assert code == EXIT_FAILED
    assert any("crc32c" in p and "cannot be read" in p for p in report["problems"]), report["problems"]
    assert run_in_process("audit", copy).exit_code == EXIT_OK  # headers only: the corrupt byte is not read


@needs_tf
@pytest.mark.parametrize("name", ["google-bert-medium-uncased", "chinese-bert-wwm"])
def test_real_index_files_report_head_and_tying_without_data(name, tmp_path):
    index = real_file(f"{name}.ckpt.index")
    shutil.copy(index, tmp_path / "bert_model.ckpt.index")
    shutil.copy(real_file(f"{name}.bert_config.json"), tmp_path / "bert_config.json")
    code, report = verify_json(tmp_path, "--headers-only")
    assert (code, report["mlm_head"], report["tying"]) == (EXIT_OK, "complete", "tied"), report["problems"]
    assert report["audit"]["ok"]
    assert any("data file does not exist" in note for note in report["notes"])
    # Without --headers-only, a checkpoint whose data is absent cannot be called ok.
    code, report = verify_json(tmp_path)
    assert code == EXIT_FAILED
    [problem] = report["problems"]
    assert problem.startswith(f"{tmp_path / 'bert_model.ckpt.data-00000-of-00001'}: data file does not exist")
