"""RoFormer's rotary pairs and NEZHA's functional relative positions in the ONNX graph: what
`runtime/sinusoids.py` computes, from the same tables.

Shape legend: B batch, A attention heads, S sequence length, D head width, F = D / 2 frequencies,
P the config's max_position_embeddings, K the farthest relative distance (`max_relative_position`).

Neither scheme has parameters, and both tables are computed from the config by the runtime's own
functions, so the graph holds them as constants (float32, P x D twice for RoFormer, (2K + 1) x D
for NEZHA) and reads the rows a sequence needs from its length, which stays dynamic:
  RoFormer: cos and sin rows 0..S-1; dimensions (2j, 2j + 1) of each query and key (and value,
            with `rotary_value`) turned into (-t[2j + 1], t[2j]), then t cos + turned sin
  NEZHA:    the table's rows clip(r - l, -K, K) + K for query l and key r, [S, S, D]; the scores
            gain q_l . R[row] before the scaling, the context gains sum_r p_lr R[row]
Both are computed in float32 in a float16 export, as the rotary halves and the softmax are.
"""

from __future__ import annotations


import numpy as np

from ...runtime import sinusoids

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from .graph import _Builder


def tables(b: "_Builder", seq_len: str) -> tuple[str, str] | str | None:
    """What every layer's attention reads of the positions of S tokens: RoFormer's cos and sin
    [S, D], NEZHA's relative rows [S, S, D], or None for another scheme."""
    scheme = b.config.position_embedding_type
    if scheme == "rotary_interleaved":
        return pair_tables(b, seq_len)
    if scheme == "sinusoidal_relative":
        return relative_pairs(b, seq_len)
    return None


def pair_tables(b: "_Builder", seq_len: str) -> tuple[str, str]:
    """float32 cos and sin [S, D] (each angle twice, side by side): rows 0..S-1 of the runtime's
    tables for every position (`sinusoids.pair_tables`, angles in float64 as transformers)."""
    full = sinusoids.pair_tables(b.config, b.config.max_position_embeddings)  # [P, D] each
    start, rows = b.constant([0], np.int64), b.constant([0], np.int64)
    return tuple(b.op("Slice", b.constant(table, np.float32), start, seq_len, rows) for table in (full.cos, full.sin))


def rotate_pairs(b: "_Builder", t: str, pairs: tuple[str, str]) -> str:
    """Queries, keys or values [B, A, S, D] rotated pair by pair by their positions, in float32
    (`sinusoids.rotate_pairs`): t cos + [-t1, t0, -t3, t2, ...] sin."""
    cos, sin = pairs
    t = b.float32(t)
    split = b.op("Reshape", t, b.constant([0, 0, 0, -1, 2], np.int64))  # [B, A, S, F, 2]
    last = b.constant([-1], np.int64)
    even = b.op("Slice", split, b.constant([0], np.int64), b.constant([1], np.int64), last)
    odd = b.op("Slice", split, b.constant([1], np.int64), b.constant([2], np.int64), last)
    turned = b.op("Reshape", b.op("Concat", b.op("Neg", odd), even, axis=-1), b.op("Shape", t))
    return b.compute_dtype(b.op("Add", b.op("Mul", t, cos), b.op("Mul", turned, sin)))


def relative_pairs(b: "_Builder", seq_len: str) -> str:
    """float32 [S, S, D]: the row of NEZHA's table that query l and key r read, for every pair
    (`sinusoids.relative_positions`)."""
    farthest = b.config.max_relative_position
    table = sinusoids.relative_table(farthest, b.config.head_size)  # [2K + 1, D]
    positions = b.arange(seq_len)
    queries = b.op("Unsqueeze", positions, b.constant([1], np.int64))  # [S, 1]
    keys = b.op("Unsqueeze", positions, b.constant([0], np.int64))  # [1, S]
    distances = b.op("Clip", b.op("Sub", keys, queries), b.constant(-farthest, np.int64),
                     b.constant(farthest, np.int64))  # [S, S]: r - l, clipped
    rows = b.op("Add", distances, b.constant(farthest, np.int64))
    return b.op("Gather", b.constant(table, np.float32), rows)


def relative_scores(b: "_Builder", query: str, pairs: str) -> str:
    """float32 [B, A, S, S]: q_l . R[row(l, r)] (`sinusoids.relative_scores`)."""
    return b.op("Einsum", b.float32(query), pairs, equation="bald,lrd->balr")


def relative_context(b: "_Builder", context: str, probs: str, pairs: str) -> str:
    """The context [B, A, S, D] plus sum_r p_lr R[row(l, r)], the float32 probabilities [B, A, S, S]
    (`sinusoids.relative_context`), added in float32."""
    relative = b.op("Einsum", probs, pairs, equation="balr,lrd->bald")
    return b.compute_dtype(b.op("Add", b.float32(context), relative))
