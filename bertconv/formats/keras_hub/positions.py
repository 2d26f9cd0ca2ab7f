"""RoBERTa's positions and token type as keras-hub computes them, both ways.

transformers' (and fairseq's) RoBERTa and XLM-RoBERTa count positions past the padding index: a
token's position row is `pad + 1 + rank` (rows 0 and 1 of a [P, H] table are never a non-padding
token's), and add one token-type row to every token. keras-hub's `RobertaBackbone` looks positions
up from row 0 in a table of `max_sequence_length` rows and has no token types
(keras_hub/src/models/roberta/roberta_backbone.py, `TokenAndPositionEmbedding`).

So a preset holds the canonical table's rows from the offset on, and the canonical tree of a
preset has two all-zero rows above them and one all-zero token-type row (`position_offset` 2, the padding index of keras-hub's
RoBERTa and XLM-RoBERTa tokenizers being 1, as fairseq's). Every non-padding token of a
right-padded sequence takes the same row either way; a padding token, which attention masks, takes
row 1 in transformers and its own index in keras-hub.

The one token-type row is added to every token: written to a preset, it is added to every
position row instead (`w + (p + t)` for transformers' `(w + t) + p`, within a rounding of each
sum), unless it is all zeros, as transformers' own converter of fairseq's RoBERTa writes it, when
the position rows are copied as they are.
"""

from __future__ import annotations


from ...errors import bad_input
from ...lazy import lazy_module
from ...records import replace
from ...tensor import ArrayTensor, LazyTensor
from ...tree import Parameter, ParameterTree, model_order_key

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    import numpy as np
else:  # imported on first use: reading a preset's headers needs no NumPy
    np = lazy_module("numpy")

POSITION = "embeddings.position"
TOKEN_TYPE = "embeddings.token_type"


class RowsFrom(LazyTensor):
    """Rows `start`.. of a 2-D tensor [R, W] -> [R - start, W], plus `added` [W] when given."""

    def __init__(self, base: LazyTensor, start: int, added: np.ndarray | None = None):
        self.base, self.start, self.added = base, start, added
        self.dtype = base.dtype
        self.shape = (base.shape[0] - start, *base.shape[1:])

    def read(self) -> np.ndarray:
        rows = np.asarray(self.base.read())[self.start:]
        return rows if self.added is None else (rows + self.added).astype(rows.dtype)


class ZeroRowsAbove(LazyTensor):
    """A 2-D tensor [R, W] under `count` all-zero rows -> [count + R, W]."""

    def __init__(self, base: LazyTensor, count: int):
        self.base, self.count = base, count
        self.dtype = base.dtype
        self.shape = (base.shape[0] + count, *base.shape[1:])

    def read(self) -> np.ndarray:
        rows = np.asarray(self.base.read())
        return np.concatenate([np.zeros((self.count, *rows.shape[1:]), dtype=rows.dtype), rows])


def from_preset(tree: ParameterTree, offset: int) -> ParameterTree:
    """A preset's tree (positions from row 0, no token types) as RoBERTa's: `offset` zero rows
    above its position table, and one all-zero token-type row (type_vocab_size 1, as every
    transformers RoBERTa states), which adds zero to every token."""
    if not offset:
        return tree
    table = tree[POSITION]
    padded = Parameter(POSITION, ZeroRowsAbove(table.tensor, offset),
                       f"{table.source} (under {offset} all-zero rows: positions start at row {offset}, past "
                       f"the padding index, in RoBERTa's table)", table.file, source_shape=table.source_shape)
    width = table.tensor.shape[1]
    zeros = ArrayTensor(np.zeros((1, width), dtype=table.tensor.dtype.numpy), table.tensor.dtype)
    token_type = Parameter(TOKEN_TYPE, zeros, "(no token types: one all-zero row)", table.file)
    config = replace(tree.config, position_offset=offset, type_vocab_size=1,
                     max_position_embeddings=tree.config.max_position_embeddings + offset,
                     provenance={**tree.config.provenance, "type_vocab_size": "format"})
    params = {**tree.params, POSITION: padded, TOKEN_TYPE: token_type}
    return replace(tree, config=config, params={name: params[name] for name in sorted(params, key=model_order_key)})


def to_preset(tree: ParameterTree, offset: int) -> ParameterTree:
    """`tree` as a preset of a family whose canonical positions start at row `offset` holds it:
    the position rows from `offset` on, the token-type row added to them (see the module's
    docstring); a tree with another offset or more than one token type is refused."""
    if tree.config.position_offset != offset:
        raise bad_input(tree.path, f"its positions start at row {tree.config.position_offset} of the position "
                                   f"table (pad_token_id {tree.config.position_offset - 1}), and keras-hub's "
                                   f"{tree.config.model_type} tokenizer pads with id {offset - 1}; nothing was written")
    if tree.config.type_vocab_size > 1:
        raise bad_input(tree.path, f"it has {tree.config.type_vocab_size} token types (type_vocab_size), and "
                                   f"keras-hub's {tree.config.model_type} has none; nothing was written")
    if not offset and (TOKEN_TYPE not in tree or POSITION not in tree):  # DeBERTa-v3 has neither
        return tree
    params = dict(tree.params)
    token_type = params.pop(TOKEN_TYPE, None)
    added = None
    if token_type is not None:
        row = np.asarray(token_type.tensor.read())[0]
        added = row if row.any() else None
    table = tree[POSITION]
    params[POSITION] = Parameter(POSITION, RowsFrom(table.tensor, offset, added), table.source, table.file)
    config = replace(tree.config, position_offset=0, type_vocab_size=0,
                     max_position_embeddings=tree.config.max_position_embeddings - offset)
    return replace(tree, config=config, params=params)


def caveats(tree: ParameterTree, offset: int) -> list[str]:
    """What a preset of `tree` computes otherwise than the source, for the conversion's notes."""
    notes = []
    if offset:
        notes.append(f"rows 0-{offset - 1} of the position table are not written: keras-hub looks positions up "
                     f"from row {offset} of the source's table on for every token, padding included, so a padding "
                     f"token (masked) takes another row, and a sequence must be right-padded, as keras-hub's "
                     f"preprocessor pads it")
    if TOKEN_TYPE in tree and np.asarray(tree[TOKEN_TYPE].tensor.read()).any():
        notes.append("the one token-type row, added to every token, is added to each position row instead "
                     "(keras-hub's RoBERTa has no token types): the same sum, rounded in another order")
    return notes
