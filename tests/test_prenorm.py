"""The pre-LayerNorm families, Megatron-BERT and ESM-2, against transformers 5 (fixtures made by it:
fixtures/make_prenorm_fixtures.py): logits of both runtimes, Hugging Face round trips, refusals
of the formats that cannot hold them, Megatron's vocabulary padding, ESM's rotary buffer, its
tokenizer and fill-mask.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from bertconv import formats
from bertconv.runtime.numpy_bert import NumpyBert
from conftest import FIXTURES, assert_fill_mask_ranks_as_pipeline, needs, run_in_process

MEGATRON = FIXTURES / "prenorm" / "megatron"
ESM = FIXTURES / "prenorm" / "esm" / "masked_lm"
MASKED_LMS = [MEGATRON / "pretraining", MEGATRON / "masked_lm", ESM]
#: float32 logits of a 2-layer model: the runtimes measured 1e-6 of transformers 5 (up to |4|).
TOLERANCE = 1e-4


def _batch(vocab_size: int, mask_id: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Two sequences of 9 ids, the second padded after 6, with a mask token in each when given."""
    ids = np.random.default_rng(0).integers(4, min(vocab_size, 33), size=(2, 9))
    if mask_id is not None:
        ids[0, 3] = ids[1, 1] = ids[1, 2] = mask_id
    attention = np.ones_like(ids)
    attention[1, 6:] = 0
    return ids, attention


def _reference_logits(path, ids, attention) -> np.ndarray:
    torch = needs("torch")
    transformers = needs("transformers")
    model = transformers.AutoModelForMaskedLM.from_pretrained(path).eval()
    with torch.no_grad():
        return model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(attention)).logits.numpy()


@pytest.mark.parametrize("path", MASKED_LMS, ids=lambda p: f"{p.parent.name}-{p.name}")
@pytest.mark.parametrize("mask", [False, True], ids=["no-mask", "masks"])
def test_both_runtimes_compute_transformers_5s_logits(path, mask):
    tree = formats.read(path)
    ids, attention = _batch(tree.config.vocab_size, tree.config.mask_token_id if mask else None)
    expected = _reference_logits(path, ids, attention)
    real = attention.astype(bool)  # padding's outputs are never read (see families/esm.py)
    got = NumpyBert(tree)(ids, None, attention).mlm_logits
    assert np.abs(got - expected)[real].max() <= TOLERANCE
    from bertconv.runtime.torch_bert import TorchBert
    got = TorchBert(tree)(ids, None, attention).mlm_logits.numpy()
    assert np.abs(got - expected)[real].max() <= TOLERANCE


def test_token_dropout_changes_the_computation():
    """A mask token rescales every vector of its sequence: without the rescaling the logits differ."""
    tree = formats.read(ESM)
    ids, attention = _batch(tree.config.vocab_size, tree.config.mask_token_id)
    from dataclasses import replace
    tree.config = replace(tree.config, token_dropout=False)
    unscaled = NumpyBert(tree)(ids, None, attention).mlm_logits
    assert np.abs(unscaled - _reference_logits(ESM, ids, attention))[attention.astype(bool)].max() > 1e-2


@pytest.mark.parametrize("name", ["pretraining", "masked_lm", "model"])
def test_megatron_hf_round_trip_is_byte_identical_to_save_pretrained(name, tmp_path):
    out = tmp_path / "out"
    assert run_in_process("convert", MEGATRON / name, out, "--to", "hf").exit_code == 0
    assert (out / "model.safetensors").read_bytes() == (MEGATRON / name / "model.safetensors").read_bytes()
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "megatron-bert"
    assert config["architectures"] == [json.loads((MEGATRON / name / "config.json").read_text())["architectures"][0]]


