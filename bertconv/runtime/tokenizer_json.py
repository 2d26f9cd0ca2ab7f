"""A Hugging Face `tokenizer.json` as fill-mask's tokenizer: byte-level BPE (RoBERTa), Unigram
(ALBERT's SentencePiece, converted), or WordPiece, whatever the file describes.

The file is run by the `tokenizers` library (an optional extra, as torch is), which implements
every model, normalizer, pre-tokenizer and post-processor such a file names; bertconv does not
re-implement them. The tokenizer adds the special tokens its post-processor names (`<s> ... </s>`
for RoBERTa, `[CLS] ... [SEP]` for ALBERT), exactly as transformers' fast tokenizers do.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import BadInput, bad_input
from .tokenizer import MASK, Encoding

TOKENIZER_JSON = "tokenizer.json"
#: The mask tokens of the BERT family's tokenizers: BERT, ALBERT and ELECTRA's "[MASK]",
#: RoBERTa's (fairseq's) "<mask>".
MASK_TOKENS = (MASK, "<mask>")


class JsonTokenizer:
    """The tokenizer a `tokenizer.json` describes, with WordPieceTokenizer's interface for fill-mask.

    Attributes:
      path: the tokenizer.json.
      vocab: token -> id (added tokens included); tokens: id -> token (None for an unused id).
      mask_token: the vocabulary's mask token ("[MASK]" or "<mask>").
    """

    def __init__(self, path: Path):
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise BadInput("reading a tokenizer.json needs the tokenizers library: pip install tokenizers "
                           "(or pass --vocab vocab.txt for a WordPiece vocabulary)") from None
        self.path = Path(path)
        try:
            self._tokenizer = Tokenizer.from_file(str(self.path))
        except Exception as exc:  # the library raises its own exception types, with the reason
            raise bad_input(self.path, f"not a tokenizer.json the tokenizers library reads: {exc}") from None
        self.vocab = self._tokenizer.get_vocab(with_added_tokens=True)
        size = max(self.vocab.values(), default=-1) + 1
        self.tokens: list[str | None] = [None] * size
        for token, index in self.vocab.items():
            self.tokens[index] = token
        masks = [token for token in MASK_TOKENS if token in self.vocab]
        if not masks:
            raise bad_input(self.path, f"the tokenizer has no mask token ({' or '.join(MASK_TOKENS)})")
        self.mask_token = masks[0]

    @property
    def lower_case(self) -> None:
        """Casing is the tokenizer.json's normalizer's business, not a flag."""
        return None

    def encode(self, text: str, pair: str | None = None) -> Encoding:
        """The text with the special tokens the tokenizer's post-processor adds. "[MASK]" in the
        text stands for the vocabulary's own mask token (RoBERTa's "<mask>")."""
        if self.mask_token != MASK:
            text = text.replace(MASK, self.mask_token)
            pair = pair.replace(MASK, self.mask_token) if pair is not None else None
        encoding = self._tokenizer.encode(text, pair, add_special_tokens=True)
        return Encoding(list(encoding.tokens), list(encoding.ids), list(encoding.type_ids))

    def token(self, index: int) -> str | None:
        return self.tokens[index] if 0 <= index < len(self.tokens) else None
