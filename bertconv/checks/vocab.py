"""Does the vocab.txt beside a checkpoint fit its word embeddings: one token per row?

Used by `verify` (a failed check) and by `convert` (which refuses to carry a vocab.txt of another
model along).
"""

from __future__ import annotations

from pathlib import Path

from .. import families
from ..tree import ParameterTree

WORD = "embeddings.word"
#: Tensor-parallel sizes Megatron-LM multiplies the family's padding multiple by
#: (`_vocab_size_with_padding`: make_vocab_size_divisible_by x tensor_model_parallel_size).
TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)

#: vocab.txt is counted in pieces of this size, so that a huge or hostile file costs no memory.
VOCAB_READ_BYTES = 1 << 20


def count_vocab_tokens(path: Path) -> int:
    """Tokens in a vocab.txt: one per line, as BERT's tokenizer reads it (a last line without
    its newline counts; the newline ending the file does not start another)."""
    lines, last = 0, b"\n"
    with open(path, "rb") as f:
        while chunk := f.read(VOCAB_READ_BYTES):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    return lines + (last != b"\n")


def vocab_problem(tree: ParameterTree) -> str | None:
    """A sentence when the vocab.txt beside the checkpoint does not hold one token per row of the
    word embeddings, else None. Token id i is row i of the table: a vocab with more tokens has ids
    past the table, one with fewer leaves rows no token reaches, and either way a vocab.txt of
    another model turns every prediction into the wrong word."""
    sizes = _sizes(tree)
    if isinstance(sizes, str) or sizes is None:
        return sizes
    tokens, rows = sizes
    word = tree[WORD]
    if tokens == rows or padded_to(tree, tokens) == rows:
        return None
    consequence = (f"ids {rows}..{tokens - 1} have no embedding row" if tokens > rows
                   else f"rows {tokens}..{rows - 1} have no token")
    return (f"{tree.vocab}: vocab.txt has {tokens} tokens (lines) but the word embeddings {word.source} ({word.name}) "
            f"have {rows} rows: {consequence}. Token ids are line numbers, so this is probably the "
            f"vocab.txt of another model; use the one this checkpoint was trained with")


def _sizes(tree: ParameterTree) -> tuple[int, int] | str | None:
    """(tokens in the vocab.txt, rows of the word embeddings); a sentence if the vocab.txt cannot
    be read; None without a vocab.txt or a word table."""
    if tree.vocab is None or WORD not in tree.params:
        return None
    try:
        return count_vocab_tokens(tree.vocab), int(tree[WORD].tensor.shape[0])
    except OSError as exc:
        return f"{tree.vocab}: cannot be read: {exc.strerror or exc}"


def padded_to(tree: ParameterTree, tokens: int) -> int | None:
    """The rows the tree's family pads a vocabulary of `tokens` to, if it pads and one of
    Megatron-LM's multiples gives the tree's rows (else the smallest such multiple, or None)."""
    multiple = families.of(tree.config).vocab_pad_multiple
    if not multiple or WORD not in tree.params:
        return None
    rows = int(tree[WORD].tensor.shape[0])
    candidates = [-(-tokens // (multiple * size)) * multiple * size for size in TENSOR_PARALLEL_SIZES]
    return rows if rows in candidates else candidates[0]


def vocab_padding(tree: ParameterTree) -> str | None:
    """A sentence when the word embeddings have rows past the vocab.txt's tokens that are the
    family's padding (Megatron-LM pads to a multiple of 128 times the tensor-parallel size): the
    model's own rows, which no token reaches; None otherwise."""
    sizes = _sizes(tree)
    if not isinstance(sizes, tuple):
        return None
    tokens, rows = sizes
    if tokens >= rows or padded_to(tree, tokens) != rows:
        return None
    family = families.of(tree.config)
    return (f"{tree.vocab.name} has {tokens} tokens and the word embeddings {rows} rows: rows {tokens}..{rows - 1} "
            f"are {family.display}'s vocabulary padding (to a multiple of {family.vocab_pad_multiple} times the "
            f"tensor-parallel size), part of the model, reached by no token; kept as they are")
