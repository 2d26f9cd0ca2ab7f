"""The `tokenizers` library's tokenizer for each file a checkpoint may ship, built as transformers 5
builds it from the same file (`BertTokenizer`, `RobertaTokenizer`, `AlbertTokenizer`), with the
settings of a `tokenizer_config.json` beside it where transformers reads them.

A special token (mask, separator, ...) is an added token of the library: kept whole in text,
never normalized or split. Its name comes from the settings (`"mask_token": "<mask>"` or as
`{"content": ..., "lstrip": ...}`), its flags from there or from `added_tokens_decoder`; the
defaults are the family's.
"""

from __future__ import annotations

from pathlib import Path

from ...errors import bad_input
from . import sentencepiece_model as spm
from .tokenizer import MASK, TOKENIZER_CONFIG, Tokenizer, library, read_json, settings_beside

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

#: A word longer than this is [UNK] without trying WordPiece (transformers' and tokenizers'
#: `max_input_chars_per_word`; google-research/bert's WordpieceTokenizer uses 200).
MAX_CHARS_PER_WORD = 100
#: How WordPiece spells a piece that continues a word.
CONTINUATION_PREFIX = "##"
#: SentencePiece's word-start marker: a space, made visible.
METASPACE = "\u2581"

#: Each family's special tokens (settings key -> default), as transformers' tokenizer classes name them.
BERT_SPECIALS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                 "mask_token": MASK}
ROBERTA_SPECIALS = {"bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>",
                    "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>"}
ALBERT_SPECIALS = {"unk_token": "<unk>", "sep_token": "[SEP]", "pad_token": "<pad>", "cls_token": "[CLS]",
                   "mask_token": MASK}
#: ESM's special tokens (transformers' `EsmTokenizer`), every one in ESM-2's vocab.txt.
ESM_SPECIALS = {"cls_token": "<cls>", "pad_token": "<pad>", "eos_token": "<eos>", "unk_token": "<unk>",
                "mask_token": "<mask>"}
#: The `tokenizer_class` of an ESM vocab.txt's settings.
ESM_TOKENIZER_CLASS = "EsmTokenizer"
#: RoBERTa's mask takes the space before it ("the <mask>" is "the" then "<mask>", not "Ġ" too), as
#: fairseq's fill-mask, transformers 4's RobertaTokenizer and roberta-base's tokenizer.json have
#: it: pre-training replaced whole tokens, space included. transformers 5 builds a RobertaTokenizer
#: from vocab.json and merges.txt without it unless tokenizer_config.json says lstrip.
ROBERTA_MASK_LSTRIP = True


def tokenizer_json(path: Path) -> Tokenizer:
    """A tokenizer.json, run as it is (without its padding and truncation); the mask token is the
    settings' or "[MASK]" or "<mask>"."""
    tokenizers = library()
    try:
        backend = tokenizers.Tokenizer.from_file(str(path))
    except Exception as exc:  # the library raises its own exception types, with the reason
        raise bad_input(path, f"not a tokenizer.json the tokenizers library reads: {exc}") from None
    # Padding and truncation settings saved in the file (MiniLM's pads every text to 128) are for
    # training pipelines: fill-mask pads its own batches and refuses a text that does not fit.
    backend.no_padding()
    backend.no_truncation()
    vocab = backend.get_vocab(with_added_tokens=True)
    settings = settings_beside(path)
    named = [token_content(settings.get(key)) for key in ("mask_token", "pad_token")]
    mask = next((t for t in (named[0], MASK, ROBERTA_SPECIALS["mask_token"]) if t is not None and t in vocab), None)
    if mask is None:
        raise bad_input(path, f"the tokenizer has no mask token ({MASK} or {ROBERTA_SPECIALS['mask_token']})")
    pad = next((t for t in (named[1], BERT_SPECIALS["pad_token"], ROBERTA_SPECIALS["pad_token"])
                if t is not None and t in vocab), None)
    return Tokenizer(backend, source=path, kind="tokenizer.json", mask_token=mask, pad_token=pad,
                     casing="its own normalizer decides")


