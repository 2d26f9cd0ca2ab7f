"""bertconv's BERT tokenizer against transformers' BertTokenizer (tokenizers' WordPiece), the oracle."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertconv.errors import BadInput
from bertconv.runtime.tokenizer import (
    CLS, MASK, MAX_CHARS_PER_WORD, SEP, UNK, WordPieceTokenizer, decide_lower_case, looks_uncased,
)

FIXTURE_VOCAB = Path(__file__).resolve().parents[1] / "fixtures" / "runtime" / "pretraining" / "vocab.txt"

#: Texts that exercise each rule: accents, CJK, punctuation and ASCII symbols, special tokens in
#: odd places, control characters and odd whitespace, unknown words, over-long words.
TEXTS = [
    "The cat sat on the mat.",
    "Hello, WORLD!! It's 3:45 p.m. -- isn't it?",
    "Café naïve résumé Ångström Zürich façade",
    "北京是中国的首都，人口众多。Tokyo 東京",
    "the capital of France is [MASK].",
    "[MASK][MASK] glued[MASK]words and [CLS] [SEP] inside",
    "lower [mask] is not special",
    "tabs\tand\nnewlines\r\nand\u00a0nbsp\u3000ideographic space",
    "control\x00chars\x07 and \ufffd replacement \u200b zero width",
    "symbols $100 + 5% ^caret `tick` ~tilde @home #tag &amp; <tag>",
    "unaffable unbelievably antidisestablishmentarianism",
    "x" * (MAX_CHARS_PER_WORD + 1) + " ok",
    "x" * MAX_CHARS_PER_WORD,
    "emoji 🙂 and hangul 한국어 and kana カタカナ",
    "",
]


@pytest.fixture
def bert_vocab(minilm) -> Path:
    """A real 30,522-token uncased BERT vocabulary (the MiniLM model's)."""
    return minilm / "vocab.txt"


def reference_tokenizer(vocab: Path, lower_case: bool):
    transformers = pytest.importorskip("transformers")
    return transformers.BertTokenizer(vocab=str(vocab), do_lower_case=lower_case)


@pytest.mark.parametrize("text", TEXTS)
def test_matches_transformers_on_a_real_uncased_vocab(bert_vocab, text):
    ours = WordPieceTokenizer.from_file(bert_vocab)
    reference = reference_tokenizer(bert_vocab, lower_case=True)
    assert ours.lower_case
    expected = reference(text)
    encoding = ours.encode(text)
    assert encoding.ids == expected["input_ids"]
    assert encoding.type_ids == expected["token_type_ids"]


def test_pairs_get_type_ids_like_transformers(bert_vocab):
    ours = WordPieceTokenizer.from_file(bert_vocab)
    reference = reference_tokenizer(bert_vocab, lower_case=True)
    expected = reference("The man went to the store.", "He bought milk.")
    encoding = ours.encode("The man went to the store.", "He bought milk.")
    assert (encoding.ids, encoding.type_ids) == (expected["input_ids"], expected["token_type_ids"])


@pytest.fixture
def cased_vocab(tmp_path) -> Path:
    tokens = ["[PAD]", UNK, CLS, SEP, MASK, "The", "the", "Paris", "paris", "Caf", "##é", "caf", "##e", "é",
              ".", ",", "!", "中", "国", "##s", "Zürich", "zurich"]
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("text", ["The Paris café.", "the paris Café!", "Zürich zurich ZÜRICH", "中国s [MASK]."])
@pytest.mark.parametrize("lower_case", [False, True])
def test_matches_transformers_cased_and_uncased(cased_vocab, text, lower_case):
    ours = WordPieceTokenizer.from_file(cased_vocab, lower_case=lower_case)
    reference = reference_tokenizer(cased_vocab, lower_case=lower_case)
    assert ours.encode(text).ids == reference(text)["input_ids"]


def test_cased_keeps_case_and_accents_uncased_folds_them(cased_vocab):
    cased = WordPieceTokenizer.from_file(cased_vocab, lower_case=False)
    uncased = WordPieceTokenizer.from_file(cased_vocab, lower_case=True)
    assert cased.tokenize("The Café") == ["The", "Caf", "##é"]
    assert uncased.tokenize("The Café") == ["the", "caf", "##e"]


def test_cjk_characters_are_single_tokens(cased_vocab):
    tokenizer = WordPieceTokenizer.from_file(cased_vocab, lower_case=True)
    assert tokenizer.basic_tokenize("中国人abc") == ["中", "国", "人", "abc"]


def test_special_tokens_are_kept_whole_and_case_sensitive(cased_vocab):
    tokenizer = WordPieceTokenizer.from_file(cased_vocab, lower_case=True)
    assert tokenizer.tokenize("paris[MASK].") == ["paris", MASK, "."]
    assert MASK not in tokenizer.tokenize("paris [mask]")


def test_overlong_words_become_unk(cased_vocab):
    tokenizer = WordPieceTokenizer.from_file(cased_vocab, lower_case=True)
    assert tokenizer.wordpiece("paris" * 21) == [UNK]
    assert tokenizer.wordpiece("zzz") == [UNK]


def test_casing_is_decided_from_tokenizer_config_then_vocab(tmp_path, cased_vocab):
    tokens = cased_vocab.read_text(encoding="utf-8").split()
    assert not looks_uncased(tokens)
    assert decide_lower_case(cased_vocab, tokens)[0] is False
    (cased_vocab.parent / "tokenizer_config.json").write_text('{"do_lower_case": true}')
    assert decide_lower_case(cased_vocab, tokens) == (True, "do_lower_case in tokenizer_config.json")
    assert looks_uncased(FIXTURE_VOCAB.read_text(encoding="utf-8").split())


def test_a_vocab_without_the_special_tokens_is_refused(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("a\nb\nc\n", encoding="utf-8")
    with pytest.raises(BadInput, match=r"not a BERT vocabulary: the vocabulary lacks \[UNK\], \[CLS\], \[SEP\]"):
        WordPieceTokenizer.from_file(path)
