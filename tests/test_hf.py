"""Hugging Face formats, with transformers and torch as the oracles."""

from __future__ import annotations

import json
import os
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest

from bertconv import formats
from bertconv.checks.audit import audit
from bertconv.errors import BadInput

from conftest import FIXTURES, run_in_process

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from safetensors.torch import load_file  # noqa: E402

HF = FIXTURES / "hf"
TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=37, max_position_embeddings=40, type_vocab_size=2)


def reference_state(directory: Path) -> dict[str, "torch.Tensor"]:
    files = sorted(directory.glob("*.safetensors"))
    if files:
        state = {}
        for f in files:
            state.update(load_file(f))
        return state
    return torch.load(directory / "pytorch_model.bin", weights_only=True)


def as_bits(t: "torch.Tensor") -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().view(np.uint16)
    return t.contiguous().numpy()


@pytest.mark.parametrize("fixture", ["pretraining", "masked_lm", "bert_model", "fp16", "bf16", "sharded",
                                     "pretraining_bin", "legacy_bin"])
def test_every_value_read_equals_the_reference(fixture):
    tree = formats.read(HF / fixture)
    reference = reference_state(HF / fixture)
    for param in tree.params.values():
        expected = as_bits(reference[param.source])
        got = param.tensor.read()
        if expected.ndim == 2 and param.name.endswith("kernel"):
            expected = expected.T  # HF Linear [out, in] -> canonical [in, out]
        assert got.dtype == expected.dtype and np.array_equal(got, expected), param.source
    named = {p.source for p in tree} | {i.name for i in tree.ignored}
    assert named == set(reference)


@pytest.mark.parametrize("cls_name", ["BertModel", "BertForMaskedLM", "BertForPreTraining"])
def test_audit_equals_transformers_num_parameters(tmp_path, cls_name):
    model = getattr(transformers, cls_name)(transformers.BertConfig(**TINY))
    model.save_pretrained(tmp_path)
    report = audit(formats.read(tmp_path))
    assert report["ok"], report["problems"]
    assert report["parameters"] == report["expected_parameters"] == model.num_parameters()


def test_pytorch_bin_tied_decoder_is_found_by_storage_identity():
    tree = formats.read(HF / "pretraining_bin")
    assert tree["mlm.decoder"].shared_with == "embeddings.word"
    assert tree["mlm.decoder_bias"].shared_with == "mlm.output_bias"
    report = audit(tree)
    assert report["ok"] and report["parameters"] == 20_495
    assert {c["canonical"] for c in report["tied_copies"]} == {"mlm.decoder", "mlm.decoder_bias"}


def test_legacy_gamma_beta_names_are_read():
    tree = formats.read(HF / "legacy_bin")
    assert tree["embeddings.norm.gamma"].source == "bert.embeddings.LayerNorm.gamma"
    assert audit(tree)["ok"]


def test_encoder_only_file_without_prefix():
    tree = formats.read(HF / "bert_model")
    assert tree.heads.as_dict() == {"pooler": True, "mlm": False, "nsp": False, "sop": False, "rtd": False,
                                      "contact": False}
    assert tree["embeddings.word"].source == "embeddings.word_embeddings.weight"


@pytest.mark.parametrize("fixture", ["pretraining", "fp16", "bf16", "masked_lm", "bert_model"])
def test_round_trip_is_byte_identical_to_save_pretrained(tmp_path, fixture):
    tree = formats.read(HF / fixture)
    formats.TARGETS["hf"].write(tree, tmp_path, options=_options())
    assert (tmp_path / "model.safetensors").read_bytes() == (HF / fixture / "model.safetensors").read_bytes()


@pytest.mark.parametrize("fixture,cls_name", [("pretraining", "BertForPreTraining"), ("masked_lm", "BertForMaskedLM"),
                                              ("pretraining_bin", "BertForPreTraining"), ("legacy_bin", "BertForMaskedLM"),
                                              ("sharded", "BertForPreTraining"), ("bert_model", "BertModel")])
def test_written_checkpoint_loads_in_transformers_without_key_warnings(tmp_path, fixture, cls_name):
    tree = formats.read(HF / fixture)
    formats.TARGETS["hf"].write(tree, tmp_path, options=_options())
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == [cls_name]
    model, info = getattr(transformers, cls_name).from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    reference = reference_state(HF / fixture)
    for name, value in model.state_dict().items():
        if name in reference and "decoder" not in name:
            assert torch.equal(value, reference[name]), name


def test_sharded_write(tmp_path):
    tree = formats.read(HF / "pretraining")
    formats.TARGETS["hf"].write(tree, tmp_path, options=_options(max_shard_bytes=30_000))
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    model, info = transformers.BertForPreTraining.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert audit(formats.read(tmp_path))["parameters"] == 20_495


def _options(**kw):
    from bertconv.conversion import WriteOptions
    return WriteOptions(**kw)


# --- refusing hostile and broken files --------------------------------------------------


class _RunsCode:
    def __init__(self, canary: Path):
        self.canary = canary

    def __reduce__(self):
        return (os.system, (f"touch {self.canary}",))


def test_pickle_that_would_run_code_is_refused(tmp_path):
    canary = tmp_path / "canary"
    checkpoint = tmp_path / "pytorch_model.bin"
    with zipfile.ZipFile(checkpoint, "w") as archive:
        archive.writestr("archive/data.pkl", pickle.dumps({"bert.embeddings.word_embeddings.weight": _RunsCode(canary)}, protocol=2))
    result = run_in_process("audit", checkpoint)
    assert result.exit_code == 2
    assert "posix.system" in result.stderr or "os.system" in result.stderr
    assert "Traceback" not in result.stderr
    assert not canary.exists()


def test_truncated_safetensors_is_bad_input(tmp_path):
    data = (HF / "pretraining" / "model.safetensors").read_bytes()
    broken = tmp_path / "model.safetensors"
    broken.write_bytes(data[: len(data) // 2])
    with pytest.raises(BadInput, match="model.safetensors"):
        formats.read(broken)


def test_untied_decoder_and_its_bias_are_counted_as_transformers_counts_them(tmp_path):
    config = transformers.BertConfig(**TINY, tie_word_embeddings=False)
    model = transformers.BertForMaskedLM(config)
    model.save_pretrained(tmp_path / "untied")
    report = audit(formats.read(tmp_path / "untied"))
    assert report["ok"], report["problems"]
    assert report["parameters"] == model.num_parameters() == 19_373 + 99 * 32 + 99
    (tmp_path / "out").mkdir()
    formats.TARGETS["hf"].write(formats.read(tmp_path / "untied"), tmp_path / "out", options=_options())
    reloaded, info = transformers.BertForMaskedLM.from_pretrained(tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert torch.equal(reloaded.cls.predictions.decoder.bias, model.cls.predictions.decoder.bias)