def wordpiece(path: Path, *, lower_case: bool | None = None, tokens: list[str] | None = None) -> Tokenizer:
    """BERT's WordPiece over a vocab.txt (one token per line, id = line number), or over `tokens`
    (id = index) taken from the file at `path` otherwise: BertNormalizer
    (clean-up, CJK characters apart, lower-casing and accents as decided), BertPreTokenizer
    (whitespace and punctuation), WordPiece, [CLS] A [SEP] (B [SEP]).

    `lower_case` None: `do_lower_case` of the settings, else true (BertTokenizer's default, even for
    a vocabulary with upper-case letters: a note says so); `tokenize_chinese_chars` (default true)
    and `strip_accents` (default: as lower-casing) of the settings, as BertTokenizer takes them.
    """
    tokenizers = library()
    tokens = read_vocab_txt(path) if tokens is None else tokens
    vocab = {token: index for index, token in enumerate(tokens)}  # later lines win, as in transformers
    settings = settings_beside(path)
    specials = _specials(settings, BERT_SPECIALS)
    missing = [specials[key].content for key in ("unk_token", "cls_token", "sep_token")
               if specials[key].content not in vocab]
    if missing:
        raise bad_input(path, f"not a BERT vocabulary: the vocabulary lacks {', '.join(missing)}")
    casing, notes = "--cased/--uncased", []
    if lower_case is None:
        lower_case, casing = decide_lower_case(settings)
        if lower_case and "do_lower_case" not in settings and not looks_uncased(tokens):
            notes.append(f"{path}: the vocabulary has upper-case letters but no {TOKENIZER_CONFIG} says "
                         f"do_lower_case, so text is lower-cased as transformers' BertTokenizer does by default; "
                         f"pass --cased if the model was trained on cased text")
    chinese_chars, strip_accents = settings.get("tokenize_chinese_chars", True), settings.get("strip_accents")
    backend = tokenizers.Tokenizer(tokenizers.models.WordPiece(
        vocab, unk_token=specials["unk_token"].content, max_input_chars_per_word=MAX_CHARS_PER_WORD,
        continuing_subword_prefix=CONTINUATION_PREFIX))
    backend.normalizer = tokenizers.normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=chinese_chars, strip_accents=strip_accents, lowercase=lower_case)
    backend.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    backend.add_special_tokens([token for token in specials.values() if token.content in vocab])
    cls, sep = specials["cls_token"].content, specials["sep_token"].content
    backend.post_processor = tokenizers.processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, vocab[cls]), (sep, vocab[sep])])
    return Tokenizer(backend, source=path, kind="WordPiece vocab.txt", mask_token=specials["mask_token"].content,
                     pad_token=specials["pad_token"].content, lower_case=lower_case, casing=casing, notes=notes,
                     settings={"do_lower_case": lower_case, "tokenize_chinese_chars": chinese_chars,
                               "strip_accents": strip_accents})


def is_esm_vocab(path: Path) -> bool:
    """Whether a vocab.txt is ESM's: its settings name `EsmTokenizer`, or, without settings, it
    has ESM's <cls> and <eos> and no BERT [CLS]."""
    settings = settings_beside(path)
    if "tokenizer_class" in settings:
        return settings["tokenizer_class"] == ESM_TOKENIZER_CLASS
    tokens = set(read_vocab_txt(path))
    return {ESM_SPECIALS["cls_token"], ESM_SPECIALS["eos_token"]} <= tokens and BERT_SPECIALS["cls_token"] not in tokens


def esm_vocab(path: Path) -> Tokenizer:
    """ESM's tokenizer over its vocab.txt, as transformers 5's `EsmTokenizer` runs it: every token of
    the vocabulary is split out of the text whole (a protein is its letters: "MKT<mask>A" is M, K,
    T, <mask>, A), what remains splits on whitespace, anything unknown is <unk>; <cls> A <eos>."""
    tokenizers = library()
    tokens = read_vocab_txt(path)
    if tokens and tokens[-1] == "":
        tokens.pop()  # a vocab.txt that ends with a newline
    vocab = {token: index for index, token in enumerate(tokens)}
    specials = _specials(settings_beside(path), ESM_SPECIALS)
    missing = [t.content for t in specials.values() if t.content not in vocab]
    if missing:
        raise bad_input(path, f"not an ESM vocabulary: it lacks {', '.join(missing)}")
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token=specials["unk_token"].content))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    special = {t.content for t in specials.values()}
    backend.add_special_tokens(list(specials.values()))
    backend.add_tokens([tokenizers.AddedToken(t, normalized=False, special=False) for t in tokens
                        if t not in special])
    cls, eos = specials["cls_token"].content, specials["eos_token"].content
    backend.post_processor = tokenizers.processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {eos}:0", pair=f"{cls}:0 $A:0 {eos}:0 $B:0 {eos}:0",
        special_tokens=[(cls, vocab[cls]), (eos, vocab[eos])])
    return Tokenizer(backend, source=path, kind="ESM vocab.txt", mask_token=specials["mask_token"].content,
                     pad_token=specials["pad_token"].content, lower_case=False,
                     casing="EsmTokenizer keeps the letters as written")


