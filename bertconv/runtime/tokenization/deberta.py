"""DeBERTa-v2/v3's SentencePiece tokenizer (`spm.model`), as transformers 5's `DebertaV2Tokenizer`
builds it from the file: a Unigram over the pieces and their scores, normalized by runs of
whitespace (and each newline, carriage return or tab) -> one space, NFC, right-stripped, and
lower-cased only with `do_lower_case` (default false); no precompiled charsmap. Split on
punctuation with `split_by_punct`, then Metaspace ("▁" before every word with `add_prefix_space`,
the default, else before the first); [CLS] A [SEP] (B [SEP]). The special tokens are the
vocabulary's pieces where it has them; one it lacks (DeBERTa-v3's [MASK], 128000 in
deberta-v3-base) is added after the pieces.
"""

from __future__ import annotations

from pathlib import Path

from . import sentencepiece_model as spm
from .files import METASPACE, _specials
from .tokenizer import Tokenizer, library, settings_beside

#: The file transformers names DeBERTa-v2's SentencePiece model, and its tokenizer class.
SPM_MODEL = "spm.model"
TOKENIZER_CLASS = "DebertaV2Tokenizer"
#: Its special tokens, in the order transformers adds them (`SPECIAL_TOKENS_ATTRIBUTES`).
DEBERTA_SPECIALS = {"bos_token": "[CLS]", "eos_token": "[SEP]", "unk_token": "[UNK]", "sep_token": "[SEP]",
                    "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]"}
#: `DebertaV2Tokenizer`'s unknown id when the vocabulary has no ([UNK], 0.0) piece.
DEFAULT_UNK_ID = 1


def is_deberta_model(path: Path) -> bool:
    """Whether a SentencePiece model is DeBERTa's: named spm.model, or its settings say so."""
    settings = settings_beside(path)
    if "tokenizer_class" in settings:
        return settings["tokenizer_class"] == TOKENIZER_CLASS
    return path.name == SPM_MODEL


def deberta_sentencepiece(path: Path, *, lower_case: bool | None = None) -> Tokenizer:
    """The tokenizer of a DeBERTa-v2/v3 `spm.model` (see the module docstring)."""
    tokenizers = library()
    model = spm.read_unigram(path, "DeBERTa's")
    settings = settings_beside(path)
    if lower_case is not None:
        casing = "--cased/--uncased"
    elif "do_lower_case" in settings:
        lower_case, casing = bool(settings["do_lower_case"]), "do_lower_case in tokenizer_config.json"
    else:
        lower_case, casing = False, "do_lower_case false, DebertaV2Tokenizer's default"
    specials = _specials(settings, DEBERTA_SPECIALS)
    vocab = [(piece.piece, piece.score) for piece in model.pieces]
    unknown = (specials["unk_token"].content, 0.0)
    backend = tokenizers.Tokenizer(tokenizers.models.Unigram(
        vocab, unk_id=vocab.index(unknown) if unknown in vocab else DEFAULT_UNK_ID, byte_fallback=False))
    normalizers = tokenizers.normalizers
    steps = [normalizers.Lowercase()] if lower_case else []
    steps += [normalizers.Replace(tokenizers.Regex(r"\s{2,}|[\n\r\t]"), " "), normalizers.NFC(),
              normalizers.Strip(left=False, right=True)]
    backend.normalizer = normalizers.Sequence(steps)
    split_by_punct = bool(settings.get("split_by_punct", False))
    add_prefix_space = bool(settings.get("add_prefix_space", True))
    words = [tokenizers.pre_tokenizers.Punctuation(behavior="isolated")] if split_by_punct else []
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Sequence([
        *words, tokenizers.pre_tokenizers.Metaspace(replacement=METASPACE,
                                                    prepend_scheme="always" if add_prefix_space else "first")])
    unique = list({token.content: token for token in specials.values()}.values())
    backend.add_special_tokens(unique)
    ids = backend.get_vocab(with_added_tokens=True)
    cls, sep = specials["cls_token"].content, specials["sep_token"].content
    backend.post_processor = tokenizers.processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, ids[cls]), (sep, ids[sep])])
    return Tokenizer(backend, source=path, kind="DeBERTa-v2 SentencePiece model (spm.model)",
                     mask_token=specials["mask_token"].content, pad_token=specials["pad_token"].content,
                     lower_case=lower_case, casing=casing,
                     settings={"do_lower_case": lower_case, "split_by_punct": split_by_punct,
                               "add_prefix_space": add_prefix_space})
