"""XLM-R's and CamemBERT's `sentencepiece.bpe.model` as transformers 5 builds their tokenizers from it
(`XLMRobertaTokenizer`, `CamembertTokenizer`, with `convert_slow_tokenizer`'s `XLMRobertaConverter`
and `CamembertConverter` laying the vocabulary out).

fairseq trained these models with its own dictionary, not the SentencePiece model's ids: a few
fixed entries come first, then the model's pieces shifted past them (fairseq's id offset), and
`<mask>` last. transformers keeps that order and runs the pieces as a Unigram with their scores
(whatever the SentencePiece model type), normalized by the model's precompiled charsmap alone
(case and accents kept), split on whitespace with "▁" leading each word; `<s> A </s>`
(`<s> A </s> </s> B </s>`), one token type.

The file alone does not say which order it is read in: a `tokenizer_config.json` beside it names
the tokenizer class, or `config.json` the model type, whose family declares it.
"""

from __future__ import annotations

from pathlib import Path

from ... import families
from ...errors import bad_input
from ...records import record
from . import sentencepiece_model as spm
from .tokenizer import Tokenizer, library, read_json, settings_beside
from .files import token_content

METASPACE = "\u2581"
CONFIG_JSON = "config.json"


@record
class FairseqLayout:
    """How a transformers tokenizer class orders a fairseq SentencePiece vocabulary.

    Attributes:
      tokenizer_class: transformers' class name.
      head: the fixed (token, score) entries before the pieces; settings keys name the ones a
        `tokenizer_config.json` may rename (None: fixed text).
      pieces_from: the first SentencePiece piece kept (those before it are replaced by `head`).
      unk_id: the unknown token's id.
      mask_lstrip: whether the mask token is an added token that takes the space before it.
    """

    tokenizer_class: str
    head: tuple[tuple[str | None, str, float], ...]
    pieces_from: int
    unk_id: int
    mask_lstrip: bool


#: `XLMRobertaConverter.convert_from_spm`: <s> <pad> </s> <unk>, the pieces from 3 on, <mask>.
XLM_ROBERTA = FairseqLayout("XLMRobertaTokenizer", (("bos_token", "<s>", 0.0), ("pad_token", "<pad>", 0.0),
                                                    ("eos_token", "</s>", 0.0), ("unk_token", "<unk>", 0.0)),
                            pieces_from=3, unk_id=3, mask_lstrip=False)
#: `CamembertConverter.convert_from_spm`: <s>NOTUSED <pad> </s>NOTUSED <unk> <unk>NOTUSED (score
#: -100, never chosen), the pieces from 1 on (so the model's <s> and </s> are 5 and 6), <mask>.
CAMEMBERT = FairseqLayout("CamembertTokenizer", ((None, "<s>NOTUSED", 0.0), ("pad_token", "<pad>", 0.0),
                                                 (None, "</s>NOTUSED", 0.0), ("unk_token", "<unk>", 0.0),
                                                 (None, "<unk>NOTUSED", -100.0)),
                          pieces_from=1, unk_id=3, mask_lstrip=True)
LAYOUTS = {layout.tokenizer_class: layout for layout in (XLM_ROBERTA, CAMEMBERT)}
#: The special tokens of both classes (settings key -> default).
SPECIALS = {"bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>", "unk_token": "<unk>",
            "pad_token": "<pad>", "mask_token": "<mask>"}


def layout_beside(path: Path) -> FairseqLayout | None:
    """The layout the files beside a SentencePiece model name (as transformers' AutoTokenizer reads
    them): `tokenizer_class` of tokenizer_config.json, else the tokenizer class the family of
    config.json's `model_type` declares; None for a model of neither (ALBERT's spiece.model)."""
    named = settings_beside(path).get("tokenizer_class")
    if isinstance(named, str) and named.removesuffix("Fast") in LAYOUTS:
        return LAYOUTS[named.removesuffix("Fast")]
    config = Path(path).parent / CONFIG_JSON
    model_type = read_json(config).get("model_type") if config.is_file() else None
    family = families.named(model_type) if isinstance(model_type, str) else None
    return LAYOUTS.get(family.tokenizer_class) if family is not None and family.tokenizer_class else None


def fairseq_sentencepiece(path: Path, layout: FairseqLayout) -> Tokenizer:
    """The tokenizer transformers 5's `layout.tokenizer_class` builds from the SentencePiece model
    at `path` (with the special tokens a tokenizer_config.json beside it names)."""
    tokenizers = library()
    model = spm.read(path)
    if len(model.pieces) <= layout.pieces_from:
        raise bad_input(path, f"the SentencePiece model has {len(model.pieces)} pieces; {layout.tokenizer_class} "
                              f"replaces the first {layout.pieces_from} of them")
    settings = settings_beside(path)
    names = {key: token_content(settings.get(key)) or default for key, default in SPECIALS.items()}
    vocab = [(names[key] if key else text, score) for key, text, score in layout.head]
    vocab += [(p.piece, p.score) for p in model.pieces[layout.pieces_from:]]
    vocab.append((names["mask_token"], 0.0))
    backend = tokenizers.Tokenizer(tokenizers.models.Unigram(vocab, unk_id=layout.unk_id, byte_fallback=False))
    if model.precompiled_charsmap:
        backend.normalizer = tokenizers.normalizers.Precompiled(model.precompiled_charsmap)
    prepend = "always" if settings.get("add_prefix_space", True) else "never"
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Sequence([
        tokenizers.pre_tokenizers.WhitespaceSplit(),
        tokenizers.pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme=prepend)])
    ids = {}
    for index, (token, _) in enumerate(vocab):
        ids.setdefault(token, index)
    # The special tokens transformers adds (its `TokenizersBackend`), then the model's control
    # pieces (`SentencePieceExtractor`'s additional special tokens).
    specials = [names[key] for key in ("bos_token", "pad_token", "eos_token", "unk_token", "sep_token", "cls_token")]
    specials += [p.piece for p in model.pieces if p.type == spm.CONTROL]
    backend.add_special_tokens([tokenizers.AddedToken(token, normalized=False, special=True)
                                for token in dict.fromkeys(specials) if token in ids])
    backend.add_special_tokens([tokenizers.AddedToken(names["mask_token"], lstrip=layout.mask_lstrip,
                                                      normalized=False, special=True)])
    bos, eos = names["bos_token"], names["eos_token"]
    missing = [token for token in (bos, eos) if token not in ids]
    if missing:
        raise bad_input(path, f"not a {layout.tokenizer_class} vocabulary: it has no {' or '.join(missing)}")
    backend.post_processor = tokenizers.processors.TemplateProcessing(
        single=f"{bos}:0 $A:0 {eos}:0", pair=f"{bos}:0 $A:0 {eos}:0 {eos}:0 $B:0 {eos}:0",
        special_tokens=[(bos, ids[bos]), (eos, ids[eos])])
    return Tokenizer(backend, source=path, kind=f"SentencePiece model in {layout.tokenizer_class}'s fairseq order",
                     mask_token=names["mask_token"], pad_token=names["pad_token"],
                     casing=f"{layout.tokenizer_class} keeps case")