def byte_level_bpe(vocab_path: Path, merges_path: Path) -> Tokenizer:
    """RoBERTa's byte-level BPE over vocab.json (token -> id) and merges.txt, as transformers'
    RobertaConverter builds it: BPE, the ByteLevel pre-tokenizer (`add_prefix_space` of the
    settings, default false), <s> A </s> (</s> B </s>) by RobertaProcessing."""
    tokenizers = library()
    if not merges_path.is_file():
        raise bad_input(vocab_path, f"a byte-level BPE vocab.json needs its {merges_path.name} beside it")
    vocab = read_json(vocab_path)
    if not all(isinstance(token, str) and isinstance(index, int) and index >= 0 for token, index in vocab.items()):
        raise bad_input(vocab_path, "not a BPE vocabulary: expected a JSON object of token -> id")
    try:
        model = tokenizers.models.BPE.from_file(str(vocab_path), str(merges_path), dropout=None,
                                                continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False)
    except Exception as exc:  # the library's own exception types, with the reason
        raise bad_input(merges_path, f"the tokenizers library cannot read the BPE files: {exc}") from None
    settings = settings_beside(vocab_path)
    specials = _specials(settings, ROBERTA_SPECIALS, lstrip={"mask_token": ROBERTA_MASK_LSTRIP})
    missing = [t.content for t in specials.values() if t.content not in vocab]
    if missing:
        raise bad_input(vocab_path, f"not a RoBERTa vocabulary: it lacks {', '.join(sorted(set(missing)))}")
    add_prefix_space = bool(settings.get("add_prefix_space", False))
    backend = tokenizers.Tokenizer(model)
    backend.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    backend.add_special_tokens(list(specials.values()))
    sep, cls = specials["sep_token"].content, specials["cls_token"].content
    backend.post_processor = tokenizers.processors.RobertaProcessing(
        (sep, vocab[sep]), (cls, vocab[cls]), trim_offsets=True, add_prefix_space=add_prefix_space)
    return Tokenizer(backend, source=vocab_path, kind=f"byte-level BPE vocab.json + {merges_path.name}",
                     mask_token=specials["mask_token"].content, pad_token=specials["pad_token"].content,
                     casing="a byte-level BPE keeps case", settings={"add_prefix_space": add_prefix_space})


