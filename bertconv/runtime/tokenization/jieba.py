"""RoFormer's tokenizer as transformers 5's `RoFormerTokenizer` (= `RoFormerTokenizerFast`) builds it
over a vocab.txt: BERT's WordPiece vocabulary, with words split by jieba before WordPiece.

    normalizer      BertNormalizer: clean-up, lower-casing and accents as BERT's, CJK characters
                    *not* set apart (jieba needs them together)
    pre-tokenizer   jieba's words (rjieba, `hmm=False`); a word the vocabulary holds stays whole
                    ("天气"), any other is split as BERT splits CJK characters and whitespace, with
                    transformers' offsets (its `JiebaPreTokenizer`, reproduced line for line)
    model           WordPiece ("##" continuations, [UNK]); [CLS] A [SEP] (B [SEP])

No punctuation is split apart beyond what jieba does. jieba is rjieba (jieba-rs), an optional extra
(`pip install 'bertconv[roformer]'`), as in transformers; without it fill-mask refuses a RoFormer,
naming it.

transformers 5.24 builds this from a tokenizer.json, its vocabulary a dict. From a vocab.txt alone it
hands the pre-tokenizer the file's path as its vocabulary, so that `word in vocab` tests the path's
text and jieba's words are split after all: its ids then differ from these (and from transformers
4's). A note says so.
"""

from __future__ import annotations

from pathlib import Path

from ... import families
from ...errors import BadInput, bad_input
from . import files as tokenizer_files
from .tokenizer import VOCAB_TXT, Tokenizer, library, read_json, settings_beside

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

#: transformers' name for the tokenizer this module builds (a tokenizer_config.json's `tokenizer_class`).
TOKENIZER_CLASS = "RoFormerTokenizer"
INSTALL_HINT = "pip install 'bertconv[roformer]'"
VOCAB_TXT_NOTE = ("{path}: split as RoFormerTokenizer splits with its vocabulary (jieba's words kept whole where the "
                  "vocabulary holds them), as transformers 5 does from a tokenizer.json; transformers 5.24 loading "
                  "this vocab.txt alone tests the words against the file's path instead, and splits them")


def rjieba() -> Any:
    """The `rjieba` module, or BadInput saying which extra installs it."""
    try:
        import rjieba
    except ImportError:
        raise BadInput(f"RoFormer's tokenizer splits Chinese text into words with jieba (rjieba, as transformers' "
                       f"RoFormerTokenizer), which is not installed: install the roformer extra ({INSTALL_HINT})"
                       ) from None
    return rjieba


class _JiebaWords:
    """transformers 5's `JiebaPreTokenizer`: jieba's words of a normalized string, each word the
    vocabulary holds whole, any other split at whitespace after setting CJK characters apart; a
    part's offsets start where the word does and advance by the parts' lengths."""

    def __init__(self, vocab: dict[str, int], tokenizers: Any, jieba: Any):
        self.vocab, self.jieba = vocab, jieba
        self.apart = tokenizers.normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=True,
                                                           strip_accents=False, lowercase=False)

    def split(self, _: int, normalized: Any) -> list[Any]:
        pieces = []
        for word, start, end in self.jieba.tokenize(str(normalized), hmm=False):
            if word in self.vocab:
                pieces.append(normalized[start:end])
                continue
            for part in self.apart.normalize_str(word).split():
                pieces.append(normalized[start:start + len(part)])
                start += len(part)
        return pieces

    def pre_tokenize(self, pretokenized: Any) -> None:
        pretokenized.split(self.split)


def is_roformer(path: Path, family: str | None) -> bool:
    """Whether the tokenizer file at `path` is to be read as RoFormerTokenizer reads it: the
    `tokenizer_class` of the tokenizer_config.json beside it says so, or, naming none, the model's
    family does (a RoFormer's vocab.txt is BERT's file, and only the model says it is split by jieba)."""
    named = settings_beside(path).get("tokenizer_class")
    if isinstance(named, str):
        return named.removesuffix("Fast") == TOKENIZER_CLASS
    declared = families.named(family) if family is not None else None
    return declared is not None and declared.tokenizer_class == TOKENIZER_CLASS


def roformer_vocabulary(path: Path) -> tuple[Path, list[str] | None]:
    """What RoFormerTokenizer builds from, for a tokenizer file at `path`: transformers 5 builds its
    pipeline (jieba included) from the vocabulary alone, whatever a tokenizer.json says (its saved
    pre-tokenizer is BERT's: jieba cannot be saved). The vocab.txt beside a tokenizer.json, else
    the tokenizer.json's own WordPiece vocabulary (what `save_pretrained` leaves), as tokens by id."""
    if path.suffix != ".json" or (path.parent / VOCAB_TXT).is_file():
        return (path if path.suffix != ".json" else path.parent / VOCAB_TXT), None
    model = read_json(path).get("model")
    vocab = model.get("vocab") if isinstance(model, dict) and model.get("type") == "WordPiece" else None
    if not isinstance(vocab, dict) or sorted(vocab.values()) != list(range(len(vocab))):
        raise bad_input(path, f"is a RoFormer's tokenizer.json without a WordPiece vocabulary of ids 0..N-1, and "
                              f"no {VOCAB_TXT} is beside it: pass one with --vocab")
    return path, sorted(vocab, key=vocab.__getitem__)


def roformer_wordpiece(path: Path, *, lower_case: bool | None = None) -> Tokenizer:
    """RoFormerTokenizer over the vocabulary of the file at `path` (`roformer_vocabulary`), with the
    settings beside it as BERT's WordPiece takes them (`files.wordpiece`: casing, accents, special
    tokens)."""
    tokenizers, jieba = library(), rjieba()
    path, tokens = roformer_vocabulary(path)
    bert = tokenizer_files.wordpiece(path, lower_case=lower_case, tokens=tokens)
    backend = bert.backend
    backend.normalizer = tokenizers.normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=False, strip_accents=bert.settings["strip_accents"],
        lowercase=bert.lower_case)
    backend.pre_tokenizer = tokenizers.pre_tokenizers.PreTokenizer.custom(
        _JiebaWords(backend.get_vocab(), tokenizers, jieba))
    settings = {key: value for key, value in bert.settings.items() if key != "tokenize_chinese_chars"}
    notes = [*bert.notes, *([VOCAB_TXT_NOTE.format(path=path)] if tokens is None else [])]
    kind = "RoFormer WordPiece " + ("vocab.txt" if tokens is None else "tokenizer.json vocabulary") + " (jieba words)"
    return Tokenizer(backend, source=path, kind=kind,
                     mask_token=bert.mask_token, pad_token=bert.token(bert.pad_id) if bert.pad_id is not None else None,
                     lower_case=bert.lower_case, casing=bert.casing, settings=settings, notes=notes)
