"""Does the vocab.txt beside a checkpoint fit its word embeddings: one token per row?

Used by `verify` (a failed check) and by `convert` (which refuses to carry a vocab.txt of another
model along).
"""

from __future__ import annotations

from pathlib import Path

from ..tree import ParameterTree

WORD = "embeddings.word"

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
    if tree.vocab is None or WORD not in tree.params:
        return None
    word = tree[WORD]
    rows = int(word.tensor.shape[0])
    try:
        tokens = count_vocab_tokens(tree.vocab)
    except OSError as exc:
        return f"{tree.vocab}: cannot be read: {exc.strerror or exc}"
    if tokens == rows:
        return None
    consequence = (f"ids {rows}..{tokens - 1} have no embedding row" if tokens > rows
                   else f"rows {tokens}..{rows - 1} have no token")
    return (f"{tree.vocab}: vocab.txt has {tokens} tokens (lines) but the word embeddings {word.source} ({word.name}) "
            f"have {rows} rows: {consequence}. Token ids are line numbers, so this is probably the "
            f"vocab.txt of another model; use the one this checkpoint was trained with")