def sentencepiece_unigram(path: Path, *, lower_case: bool | None = None) -> Tokenizer:
    """ALBERT's SentencePiece model as a Unigram, as transformers 5's AlbertTokenizer builds it:
    the pieces with their scores; normalized by `` and '' -> ", NFKD and accents stripped (unless
    `keep_accents`), lower-cased (`do_lower_case`, default true), then the model's own precompiled
    charsmap; split on whitespace, each word led by "▁"; [CLS] A [SEP] (B [SEP]). Control pieces
    and the unknown piece are special tokens, user-defined pieces added tokens."""
    tokenizers = library()
    model = spm.read_unigram(path, "ALBERT's")
    settings = settings_beside(path)
    casing = "--cased/--uncased"
    if lower_case is None:
        lower_case = settings.get("do_lower_case", True)
        casing = f"do_lower_case in {TOKENIZER_CONFIG}" if "do_lower_case" in settings else \
            "do_lower_case true, AlbertTokenizer's default"
    keep_accents = settings.get("keep_accents", False)
    backend = tokenizers.Tokenizer(tokenizers.models.Unigram(
        [(p.piece, p.score) for p in model.pieces], unk_id=model.unk_id, byte_fallback=False))
    normalizers = tokenizers.normalizers
    steps = [normalizers.Replace("``", '"'), normalizers.Replace("''", '"')]
    if not keep_accents:
        steps += [normalizers.NFKD(), normalizers.StripAccents()]
    if lower_case:
        steps.append(normalizers.Lowercase())
    if model.precompiled_charsmap:
        steps.append(normalizers.Precompiled(model.precompiled_charsmap))
    backend.normalizer = normalizers.Sequence(steps)
    add_prefix_space = bool(settings.get("add_prefix_space", True))
    prepend = "always" if add_prefix_space else "never"
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Sequence([
        tokenizers.pre_tokenizers.WhitespaceSplit(),
        tokenizers.pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme=prepend)])
    vocab = {p.piece: index for index, p in enumerate(model.pieces)}
    specials = _specials(settings, ALBERT_SPECIALS)
    added = [tokenizers.AddedToken(p.piece, normalized=False, special=p.type in (spm.CONTROL, spm.UNKNOWN))
             for p in model.pieces if p.type in (spm.CONTROL, spm.UNKNOWN, spm.USER_DEFINED)]
    backend.add_tokens(added)
    backend.add_special_tokens([t for t in specials.values() if t.content in vocab])
    cls, sep = specials["cls_token"].content, specials["sep_token"].content
    missing = [token for token in (cls, sep) if token not in vocab]
    if missing:
        raise bad_input(path, f"not an ALBERT SentencePiece model: it has no {' or '.join(missing)} piece")
    backend.post_processor = tokenizers.processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, vocab[cls]), (sep, vocab[sep])])
    return Tokenizer(backend, source=path, kind="SentencePiece Unigram model", mask_token=specials["mask_token"].content,
                     pad_token=specials["pad_token"].content, lower_case=lower_case, casing=casing,
                     settings={"do_lower_case": lower_case, "keep_accents": keep_accents,
                               "add_prefix_space": add_prefix_space})


# --- vocab.txt ----------------------------------------------------------------------------------

def read_vocab_txt(path: Path) -> list[str]:
    """The tokens of a vocab.txt, one a line, as transformers' `load_vocab` reads them."""
    try:
        with open(path, encoding="utf-8") as lines:
            return [line.rstrip("\n") for line in lines]
    except (OSError, UnicodeDecodeError) as exc:
        raise bad_input(path, f"cannot read the vocabulary as UTF-8 text: {exc}") from None


def looks_uncased(tokens: list[str]) -> bool:
    """No upper-case letter in any token but the bracketed special ones ([CLS], [unused0], ...):
    lower-casing such a vocabulary's text loses nothing it could tell apart."""
    characters = set("".join(t for t in tokens if not (t.startswith("[") and t.endswith("]"))))  # each once
    return not any(c.isupper() for c in characters)


def decide_lower_case(settings: dict) -> tuple[bool, str]:
    """(lower_case, why): `do_lower_case` of a tokenizer_config.json beside the vocabulary, else
    true, as transformers 5's BertTokenizer decides (it never looks at the vocabulary)."""
    if "do_lower_case" in settings:
        return bool(settings["do_lower_case"]), f"do_lower_case in {TOKENIZER_CONFIG}"
    return True, "do_lower_case true, BertTokenizer's default"


# --- special tokens -----------------------------------------------------------------------------


def token_content(value: Any) -> str | None:
    """A special token's text from the settings: a string, or an AddedToken's {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _specials(settings: dict, defaults: dict[str, str], lstrip: dict[str, bool] | None = None) -> dict[str, Any]:
    """settings key -> the library's AddedToken (special, never normalized) for each of the family's
    special tokens; flags (lstrip, rstrip, single_word) from the settings' token object, else from
    its `added_tokens_decoder` entry, else `lstrip`'s default."""
    tokenizers = library()
    decoder = {entry.get("content"): entry for entry in (settings.get("added_tokens_decoder") or {}).values()
               if isinstance(entry, dict)}
    out = {}
    for key, default in defaults.items():
        given = settings.get(key)
        content = token_content(given) or default
        flags = given if isinstance(given, dict) else decoder.get(content, {})
        out[key] = tokenizers.AddedToken(
            content, lstrip=bool(flags.get("lstrip", (lstrip or {}).get(key, False))),
            rstrip=bool(flags.get("rstrip", False)), single_word=bool(flags.get("single_word", False)),
            normalized=False, special=True)
    return out