def test_esm_hf_output_is_byte_identical_to_save_pretrained(tmp_path):
    """transformers 5 saves ESM's layer norms as `LayerNorm.gamma` / `.beta` and one rotary buffer
    under `esm.encoder.layer.*.attention.self.rotary_embeddings.inv_freq` (its conversion mapping,
    reversed): written so, the file is save_pretrained's byte for byte."""
    out = tmp_path / "out"
    assert run_in_process("convert", ESM, out, "--to", "hf").exit_code == 0
    assert (out / "model.safetensors").read_bytes() == (ESM / "model.safetensors").read_bytes()


def test_esm_hf_output_computes_the_source_in_transformers_5(tmp_path):
    out = tmp_path / "out"
    assert run_in_process("convert", ESM, out, "--to", "hf").exit_code == 0
    assert run_in_process("diff", ESM, out).exit_code == 0
    ids, attention = _batch(33, 32)
    np.testing.assert_array_equal(_reference_logits(out, ids, attention), _reference_logits(ESM, ids, attention))


@pytest.mark.parametrize("source", [MEGATRON / "pretraining", ESM], ids=["megatron", "esm"])
@pytest.mark.parametrize("target", ["tf", "bert4keras", "hf-tf", "hf-flax"])
def test_formats_without_the_model_refuse_it(source, target, tmp_path):
    out = tmp_path / "out"
    result = run_in_process("convert", source, out, "--to", target)
    assert result.exit_code == 2 and "would be another model" in result.stderr
    assert not out.exists()


def test_megatron_padding_rows_are_noted_never_a_mismatch():
    for command in ("verify", "audit"):
        result = run_in_process(command, MEGATRON / "pretraining", "--json")
        report = json.loads(result.stdout)
        assert result.exit_code == 0, result.stdout
        assert any("rows 52..127" in note and "padding" in note for note in report["notes"]), command
    assert formats.read(MEGATRON / "pretraining")["embeddings.word"].tensor.shape == (128, 16)


def test_a_vocab_the_padding_cannot_explain_is_still_a_mismatch(tmp_path):
    directory = tmp_path / "megatron"
    shutil.copytree(MEGATRON / "masked_lm", directory)
    (directory / "vocab.txt").write_text("".join(f"t{i}\n" for i in range(129)))  # pads to 256, not 128
    result = run_in_process("verify", directory, "--json")
    assert result.exit_code == 1 and any("129 tokens" in p for p in json.loads(result.stdout)["problems"])


def test_esm_rotary_buffer_that_differs_from_the_config_is_unread(tmp_path):
    numpy = needs("safetensors.numpy")
    directory = tmp_path / "esm"
    shutil.copytree(ESM, directory)
    tensors = numpy.load_file(directory / "model.safetensors")
    name = next(n for n in tensors if n.endswith("rotary_embeddings.inv_freq"))
    tensors[name] = tensors[name].astype(np.float16).astype(np.float32) * 2
    numpy.save_file(tensors, directory / "model.safetensors")
    result = run_in_process("verify", directory)
    assert result.exit_code == 2 and name in result.stderr and "--accept-loss" in result.stderr


def test_esm_1b_absolute_positions_are_refused(tmp_path):
    directory = tmp_path / "esm"
    shutil.copytree(ESM, directory)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "position_embedding_type": "absolute"}))
    result = run_in_process("audit", directory)
    assert result.exit_code == 2 and "position_embedding_type" in result.stderr


def test_esm_tokenizer_ids_are_transformers_5s():
    transformers = needs("transformers")
    from bertconv.runtime.tokenization.select import open_tokenizer

    reference = transformers.AutoTokenizer.from_pretrained(ESM)
    ours = open_tokenizer(ESM / "vocab.txt")
    for text in ("MKTAYIAK", "MKT<mask>AYIAK", "M K T <mask> A", "MKTJAB<mask><mask>", "mkt", "<cls>AG<eos>"):
        assert ours.encode(text).ids == reference(text)["input_ids"], text


@pytest.mark.parametrize("path, text", [(ESM, "MKT[MASK]AYIAK"), (MEGATRON / "masked_lm", "the cat [MASK] on")])
def test_fill_mask_ranks_as_transformers_5s_pipeline(path, text):
    assert_fill_mask_ranks_as_pipeline(path, text)
