"""Which tokenizer a checkpoint ships, and opening it: the one module that knows every kind of
tokenizer file, so that the builders (`files`, `fairseq`) need not know each other's.
"""

from __future__ import annotations

from pathlib import Path

from ...errors import bad_input
from . import deberta as tokenizer_deberta
from . import fairseq as tokenizer_fairseq
from . import files as tokenizer_files
from . import jieba as tokenizer_jieba
from .tokenizer import (
    MERGES_TXT, SENTENCEPIECE_BPE_MODEL, SPIECE_MODEL, TOKENIZER_JSON, VOCAB_JSON, VOCAB_TXT, Tokenizer, library,
    read_json,
)


def find(directory: Path, vocab: Path | None = None) -> Path | None:
    """The tokenizer file beside a checkpoint, in the module's order; `vocab` is a vocab.txt the
    checkpoint's format knows of elsewhere (a TF-Hub SavedModel's assets/vocab.txt)."""
    directory = Path(directory)
    candidates = [directory / TOKENIZER_JSON, vocab, directory / VOCAB_TXT]
    if (directory / MERGES_TXT).is_file():
        candidates.append(directory / VOCAB_JSON)
    candidates += [directory / SPIECE_MODEL, directory / SENTENCEPIECE_BPE_MODEL, directory / tokenizer_deberta.SPM_MODEL]
    return next((path for path in candidates if path is not None and path.is_file()), None)


def open_tokenizer(path: Path, *, lower_case: bool | None = None, family: str | None = None) -> Tokenizer:
    """The tokenizer of the file at `path`: a tokenizer.json, a vocab.json (with merges.txt beside
    it), a SentencePiece model (`*.model`: XLM-R's or CamemBERT's when the settings or config
    beside it say so, else ALBERT's) or a vocab.txt (any other name). `lower_case` overrides
    the casing of a vocab.txt or SentencePiece model (None: as their settings or vocabulary say).
    `family`, the model's, says what its files cannot: a RoFormer's words are jieba's.
    """
    path = Path(path)
    if not path.is_file():
        raise bad_input(path, "tokenizer file does not exist")
    library()
    if path.suffix in (".json", ".txt") and tokenizer_jieba.is_roformer(path, family):
        return tokenizer_jieba.roformer_wordpiece(path, lower_case=lower_case)
    if path.suffix == ".model":
        layout = tokenizer_fairseq.layout_beside(path)
        if layout is not None:
            if lower_case is not None:
                raise bad_input(path, f"--cased/--uncased do not apply to {layout.tokenizer_class}'s vocabulary, "
                                      f"which keeps case")
            return tokenizer_fairseq.fairseq_sentencepiece(path, layout)
        if tokenizer_deberta.is_deberta_model(path):
            return tokenizer_deberta.deberta_sentencepiece(path, lower_case=lower_case)
        return tokenizer_files.sentencepiece_unigram(path, lower_case=lower_case)
    if path.suffix == ".json":
        if _is_token_map(path):
            if lower_case is not None:
                raise bad_input(path, "--cased/--uncased do not apply to a byte-level BPE, which keeps case")
            return tokenizer_files.byte_level_bpe(path, path.parent / MERGES_TXT)
        if lower_case is not None:
            raise bad_input(path, "--cased/--uncased apply to a vocab.txt or spiece.model; a tokenizer.json's own "
                                  "normalizer decides the casing")
        return tokenizer_files.tokenizer_json(path)
    if tokenizer_files.is_esm_vocab(path):
        if lower_case is not None:
            raise bad_input(path, "--cased/--uncased do not apply to ESM's vocab.txt, whose tokens are letters as they are")
        return tokenizer_files.esm_vocab(path)
    return tokenizer_files.wordpiece(path, lower_case=lower_case)


def _is_token_map(path: Path) -> bool:
    """Whether a .json file is a vocab.json (a flat token -> id map) rather than a tokenizer.json."""
    content = read_json(path)
    return isinstance(content, dict) and "model" not in content
