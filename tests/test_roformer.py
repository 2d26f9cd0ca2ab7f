"""RoFormer against transformers 5 (fixtures made by it: fixtures/make_roformer_fixtures.py): logits of
both runtimes (rotary pairs, rotary values, a projection E -> H), byte-identical Hugging Face round
trips with the frozen sinusoid table computed again, a stored table unlike the config's unread,
refusals of the formats without rotary positions, and its tokenizer (jieba's words, then WordPiece)
giving transformers 5's ids, fill-mask its pipeline's predictions.
"""

from __future__ import annotations

import json
import shutil
import sys

import numpy as np
import pytest

from bertconv import formats
from bertconv.runtime.numpy_bert import NumpyBert
from bertconv.runtime.sinusoids import roformer_position_table
from conftest import FIXTURES, assert_fill_mask_ranks_as_pipeline, needs, run_in_process

HF = FIXTURES / "roformer" / "hf"
MASKED_LMS = [HF / "masked_lm", HF / "rotary_value"]
#: float32 logits of a 2-layer model (up to |4.4|): both runtimes measured within 1.2e-6 of transformers 5.
TOLERANCE = 1e-4


def _batch(vocab_size: int, seq_len: int = 9) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two sequences, the second padded after 6 and of two segments."""
    rng = np.random.default_rng(0)
    ids = rng.integers(5, vocab_size, size=(2, seq_len))
    attention = np.ones_like(ids)
    attention[1, 6:] = 0
    types = np.zeros_like(ids)
    types[1, 3:6] = 1
    return ids, types, attention


def _reference(path, ids, types, attention) -> np.ndarray:
    torch = needs("torch")
    transformers = needs("transformers")
    model = transformers.AutoModelForMaskedLM.from_pretrained(path).eval()
    with torch.no_grad():
        return model(input_ids=torch.tensor(ids), token_type_ids=torch.tensor(types),
                     attention_mask=torch.tensor(attention)).logits.numpy()


@pytest.mark.parametrize("path", MASKED_LMS, ids=lambda p: p.name)
@pytest.mark.parametrize("seq_len", [9, 32])
def test_both_runtimes_compute_transformers_5s_logits(path, seq_len):
    tree = formats.read(path)
    ids, types, attention = _batch(tree.config.vocab_size, seq_len)
    expected = _reference(path, ids, types, attention)
    real = attention.astype(bool)  # padding's outputs are never read
    got = NumpyBert(tree)(ids, types, attention).mlm_logits
    assert np.abs(got - expected)[real].max() <= TOLERANCE
    from bertconv.runtime.torch_bert import TorchBert
    got = TorchBert(tree)(ids, types, attention).mlm_logits.numpy()
    assert np.abs(got - expected)[real].max() <= TOLERANCE


def test_the_sinusoid_table_is_transformers_bit_for_bit():
    safetensors = needs("safetensors.numpy")
    stored = safetensors.load_file(HF / "masked_lm" / "model.safetensors")["roformer.encoder.embed_positions.weight"]
    np.testing.assert_array_equal(roformer_position_table(32, 4), stored)


def test_rotary_value_changes_the_computation():
    from dataclasses import replace
    tree = formats.read(HF / "rotary_value")
    ids, types, attention = _batch(tree.config.vocab_size)
    tree.config = replace(tree.config, rotary_value=False)
    unrotated = NumpyBert(tree)(ids, types, attention).mlm_logits
    assert np.abs(unrotated - _reference(HF / "rotary_value", ids, types, attention)).max() > 1e-2


@pytest.mark.parametrize("name", ["masked_lm", "rotary_value", "model"])
def test_hf_round_trip_is_byte_identical_to_save_pretrained(name, tmp_path):
    out = tmp_path / "out"
    result = run_in_process("convert", HF / name, out, "--to", "hf")
    assert result.exit_code == 0, result.stderr
    assert (out / "model.safetensors").read_bytes() == (HF / name / "model.safetensors").read_bytes()
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "roformer" and "position_embedding_type" not in config
    assert config["architectures"] == json.loads((HF / name / "config.json").read_text())["architectures"]
    assert run_in_process("diff", HF / name, out).exit_code == 0


def test_hf_output_loads_whole_in_transformers_5(tmp_path):
    transformers = needs("transformers")
    out = tmp_path / "out"
    assert run_in_process("convert", HF / "masked_lm", out, "--to", "hf").exit_code == 0
    _, info = transformers.AutoModelForMaskedLM.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info


@pytest.mark.parametrize("source, scheme", [(HF / "masked_lm", "rotary_interleaved"),
                                            (FIXTURES / "nezha" / "hf" / "pretraining", "sinusoidal_relative")],
                         ids=["roformer", "nezha"])
@pytest.mark.parametrize("target", ["hf-tf", "hf-flax", "keras-hub"])
def test_formats_without_computed_positions_refuse_them_naming_why(source, scheme, target, tmp_path):
    """RoFormer's rotary and NEZHA's functional relative positions have no parameters to write (the
    ONNX graph computes them: tests/test_onnx_positions.py; Google's TF names hold both, as their
    authors released them: tests/test_positionless_tf.py)."""
    out = tmp_path / "out"
    result = run_in_process("convert", source, out, "--to", target)
    assert result.exit_code == 2 and scheme in result.stderr, result.stderr
    assert "no parameters" in result.stderr
    assert not out.exists()


def test_a_stored_table_unlike_the_config_is_unread(tmp_path):
    numpy = needs("safetensors.numpy")
    directory = tmp_path / "roformer"
    shutil.copytree(HF / "masked_lm", directory)
    tensors = numpy.load_file(directory / "model.safetensors")
    name = "roformer.encoder.embed_positions.weight"
    tensors[name] = tensors[name] * 2
    numpy.save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    result = run_in_process("verify", directory)
    assert result.exit_code == 2 and name in result.stderr and "--accept-loss" in result.stderr
    assert run_in_process("verify", HF / "masked_lm").exit_code == 0


#: Chinese, mixed and cased text: words jieba finds that the vocabulary holds (天气, 北京) and does not
#: (今天, 欢迎), Latin words and word pieces, punctuation, accents, spaces and a mask.
TEXTS = ["今天天气非常好。", "北京欢迎你!我们在北京", "the cats sat, 他说：Hello World 123",
         "Café 中国人 is a [MASK]。", "  今天   [MASK]气\t好  "]
_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"今天气非常好。的是我你他在有一个中国人北京欢迎们!说：,",
          "天气", "非常", "中国", "北京", "中国人", "the", "cat", "sat", "##s", "a", "is", "hello", "world", "cafe",
          "1", "##2", "##3", "he", "##llo"]


def _vocab_dir(tmp_path, settings: dict | None = None):
    directory = tmp_path / "tokenizer"
    directory.mkdir(exist_ok=True)
    (directory / "vocab.txt").write_text("".join(token + "\n" for token in _VOCAB), encoding="utf-8")
    if settings is not None:
        (directory / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "RoFormerTokenizer",
                                                                     **settings}))
    return directory


def _theirs(settings: dict | None, directory):
    """transformers 5's RoFormerTokenizer as it loads a tokenizer.json (its vocabulary a dict): built
    from the vocabulary, saved, loaded back."""
    transformers = needs("transformers")
    built = transformers.RoFormerTokenizer(vocab={token: i for i, token in enumerate(_VOCAB)}, **(settings or {}))
    built.save_pretrained(directory / "saved")
    loaded = transformers.AutoTokenizer.from_pretrained(directory / "saved")
    assert type(loaded) is transformers.RoFormerTokenizerFast  # one class in transformers 5
    return loaded


@pytest.mark.parametrize("settings", [None, {"do_lower_case": False}], ids=["uncased", "cased"])
def test_tokenizer_ids_are_transformers_5s_roformer_tokenizers(tmp_path, settings):
    needs("rjieba")
    from bertconv.runtime.tokenization.select import open_tokenizer
    directory = _vocab_dir(tmp_path, settings)
    ours = open_tokenizer(directory / "vocab.txt", family="roformer")
    theirs = _theirs(settings, tmp_path)
    # What save_pretrained leaves: a tokenizer.json (BERT's pre-tokenizer in it) and no vocab.txt.
    saved = tmp_path / "saved"
    assert not (saved / "vocab.txt").exists()
    from_saved = open_tokenizer(saved / "tokenizer.json")
    for text in TEXTS:
        expected = theirs(text, return_token_type_ids=True)
        got = ours.encode(text)
        assert got.ids == expected["input_ids"], (text, got.tokens)
        assert got.type_ids == expected["token_type_ids"]
        assert from_saved.encode(text).ids == expected["input_ids"], text
    pair = ours.encode(TEXTS[0], TEXTS[2])
    assert pair.ids == theirs(TEXTS[0], TEXTS[2])["input_ids"]
    # jieba's words decide: BERT's WordPiece over the same vocabulary splits 天气 and 北京 apart.
    from bertconv.runtime.tokenization.files import wordpiece
    assert wordpiece(directory / "vocab.txt").encode(TEXTS[1]).ids != ours.encode(TEXTS[1]).ids


def test_transformers_5_from_a_vocab_txt_alone_splits_the_words_as_the_note_says(tmp_path):
    """transformers 5.24 hands JiebaPreTokenizer the vocab.txt's path for its vocabulary: `word in
    vocab` tests the path's text, so jieba's words are split; the note tells fill-mask's users."""
    needs("rjieba")
    transformers = needs("transformers")
    from bertconv.runtime.tokenization.select import open_tokenizer
    directory = _vocab_dir(tmp_path)
    from_vocab_txt = transformers.AutoTokenizer.from_pretrained(directory, tokenizer_type="roformer")
    assert from_vocab_txt.tokenize("北京") == ["北", "京"]
    assert _theirs(None, tmp_path).tokenize("北京") == ["北京"]
    assert any("path" in note for note in open_tokenizer(directory / "vocab.txt", family="roformer").notes)


def test_fill_mask_ranks_as_transformers_5s_pipeline(tmp_path):
    needs("rjieba")
    directory = tmp_path / "roformer"
    shutil.copytree(HF / "masked_lm", directory)
    transformers = needs("transformers")
    vocab = (directory / "vocab.txt").read_text(encoding="utf-8").splitlines()
    transformers.RoFormerTokenizer(vocab={token: i for i, token in enumerate(vocab)}).save_pretrained(directory)
    for text in ("今天[MASK]气非常好。", "北京[MASK]你, the cat sat"):
        assert_fill_mask_ranks_as_pipeline(directory, text)


def test_the_model_says_roformer_where_its_files_do_not(tmp_path):
    """A Google TF RoFormer names no model type beside it: the tree's family picks jieba's words."""
    needs("rjieba")
    vocab = tmp_path / "vocab.txt"  # the model's 40 rows
    vocab.write_text("".join(token + "\n" for token in _VOCAB[:40]), encoding="utf-8")
    result = run_in_process("fill-mask", FIXTURES / "roformer" / "tf" / "mlm", "今天[MASK]气", "--json",
                            "--vocab", vocab)
    assert result.exit_code == 0, result.stderr
    assert "jieba" in json.loads(result.stdout)["tokenizer"]["kind"]


def test_fill_mask_without_rjieba_refuses_naming_the_extra(monkeypatch):
    needs("tokenizers")  # without it, fill-mask names that extra first
    monkeypatch.setitem(sys.modules, "rjieba", None)  # import rjieba raises ImportError
    result = run_in_process("fill-mask", HF / "masked_lm", "今天[MASK]气")
    assert result.exit_code == 2 and "bertconv[roformer]" in result.stderr, result.stderr


def test_inspect_and_audit_name_the_family():
    result = run_in_process("audit", HF / "masked_lm", "--json")
    report = json.loads(result.stdout)
    assert result.exit_code == 0 and report["config"]["position_embedding_type"] == "rotary_interleaved"
    assert report["config"]["embedding_projection"] is True
    assert run_in_process("inspect", HF / "model").exit_code == 0
