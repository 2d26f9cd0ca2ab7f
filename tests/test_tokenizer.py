"""fill-mask's tokenizers (the `tokenizers` library, built from each file a checkpoint ships) against
transformers 5's own tokenizers for the same files, the oracle; the SentencePiece model reader
against the sentencepiece library."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import FIXTURES
from bertconv.errors import BadInput
from bertconv.runtime.tokenization import sentencepiece_model
from bertconv.runtime.tokenization.select import open_tokenizer
from bertconv.runtime.tokenization.files import MAX_CHARS_PER_WORD, decide_lower_case, looks_uncased

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

FIXTURE_VOCAB = FIXTURES / "runtime" / "pretraining" / "vocab.txt"
SPIECE = FIXTURES / "tokenizers" / "albert_spiece" / "spiece.model"
BPE = FIXTURES / "tokenizers" / "roberta_bpe"
UNK, CLS, SEP, MASK = "[UNK]", "[CLS]", "[SEP]", "[MASK]"

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
#: For the toy ALBERT and RoBERTa vocabularies: their corpus' words, digits and commas, symbols
#: that are user-defined pieces, full-width and ligature characters (the precompiled charsmap),
#: `` and '' (ALBERT's quote rule), runs of spaces, special tokens written in text.
FAMILY_TEXTS = TEXTS + [
    "the cat [MASK] on the mat.", "In 1990, Cats  (and) Dogs -- ``quoted''", "Ｃａｔ ﬁ café <unk> [CLS]",
    "  lead [MASK][MASK]x ", "the cat <mask> on", " x <s>y</s> <pad>", "Paris is the Capital of [MASK]",
]


@pytest.fixture
def bert_vocab(minilm) -> Path:
    """A real 30,522-token uncased BERT vocabulary (the MiniLM model's)."""
    return minilm / "vocab.txt"


def reference_bert(vocab: Path, lower_case: bool):
    return transformers.BertTokenizer(vocab=str(vocab), do_lower_case=lower_case)


@pytest.mark.parametrize("text", TEXTS)
def test_wordpiece_matches_transformers_on_a_real_uncased_vocab(bert_vocab, text):
    ours = open_tokenizer(bert_vocab)
    expected = reference_bert(bert_vocab, lower_case=True)(text)
    assert ours.lower_case
    encoding = ours.encode(text)
    assert encoding.ids == expected["input_ids"]
    assert encoding.type_ids == expected["token_type_ids"]


def test_wordpiece_equals_the_checkpoints_own_tokenizer_json(minilm):
    from_vocab, from_json = open_tokenizer(minilm / "vocab.txt"), open_tokenizer(minilm / "tokenizer.json")
    assert from_json.kind == "tokenizer.json" and from_vocab.kind == "WordPiece vocab.txt"
    for text in TEXTS:
        assert from_vocab.encode(text).ids == from_json.encode(text).ids, text


def test_pairs_get_type_ids_like_transformers(bert_vocab):
    expected = reference_bert(bert_vocab, True)("The man went to the store.", "He bought milk.")
    encoding = open_tokenizer(bert_vocab).encode("The man went to the store.", "He bought milk.")
    assert (encoding.ids, encoding.type_ids) == (expected["input_ids"], expected["token_type_ids"])


@pytest.fixture
def cased_vocab(tmp_path) -> Path:
    tokens = ["[PAD]", UNK, CLS, SEP, MASK, "The", "the", "Paris", "paris", "Caf", "##é", "caf", "##e", "é",
              ".", ",", "!", "中", "国", "##s", "Zürich", "zurich"]
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("text", ["The Paris café.", "the paris Café!", "Zürich zurich ZÜRICH", "中国s [MASK].",
                                  "paris[MASK].", "paris [mask]", "paris" * 21])
@pytest.mark.parametrize("lower_case", [False, True])
def test_wordpiece_matches_transformers_cased_and_uncased(cased_vocab, text, lower_case):
    ours = open_tokenizer(cased_vocab, lower_case=lower_case)
    assert ours.encode(text).ids == reference_bert(cased_vocab, lower_case)(text)["input_ids"]


def test_cased_keeps_case_and_accents_uncased_folds_them(cased_vocab):
    assert open_tokenizer(cased_vocab, lower_case=False).encode("The Café").tokens == [CLS, "The", "Caf", "##é", SEP]
    assert open_tokenizer(cased_vocab, lower_case=True).encode("The Café").tokens == [CLS, "the", "caf", "##e", SEP]


def test_casing_is_transformers_default_unless_tokenizer_config_says(cased_vocab):
    """A bare vocab.txt is lower-cased whatever its tokens, as transformers 5's BertTokenizer does;
    upper-case letters in it only bring a note."""
    tokens = cased_vocab.read_text(encoding="utf-8").split()
    assert not looks_uncased(tokens)
    assert decide_lower_case({}) == (True, "do_lower_case true, BertTokenizer's default")
    bare = open_tokenizer(cased_vocab)
    assert bare.lower_case is True and "--cased" in bare.notes[0]
    assert bare.settings == {"do_lower_case": True, "tokenize_chinese_chars": True, "strip_accents": None}
    (cased_vocab.parent / "tokenizer_config.json").write_text('{"do_lower_case": false}')
    assert decide_lower_case({"do_lower_case": False}) == (False, "do_lower_case in tokenizer_config.json")
    configured = open_tokenizer(cased_vocab)
    assert configured.lower_case is False and configured.notes == []
    assert looks_uncased(FIXTURE_VOCAB.read_text(encoding="utf-8").split())
    assert open_tokenizer(FIXTURE_VOCAB).notes == []  # nothing to say of an uncased vocabulary


@pytest.mark.parametrize("config", [None, {"do_lower_case": False}, {"strip_accents": False},
                                    {"do_lower_case": False, "strip_accents": True},
                                    {"tokenize_chinese_chars": False}])
def test_a_directory_tokenizes_as_transformers_builds_it_from_the_same_files(cased_vocab, config):
    """transformers 5's AutoTokenizer on the directory (a config.json says "bert"), the oracle."""
    directory = cased_vocab.parent
    (directory / "config.json").write_text('{"model_type": "bert"}')
    if config is not None:
        (directory / "tokenizer_config.json").write_text(json.dumps(config))
    reference = transformers.AutoTokenizer.from_pretrained(directory)
    ours = open_tokenizer(cased_vocab)
    for text in ["Paris is [MASK] Big", "The Paris Café.", "Zürich ZÜRICH zurich", "中国s [MASK].", *TEXTS]:
        assert ours.encode(text).ids == reference(text)["input_ids"], text


def test_a_vocab_without_the_special_tokens_is_refused(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("a\nb\nc\n", encoding="utf-8")
    with pytest.raises(BadInput, match=r"not a BERT vocabulary: the vocabulary lacks \[UNK\], \[CLS\], \[SEP\]"):
        open_tokenizer(path)


# --- ALBERT's spiece.model ---------------------------------------------------------------------


def test_the_sentencepiece_model_reads_as_the_sentencepiece_library_reads_it():
    sentencepiece = pytest.importorskip("sentencepiece")
    reference = sentencepiece.SentencePieceProcessor(model_file=str(SPIECE))
    model = sentencepiece_model.read(SPIECE)
    assert len(model.pieces) == reference.get_piece_size()
    for index, piece in enumerate(model.pieces):
        assert piece.piece == reference.id_to_piece(index)
        assert piece.score == reference.get_score(index)
        assert (piece.type == sentencepiece_model.CONTROL) == reference.is_control(index)
        assert (piece.type == sentencepiece_model.UNKNOWN) == reference.is_unknown(index)
    assert model.unk_id == reference.unk_id() and model.model_type == sentencepiece_model.UNIGRAM
    assert len(model.precompiled_charsmap) > 1000  # nmt_nfkc, compiled into the file


def test_a_broken_sentencepiece_model_is_bad_input(tmp_path):
    for content, message in ((b"\x0a\x05ab", "claims 5 bytes"), (b"\x10\x01", "trainer_spec .2. has wire type varint"), (b"", "no pieces")):
        (tmp_path / "spiece.model").write_bytes(content)
        with pytest.raises(BadInput, match=message):
            open_tokenizer(tmp_path / "spiece.model")


@pytest.mark.parametrize("text", FAMILY_TEXTS)
def test_unigram_matches_transformers_albert_tokenizer(tmp_path, text):
    shutil.copy(SPIECE, tmp_path / "spiece.model")
    reference = transformers.AlbertTokenizer.from_pretrained(tmp_path)
    encoding = open_tokenizer(tmp_path / "spiece.model").encode(text)
    expected = reference(text, return_token_type_ids=True)
    assert (encoding.ids, encoding.type_ids) == (expected["input_ids"], expected["token_type_ids"])


@pytest.mark.parametrize("settings", [{"do_lower_case": False}, {"keep_accents": True}])
def test_unigram_follows_the_settings_transformers_reads(tmp_path, settings):
    shutil.copy(SPIECE, tmp_path / "spiece.model")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(settings))
    reference = transformers.AlbertTokenizer.from_pretrained(tmp_path)
    ours = open_tokenizer(tmp_path / "spiece.model")
    for text in ("Café CATS [MASK]", "naïve Dogs"):
        assert ours.encode(text).ids == reference(text)["input_ids"], text


# --- RoBERTa's vocab.json + merges.txt -----------------------------------------------------------


def reference_roberta(directory: Path, **options):
    return transformers.RobertaTokenizer(vocab=str(directory / "vocab.json"), merges=str(directory / "merges.txt"),
                                         **options)


@pytest.mark.parametrize("text", FAMILY_TEXTS)
def test_byte_level_bpe_matches_transformers_roberta_tokenizer(text):
    # The mask takes the space before it, as RoBERTa's own tokenizer.json and fairseq have it.
    mask = tokenizers.AddedToken("<mask>", lstrip=True, special=True, normalized=False)
    ours = open_tokenizer(BPE / "vocab.json").encode(text)
    assert ours.ids == reference_roberta(BPE, mask_token=mask)(text.replace(MASK, "<mask>"))["input_ids"]


def test_byte_level_bpe_equals_the_tokenizer_json_it_was_saved_from():
    from_files = open_tokenizer(BPE / "vocab.json")
    from_json = open_tokenizer(FIXTURES / "family_hf" / "roberta" / "masked_lm" / "tokenizer.json")
    assert from_files.vocab == from_json.vocab
    for text in FAMILY_TEXTS:
        assert from_files.encode(text).ids == from_json.encode(text).ids, text


def test_byte_level_bpe_follows_tokenizer_config_like_transformers(tmp_path):
    shutil.copytree(BPE, tmp_path, dirs_exist_ok=True)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "add_prefix_space": True,
        "added_tokens_decoder": {"4": {"content": "<mask>", "lstrip": False, "rstrip": False, "normalized": False,
                                       "single_word": False, "special": True}}}))
    reference = transformers.RobertaTokenizer.from_pretrained(tmp_path)
    ours = open_tokenizer(tmp_path / "vocab.json")
    for text in ("the cat <mask> on the mat", "cats and dogs"):
        assert ours.encode(text).ids == reference(text)["input_ids"], text
    assert "\u0120" in ours.encode("the cat <mask>").tokens  # the space before the mask stays its own token


def test_a_vocab_json_without_merges_is_bad_input(tmp_path):
    shutil.copy(BPE / "vocab.json", tmp_path / "vocab.json")
    with pytest.raises(BadInput, match="merges.txt"):
        open_tokenizer(tmp_path / "vocab.json")
