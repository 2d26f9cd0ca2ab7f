"""What self-attention sees, decided once for both runtimes (in NumPy, before any arithmetic).

Shape legend: B batch, S sequence length, P the config's max_position_embeddings.

Which keys a query may attend to: every token that is not padding, and in a causal model
(`config.is_decoder`, transformers' `BertLMHeadModel`) only the tokens at or before the query's
own position. Which rows of a layer's relative-position table (`position_embedding_type`
relative_key or relative_key_query, transformers 4 `BertSelfAttention`) a query-key pair reads:
query l and key r read row l - r + P - 1.
"""

from __future__ import annotations


import numpy as np

from ..config import BertConfig
from ..records import record


def visible_keys(config: BertConfig, attention_mask: np.ndarray) -> np.ndarray:
    """bool: True where a query may attend to a key, from the input mask [B, S] (True: a token).

    [B, 1, 1, S] (every query sees the same keys) for a bidirectional model, [B, 1, S, S] (query,
    key) for a causal one; either broadcasts over heads against scores [B, A, S, S].
    """
    keys = attention_mask[:, None, None, :]
    if not config.is_decoder:
        return keys
    seq_len = attention_mask.shape[1]
    at_or_before = np.tril(np.ones((seq_len, seq_len), dtype=bool))  # [query, key]: key <= query
    return keys & at_or_before


@record
class DistanceRows:
    """The rows of a distance table [2P - 1, D] that a sequence of S tokens reads.

    Distances run from -(S - 1) to S - 1, so only the 2S - 1 rows P - S .. P + S - 2 are read:
    `rows` slices them out of the table, and `index[l, r]` = l - r + S - 1 is the row of query
    l and key r within that slice (row l - r + P - 1 of the whole table).
    """

    rows: slice
    index: np.ndarray  # int64 [S, S]


def distance_rows(config: BertConfig, seq_len: int) -> DistanceRows:
    """The table rows and their index for `seq_len` tokens (at most P, as the inputs check)."""
    positions = np.arange(seq_len)
    index = positions[:, None] - positions[None, :] + (seq_len - 1)
    first = config.max_position_embeddings - seq_len
    return DistanceRows(slice(first, first + 2 * seq_len - 1), index)
