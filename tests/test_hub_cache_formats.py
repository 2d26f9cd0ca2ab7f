"""A directory holding one model in several of transformers' formats, as Hub snapshots do: read
from the file transformers loads first, said in every report, and the copies held against it by
`verify` (names and shapes by default, values with --deep), a copy that disagrees named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertconv import formats
from conftest import FIXTURES, needs, run_in_process
from hub_cache_layout import add_snapshot, files_of

HF_TF = FIXTURES / "hf_tf"
PRETRAINING = HF_TF / "pretraining"  # tf_model.h5, and pt/model.safetensors: the same weights, converted by transformers
COMMIT = "5" * 40


def _multi(directory: Path, **extra: Path | bytes) -> Path:
    """A snapshot holding the pre-training model as model.safetensors and tf_model.h5 (+ `extra`)."""
    files = {"model.safetensors": PRETRAINING / "pt" / "model.safetensors", "tf_model.h5": PRETRAINING / "tf_model.h5",
             **files_of(PRETRAINING, ("config.json", "vocab.txt")), **extra}
    return add_snapshot(directory / "hub", "org/multi", COMMIT, files, refs=("main",))


def test_transformers_preference_order():
    names = ["flax_model.msgpack", "tf_model.h5", "pytorch_model.bin.index.json", "pytorch_model.bin",
             "model.safetensors.index.json", "model.safetensors"]
    for count in range(2, len(names) + 1):
        found = [Path("d") / name for name in names[:count]]
        chosen, others = formats.preferred(found)
        assert chosen.name == names[count - 1] and [o.name for o in others] == names[:count - 1][::-1]
    assert formats.preferred([Path("d/model.safetensors"), Path("d/bert_model.ckpt.index")]) is None


def test_read_as_transformers_reads_it_and_said_in_every_report(tmp_path):
    snapshot = _multi(tmp_path)
    for command in ("inspect", "audit", "verify"):
        result = run_in_process(command, snapshot, "--json")
        assert result.exit_code == 0, (command, result.stdout)
        report = json.loads(result.stdout)
        assert report["path"] == str(snapshot / "model.safetensors")
        assert any("read model.safetensors" in note and "tf_model.h5" in note for note in report["notes"]), command
    result = run_in_process("convert", snapshot, tmp_path / "out", "--to", "hf", "--json")
    assert result.exit_code == 0 and any("tf_model.h5" in n for n in json.loads(result.stdout)["notes"])


def test_verify_finds_the_copies_agree(tmp_path):
    snapshot = _multi(tmp_path)
    shallow = json.loads(run_in_process("verify", snapshot, "--json").stdout)
    assert shallow["copies"] == [{"path": str(snapshot / "tf_model.h5"), "format": "hf-tf-h5", "compared": "headers",
                                  "agree": True, "problems": []}]
    deep = run_in_process("verify", snapshot, "--deep", "--no-probe", "--json")
    assert deep.exit_code == 0, deep.stdout
    assert json.loads(deep.stdout)["copies"][0]["compared"] == "values"


def test_a_copy_of_another_model_is_named_by_the_header_pass(tmp_path):
    snapshot = _multi(tmp_path, **{"tf_model.h5": HF_TF / "masked_lm" / "tf_model.h5"})
    result = run_in_process("verify", snapshot)
    assert result.exit_code == 1
    assert "the copy tf_model.h5 disagrees with model.safetensors" in result.stdout and "nsp" in result.stdout


def test_a_copy_with_other_values_is_named_by_deep(tmp_path):
    data = bytearray((PRETRAINING / "pt" / "model.safetensors").read_bytes())
    data[-3] ^= 0x40  # a bit of the last tensor's last value
    snapshot = _multi(tmp_path, **{"model.safetensors": bytes(data)})
    assert run_in_process("verify", snapshot, "--no-probe").exit_code == 0  # names and shapes agree
    result = run_in_process("verify", snapshot, "--deep", "--no-probe", "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["copies"][0]["agree"] is False
    assert any("the copy tf_model.h5 disagrees" in p and "first differing value" in p for p in report["problems"])


def test_a_copy_that_cannot_be_read_is_a_problem(tmp_path):
    snapshot = _multi(tmp_path, **{"tf_model.h5": b"not an HDF5 file"})
    result = run_in_process("verify", snapshot, "--json")
    assert result.exit_code == 1
    assert any("the copy tf_model.h5 cannot be read" in p for p in json.loads(result.stdout)["problems"])


def test_four_formats_safetensors_read_pickle_compared(tmp_path):
    """The four formats a Hub snapshot holds: safetensors read, a torch pickle (as transformers'
    save_pretrained(safe_serialization=False) stores it: torch.save of the state dict), the TF
    and Flax files compared. Flax from the Flax fixture: another model, which verify names."""
    torch = needs("torch")
    safetensors_torch = needs("safetensors.torch")
    bin_path = tmp_path / "pytorch_model.bin"
    torch.save(safetensors_torch.load_file(PRETRAINING / "pt" / "model.safetensors"), bin_path)
    snapshot = _multi(tmp_path, **{"pytorch_model.bin": bin_path,
                                   "flax_model.msgpack": FIXTURES / "hf_flax" / "pretraining" / "flax_model.msgpack"})
    report = json.loads(run_in_process("verify", snapshot, "--deep", "--no-probe", "--json").stdout)
    assert report["path"].endswith("model.safetensors")
    verdicts = {Path(c["path"]).name: c["agree"] for c in report["copies"]}
    assert verdicts == {"pytorch_model.bin": True, "tf_model.h5": True, "flax_model.msgpack": False}
    assert any(p.startswith("the copy flax_model.msgpack disagrees") for p in report["problems"])


@pytest.mark.parametrize("recursive", [True, False])
def test_a_multi_format_directory_is_one_checkpoint_of_a_batch(tmp_path, recursive):
    snapshot = _multi(tmp_path)
    args = (tmp_path / "hub", "--recursive") if recursive else (snapshot, FIXTURES / "hf" / "masked_lm")
    result = run_in_process("audit", *args, "--json")
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert result.exit_code == 0 and len(rows) == (1 if recursive else 2)
    assert rows[0]["path"] == str(snapshot / "model.safetensors")
