"""Is the decoder the word embeddings (tied), and does a stored decoder bias equal the output bias?"""

from __future__ import annotations


from ...lazy import lazy_module
from ...tree import Parameter, ParameterTree
from ..arrays import describe_difference
from .findings import (DECODER, DECODER_BIAS, MISSING, NOT_APPLICABLE, OUTPUT_BIAS, TIED, UNTIED, WORD, Findings,
                       TensorReader, label)

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    import numpy as np
else:  # imported where tensor values are compared or scanned: plain verify reads only bytes
    np = lazy_module("numpy")


def _differs(a: Parameter, a_values: np.ndarray, b: Parameter, b_values: np.ndarray) -> str | None:
    """None when the two tensors are bit-equal, else where and by how much they differ."""
    return describe_difference(a_values, a.tensor.dtype, b_values, b.tensor.dtype)


def check_tying(tree: ParameterTree, head: str, reader: TensorReader, keep: bool,
           findings: Findings) -> tuple[str, str]:
    """(tying, how it was established); failures and notes go to `findings`."""
    if head == MISSING:
        return NOT_APPLICABLE, "no MLM head"
    tied_config = tree.config.tie_word_embeddings
    decoder = tree.params.get(DECODER)
    if decoder is None:
        if not tied_config:
            findings.problems.append(
                "mlm.decoder: not stored, but the config says the embeddings are untied "
                "(tie_word_embeddings false): a loader builds a separate decoder and, finding none in "
                "the file, initializes it randomly. Store the decoder, or set tie_word_embeddings true")
        return TIED, "no decoder stored: the word embeddings serve as the decoder"
    if decoder.shared_with == WORD:
        return TIED, f"{decoder.source} shares storage with the word embeddings"
    word = tree.params.get(WORD)
    if word is None:
        return UNTIED, f"{decoder.source} is stored and there are no word embeddings to compare it with"
    decoder_values, word_values = reader.read(DECODER, keep=keep), reader.read(WORD, keep=keep)
    if decoder_values is None or word_values is None:
        return UNTIED, f"{decoder.source} is stored but could not be read to compare with the embeddings"
    difference = _differs(decoder, decoder_values, word, word_values)
    if difference is None:
        if not tied_config:
            findings.notes.append(f"{label(decoder)} equals {label(word)} bit for bit, although the config "
                                  f"says the embeddings are untied (tie_word_embeddings false)")
        return TIED, f"{decoder.source} is stored as a copy, bit-equal to {word.source}"
    sentence = f"{label(decoder)} differs from {label(word)}: {difference}"
    if tied_config:
        findings.problems.append(
            f"{sentence}. The config says the embeddings are tied (tie_word_embeddings true), so a loader "
            f"ties them and silently replaces this decoder with the word embeddings; set "
            f"tie_word_embeddings false if the decoder is meant to be its own matrix")
    else:
        findings.notes.append(f"untied decoder, as the config says (tie_word_embeddings false): {sentence}")
    return UNTIED, f"{decoder.source} is stored and differs from {word.source}"


def check_decoder_bias(tree: ParameterTree, reader: TensorReader, keep: bool, findings: Findings) -> str:
    """`n/a` (not both stored), `shared`, `equal` or `differs`: the decoder bias against the output bias.

    With tied embeddings they are one tensor, and a difference is a failure. With untied
    embeddings a loader may keep them apart (transformers 5 unties both pairs, and its decoder
    applies the decoder's own bias): a difference is then a note, since the canonical tree holds
    one output bias (`mlm.output_bias`) and a format with a single bias keeps only that one.
    """
    decoder_bias, output_bias = tree.params.get(DECODER_BIAS), tree.params.get(OUTPUT_BIAS)
    if decoder_bias is None or output_bias is None:
        return NOT_APPLICABLE
    if decoder_bias.shared_with == OUTPUT_BIAS:
        return "shared"
    a, b = reader.read(DECODER_BIAS, keep=keep), reader.read(OUTPUT_BIAS, keep=keep)
    if a is None or b is None:
        return "unreadable"
    difference = _differs(decoder_bias, a, output_bias, b)
    if difference is None:
        return "equal"
    sentence = f"{label(decoder_bias)} differs from {label(output_bias)}: {difference}"
    if tree.config.tie_word_embeddings:
        findings.problems.append(f"{sentence}. They are one tensor in BERT with tied embeddings "
                                 f"(tie_word_embeddings true): a loader keeps only one of them")
    else:
        findings.notes.append(f"{sentence}. With untied embeddings a loader may apply the decoder's own bias; "
                              f"a format with a single output bias keeps only {output_bias.source}")
    return "differs"
