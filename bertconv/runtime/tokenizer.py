"""BERT's tokenizer, standard library only: basic tokenization, then greedy WordPiece.

The same steps as google-research/bert tokenization.py and transformers' `BertTokenizer`
(tokenizers' BertNormalizer + BertPreTokenizer + WordPiece):
  1. special tokens ([MASK], [CLS], ...) written in the text are kept whole, case and all;
  2. clean-up: NUL, U+FFFD and control characters dropped, every whitespace becomes a space;
  3. each CJK ideograph becomes a token of its own;
  4. uncased vocabularies: lower-case, then strip accents (NFD, drop combining marks);
  5. split on whitespace, then around every punctuation character;
  6. WordPiece: longest vocabulary prefix first, continuations spelled "##piece"; a word with
     no full cover, or longer than MAX_CHARS_PER_WORD, becomes [UNK].
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from ..errors import bad_input

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
#: Tokens kept whole when they appear in text, never lower-cased or split (transformers' special
#: tokens for BERT; google-research/bert's tokenizer splits them, which is why its pre-training
#: data inserted [MASK] by id, not by text).
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
#: A word longer than this becomes [UNK] without trying WordPiece: transformers' and tokenizers'
#: `max_input_chars_per_word` (google-research/bert's WordpieceTokenizer uses 200).
MAX_CHARS_PER_WORD = 100
#: How WordPiece spells a piece that continues a word.
CONTINUATION_PREFIX = "##"
#: Beside a vocab.txt, transformers' tokenizer settings, whose `do_lower_case` decides casing.
TOKENIZER_CONFIG = "tokenizer_config.json"

#: Code-point blocks whose characters are each one token: CJK Unified Ideographs and extensions A-E,
#: compatibility ideographs and supplement (google-research/bert `_is_chinese_char`). Hangul and
#: kana are not among them: they are split like other letters.
CJK_RANGES = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)
#: ASCII symbols that BERT splits as punctuation although Unicode calls some of them symbols
#: ("$", "+", "<", "^", "`", ...): every non-alphanumeric printable ASCII character.
_ASCII_PUNCTUATION = frozenset(chr(c) for r in ((33, 47), (58, 64), (91, 96), (123, 126)) for c in range(r[0], r[1] + 1))


def is_cjk(char: str) -> bool:
    code = ord(char)
    return any(low <= code <= high for low, high in CJK_RANGES)


def is_whitespace(char: str) -> bool:
    return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def is_control(char: str) -> bool:
    """Control and format characters (categories C*), except tab, newline and return (whitespace)."""
    return char not in "\t\n\r" and unicodedata.category(char).startswith("C")


def is_punctuation(char: str) -> bool:
    return char in _ASCII_PUNCTUATION or unicodedata.category(char).startswith("P")


@dataclass(frozen=True)
class Encoding:
    """A tokenized text: [CLS] tokens [SEP] (and the second segment's tokens [SEP]).

    Attributes:
      tokens, ids: the wordpieces and their vocabulary ids, special tokens included.
      type_ids: 0 for [CLS] and the first segment with its [SEP], 1 for the second segment.
    """

    tokens: list[str]
    ids: list[int]
    type_ids: list[int]


class WordPieceTokenizer:
    """BERT's tokenizer over a vocabulary (one token per line of a vocab.txt, id = line number).

    Attributes:
      vocab: token -> id.
      tokens: id -> token.
      lower_case: whether text is lower-cased and stripped of accents before lookup.
      casing: why `lower_case` is what it is ("given", or what `decide_lower_case` found).
    """

    #: The token fill-mask predicts at.
    mask_token = MASK

    def __init__(self, tokens: list[str], *, lower_case: bool, casing: str = "given"):
        self.tokens = list(tokens)
        self.casing = casing
        # Later lines win for duplicate tokens, as in both reference tokenizers.
        self.vocab = {token: index for index, token in enumerate(self.tokens)}
        self.lower_case = lower_case
        missing = [t for t in (UNK, CLS, SEP) if t not in self.vocab]
        if missing:
            raise ValueError(f"the vocabulary lacks {', '.join(missing)}")
        specials = sorted((t for t in SPECIAL_TOKENS if t in self.vocab), key=len, reverse=True)
        self._special = re.compile("(" + "|".join(map(re.escape, specials)) + ")")

    @classmethod
    def from_file(cls, path: Path, *, lower_case: bool | None = None) -> "WordPieceTokenizer":
        """Read a vocab.txt. `lower_case` None decides it as `decide_lower_case` does."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise bad_input(path, "vocabulary file does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise bad_input(path, f"cannot read the vocabulary as UTF-8 text: {exc}") from None
        tokens = text.split("\n")
        if tokens and tokens[-1] == "":
            tokens.pop()
        tokens = [t.rstrip("\r") for t in tokens]
        casing = "given"
        if lower_case is None:
            lower_case, casing = decide_lower_case(path, tokens)
        try:
            return cls(tokens, lower_case=lower_case, casing=casing)
        except ValueError as exc:
            raise bad_input(path, f"not a BERT vocabulary: {exc}") from None

    # --- tokenizing ------------------------------------------------------------------------

    def tokenize(self, text: str) -> list[str]:
        """The wordpieces of `text`, special tokens kept whole."""
        pieces: list[str] = []
        # Splitting on a capturing group alternates text and special tokens: text at even indices.
        for index, chunk in enumerate(self._special.split(text)):
            if index % 2:
                pieces.append(chunk)
                continue
            for word in self.basic_tokenize(chunk):
                pieces.extend(self.wordpiece(word))
        return pieces

    def basic_tokenize(self, text: str) -> list[str]:
        """Steps 2-5: clean-up, CJK split, lower-casing and accents, whitespace and punctuation."""
        cleaned = []
        for char in text:
            if char in ("\x00", "\ufffd") or is_control(char):
                continue
            if is_whitespace(char):
                cleaned.append(" ")
            elif is_cjk(char):
                cleaned.append(f" {char} ")
            else:
                cleaned.append(char)
        words = []
        for word in "".join(cleaned).split():
            if self.lower_case:
                word = strip_accents(word.lower())
            words.extend(split_punctuation(word))
        return words

    def wordpiece(self, word: str) -> list[str]:
        """Step 6: the greedy longest-match-first cover of `word`, or [UNK]."""
        if len(word) > MAX_CHARS_PER_WORD:
            return [UNK]
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else CONTINUATION_PREFIX + word[start:end]
                if piece in self.vocab:
                    break
                end -= 1
            else:
                return [UNK]
            pieces.append(piece)
            start = end
        return pieces

    def encode(self, text: str, pair: str | None = None) -> Encoding:
        """[CLS] text [SEP] (pair [SEP]) as tokens, ids and token-type ids."""
        first = [CLS, *self.tokenize(text), SEP]
        second = [*self.tokenize(pair), SEP] if pair is not None else []
        tokens = first + second
        return Encoding(tokens, [self.vocab[t] for t in tokens], [0] * len(first) + [1] * len(second))

    def token(self, index: int) -> str | None:
        """The token of an id, or None for an id past the end of the vocabulary file."""
        return self.tokens[index] if 0 <= index < len(self.tokens) else None


def strip_accents(text: str) -> str:
    """NFD, then drop combining marks (category Mn): "café" -> "cafe"."""
    return "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")


