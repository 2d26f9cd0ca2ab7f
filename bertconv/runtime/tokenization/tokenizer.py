"""fill-mask's tokenizer: the `tokenizers` library (the Rust tokenizers transformers runs), read from
or built out of whatever tokenizer files a checkpoint ships.

Beside a checkpoint, the first of these is used (`find`):

    tokenizer.json             any Hugging Face tokenizer, as the file describes it
    vocab.txt                  BERT's WordPiece, as transformers' BertTokenizer builds it
    vocab.json + merges.txt    RoBERTa's byte-level BPE, as transformers' RobertaTokenizer builds it
    spiece.model               ALBERT's SentencePiece Unigram, as transformers' AlbertTokenizer builds it
    sentencepiece.bpe.model    XLM-R's or CamemBERT's SentencePiece vocabulary in fairseq's dictionary
                               order, as transformers' XLMRobertaTokenizer / CamembertTokenizer build it

`tokenizer_files` builds the last four; a `tokenizer_config.json` beside them gives the settings
transformers reads there (casing, prefix space, the special tokens). The library is an optional
extra (`pip install 'bertconv[fill-mask]'`), as torch is; without it fill-mask says so (exit 2).
"""

from __future__ import annotations

from pathlib import Path

from ... import json_text
from ...errors import BadInput, bad_input
from ...records import record

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import Any


TOKENIZER_JSON = "tokenizer.json"
VOCAB_TXT = "vocab.txt"
VOCAB_JSON = "vocab.json"
MERGES_TXT = "merges.txt"
SPIECE_MODEL = "spiece.model"
SENTENCEPIECE_BPE_MODEL = "sentencepiece.bpe.model"
#: transformers' tokenizer settings, beside the vocabulary files.
TOKENIZER_CONFIG = "tokenizer_config.json"
#: How the tokenizers library is installed with bertconv.
INSTALL_HINT = "pip install 'bertconv[fill-mask]'"
#: How a user writes the mask in any text: BERT's token. A vocabulary with another mask token
#: (RoBERTa's "<mask>") takes it for its own.
MASK = "[MASK]"


@record
class Encoding:
    """A tokenized text, with the special tokens its tokenizer adds ([CLS] text [SEP] for BERT and
    ALBERT, <s> text </s> for RoBERTa).

    Attributes:
      tokens, ids: the tokens and their vocabulary ids.
      type_ids: 0 for the first segment (with its special tokens), 1 for the second.
    """

    tokens: list[str]
    ids: list[int]
    type_ids: list[int]


def library() -> Any:
    """The `tokenizers` module, or BadInput saying which extra installs it."""
    try:
        import tokenizers
    except ImportError:
        raise BadInput(f"fill-mask tokenizes with the tokenizers library, which is not installed: install the "
                       f"fill-mask extra ({INSTALL_HINT})") from None
    return tokenizers


class Tokenizer:
    """A `tokenizers.Tokenizer` with what fill-mask asks of it.

    Attributes:
      source: the file it was read or built from (a vocab.json, with the merges.txt beside it).
      kind: what that file is, for people ("tokenizer.json", "WordPiece vocab.txt", ...).
      vocab: token -> id, added tokens included; tokens: id -> token (None for an id no token has).
      mask_token, mask_id: the vocabulary's mask token ("[MASK]", RoBERTa's "<mask>").
      pad_id: the padding token's id, or None.
      lower_case: whether text is lower-cased (None: the tokenizer.json's normalizer decides, or
        a byte-level BPE, which keeps case); casing: why.
      settings: the transformers settings it was built with (`do_lower_case`, `strip_accents`, ...;
        empty for a tokenizer.json, which holds its own).
      notes: what its user should hear about how it was built.
    """

    def __init__(self, backend: Any, *, source: Path, kind: str, mask_token: str, pad_token: str | None,
                 lower_case: bool | None = None, casing: str | None = None, settings: dict | None = None,
                 notes: list[str] | None = None):
        self.backend = backend
        self.source = Path(source)
        self.kind = kind
        self.vocab: dict[str, int] = backend.get_vocab(with_added_tokens=True)
        self.tokens: list[str | None] = [None] * (max(self.vocab.values(), default=-1) + 1)
        for token, index in self.vocab.items():
            self.tokens[index] = token
        if mask_token not in self.vocab:
            raise bad_input(self.source, f"the tokenizer has no mask token {mask_token}")
        self.mask_token, self.mask_id = mask_token, self.vocab[mask_token]
        self.pad_id = self.vocab.get(pad_token) if pad_token is not None else None
        self.lower_case, self.casing = lower_case, casing
        self.settings, self.notes = dict(settings or {}), list(notes or [])

    def encode(self, text: str, pair: str | None = None) -> Encoding:
        """The text (and pair) with the special tokens the tokenizer adds."""
        encoding = self.backend.encode(self._own_mask(text), self._own_mask(pair) if pair is not None else None,
                                       add_special_tokens=True)
        return Encoding(list(encoding.tokens), list(encoding.ids), list(encoding.type_ids))

    def encode_batch(self, texts: list[str]) -> list[Encoding]:
        """`encode` of each text (the library runs them in parallel)."""
        encodings = self.backend.encode_batch([self._own_mask(text) for text in texts], add_special_tokens=True)
        return [Encoding(list(e.tokens), list(e.ids), list(e.type_ids)) for e in encodings]

    def token(self, index: int) -> str | None:
        return self.tokens[index] if 0 <= index < len(self.tokens) else None

    def _own_mask(self, text: str) -> str:
        """BERT's "[MASK]" written in a text stands for the vocabulary's own mask token."""
        return text.replace(MASK, self.mask_token) if self.mask_token != MASK else text


def read_json(path: Path) -> Any:
    try:
        return json_text.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise bad_input(path, f"cannot read it as JSON: {exc}") from None


def settings_beside(path: Path) -> dict:
    """The tokenizer_config.json beside the file at `path`, or {} when there is none."""
    config = Path(path).parent / TOKENIZER_CONFIG
    if not config.is_file():
        return {}
    content = read_json(config)
    if not isinstance(content, dict):
        raise bad_input(config, "expected a JSON object of tokenizer settings")
    return content
