"""DeBERTa's disentangled attention in the ONNX graph (`runtime/disentangled.py`, node for node).

Shape legend: B batch, A heads, S sequence length, D head width, H hidden size, K = 2 x span rows
of the relative embeddings, L `saturation`.

Which relative-embedding row query l and key r read is a function of the distance d = l - r
alone, and one that stops changing past a distance L: without buckets d + span is clamped to
[0, K - 1] (L = span); with log buckets the row grows with |d| (the logarithm is monotone) up to
`max_relative_positions`, past which the bucket is beyond the span and clamped. So the graph
holds the runtime's own rows of d = -L .. L (`disentangled.distance_rows`, int64 [2L + 1]) as a
constant and, for any S, gathers them at clamp(l - r, -L, L) + L from a Range over the sequence
length. The rows are the NumPy runtime's, bit for bit: computing the log buckets in the graph
(Log, Div, Ceil in float32) would put the bucket of d = max_relative_positions - 1, where the
ratio of logarithms is exactly 1 before it is scaled and rounded up, at the mercy of the runtime's
last bit of Log.

Per layer, with the relative embeddings R [K, H] (LayerNorm'd once where
`relative_embedding_norm`) projected by the layer's key and query (`share_att_key`) or its
position projections: c2p = q_l . Kr[row(l, r)] and p2c = k_r . Qr[row(r, l)]ᵀ, each one product
per (token, row) gathered per pair, returned in float32 for the scores; the scaling
1 / sqrt(D (1 + terms)) is `disentangled.attention_scale`.
"""

from __future__ import annotations


import numpy as np

from ...config import BertConfig
from ...records import record
from ...runtime.disentangled import distance_rows

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from .graph import _Builder

#: A distance far beyond any sequence: the rows at +-L must already be the rows here.
_FAR = 2**24


@record
class Relative:
    """Graph values every layer reads: the row index int64 [S, S] (query, key) and the relative
    embeddings [K, H] in the export's precision."""

    index: str
    embeddings: str


def saturation(config: BertConfig) -> int:
    """L: the distance past which every distance reads the row of +-L (see the module's docstring)."""
    return max(config.relative_span, config.max_relative_positions if config.position_buckets else 0)


def saturates(config: BertConfig) -> bool:
    """Whether the rows at +-L are those far beyond it: true of every DeBERTa config whose log
    buckets reach past their middle (max_relative_positions - 1 > position_buckets / 2)."""
    if not config.relative_attention:
        return True
    reach = saturation(config)
    return bool((distance_rows(config, np.array([-reach, reach], dtype=np.int64))
                 == distance_rows(config, np.array([-_FAR, _FAR], dtype=np.int64))).all())


#: `graph.NOT_COMPUTED`'s entry: log buckets that do not settle by `saturation` are not held.
NOT_COMPUTED = (("max_relative_positions", lambda config: not saturates(config)),)


def relative(builder: "_Builder", seq_len: str) -> Relative:
    """The row index of S tokens and the relative embeddings, computed once for every layer."""
    embeddings = builder.weight("relative_embeddings")
    if builder.config.relative_embedding_norm:
        embeddings = builder.layer_norm([embeddings], "relative_norm")
    return Relative(row_index(builder, seq_len), embeddings)


def row_index(builder: "_Builder", seq_len: str) -> str:
    """int64 [S, S]: the relative-embedding row query l and key r read (`disentangled.relative_index`)."""
    reach = saturation(builder.config)
    rows = distance_rows(builder.config, np.arange(-reach, reach + 1, dtype=np.int64))  # [2L + 1]
    positions = builder.arange(seq_len)
    queries = builder.op("Unsqueeze", positions, builder.constant([1], np.int64))  # [S, 1]
    keys = builder.op("Unsqueeze", positions, builder.constant([0], np.int64))  # [1, S]
    distance = builder.op("Clip", builder.op("Sub", queries, keys), builder.constant(-reach, np.int64),
                          builder.constant(reach, np.int64))  # [S, S]: l - r within -L .. L
    return builder.op("Gather", builder.constant(rows, np.int64),
                      builder.op("Add", distance, builder.constant(reach, np.int64)), hint="relative_index")


def scores(builder: "_Builder", query: str, key: str, pairs: str, relative: Relative, prefix: str) -> str:
    """float32 [B, A, S, S]: the c2p and p2c terms, unscaled, of queries and keys [B, A, S, D];
    `pairs` the shape [B, A, S, S] (`disentangled.numpy_terms`)."""
    config = builder.config
    own = "" if config.share_att_key else "position_"
    terms = []
    if "c2p" in config.pos_att_type:  # q_l . Kr[row(l, r)]
        position_key = _projected(builder, relative.embeddings, f"{prefix}.{own}key")
        index = builder.op("Expand", relative.index, pairs)
        terms.append(builder.op("GatherElements", builder.op("MatMul", builder.float32(query), position_key), index,
                                axis=3, hint=f"{prefix}.c2p"))
    if "p2c" in config.pos_att_type:  # k_r . Qr[row(l, r)]: by key, then transposed to [query, key]
        position_query = _projected(builder, relative.embeddings, f"{prefix}.{own}query")
        index = builder.op("Expand", builder.op("Transpose", relative.index, perm=[1, 0]), pairs)
        by_key = builder.op("GatherElements", builder.op("MatMul", builder.float32(key), position_query), index, axis=3)
        terms.append(builder.op("Transpose", by_key, perm=[0, 1, 3, 2], hint=f"{prefix}.p2c"))
    return terms[0] if len(terms) == 1 else builder.op("Add", *terms)


def _projected(builder: "_Builder", embeddings: str, prefix: str) -> str:
    """float32 [A, D, K]: the relative embeddings [K, H] @ kernel + bias, split by head and
    transposed for q @ (.). float32 in both precisions: the products join the float32 scores, and
    this weight-only value is then folded to a constant by onnxruntime, whose CPU provider has no
    float16 Gemm to fold with (and 1.31.1 crashes, SIGSEGV, building a session where that unfolded
    float16 value feeds a MatMul)."""
    weight = builder.weight
    product = builder.op("MatMul", builder.float32(embeddings), builder.float32(weight(f"{prefix}.kernel")))
    rows = builder.op("Add", product, builder.float32(weight(f"{prefix}.bias")), hint=f"{prefix}.relative")
    heads = builder.config.num_attention_heads
    split = builder.op("Reshape", rows, builder.constant([0, heads, builder.config.hidden_size // heads], np.int64))
    return builder.op("Transpose", split, perm=[1, 2, 0])