def split_punctuation(word: str) -> list[str]:
    """Every punctuation character on its own: "don't!" -> ["don", "'", "t", "!"]."""
    out: list[str] = []
    current = ""
    for char in word:
        if is_punctuation(char):
            if current:
                out.append(current)
            out.append(char)
            current = ""
        else:
            current += char
    if current:
        out.append(current)
    return out


def looks_uncased(tokens: list[str]) -> bool:
    """No upper-case letter in any token but the bracketed special ones ([CLS], [unused0], ...)."""
    return not any(any(c.isupper() for c in t) for t in tokens if not (t.startswith("[") and t.endswith("]")))


def decide_lower_case(vocab_path: Path, tokens: list[str]) -> tuple[bool, str]:
    """(lower_case, why): `do_lower_case` of a tokenizer_config.json beside the vocabulary, else
    whether the vocabulary looks uncased (`looks_uncased`)."""
    settings = Path(vocab_path).parent / TOKENIZER_CONFIG
    if settings.is_file():
        try:
            value = json.loads(settings.read_text(encoding="utf-8")).get("do_lower_case")
        except (OSError, UnicodeDecodeError, ValueError, AttributeError):
            value = None
        if isinstance(value, bool):
            return value, f"do_lower_case in {settings.name}"
    if looks_uncased(tokens):
        return True, "no upper-case letters in the vocabulary"
    return False, "upper-case letters in the vocabulary"
