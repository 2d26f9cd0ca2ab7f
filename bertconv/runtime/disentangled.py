"""DeBERTa's disentangled attention (`config.relative_attention`; transformers 5
`DisentangledSelfAttention`), for both runtimes: where each query-key pair reads the relative
embeddings (decided once, in NumPy), and the terms the pair's score gains.

Shape legend: B batch, A heads, S sequence length, D head width, H hidden size, K = 2 x span rows
of the relative embeddings (span: `position_buckets`, else `max_relative_positions`).

Query l and key r read row clamp(bucket(l - r) + span, 0, K - 1), where bucket keeps distances
within half the buckets as they are and maps farther ones logarithmically:
  sign(d) * (ceil(log(|d| / m) / log((max_relative_positions - 1) / m) * (m - 1)) + m),  m = buckets / 2,
in float32 as transformers evaluates it (no bucketing without buckets). With the relative
embeddings R [K, H] (LayerNorm'd where `relative_embedding_norm`), projected to Kr = R Wk + bk and
Qr = R Wq + bq by the layer's own key and query (`share_att_key`) or by its position projections,
the score of (l, r) is
  (q_l . k_r  +  q_l . Kr[row]  ("c2p")  +  k_r . Qr[row]  ("p2c")) / sqrt(D (1 + terms)).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache

import numpy as np

from ..config import BertConfig
from ..records import record

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import Any


@record
class Relative:
    """What every layer of one forward pass reads: the row index [S, S] (query, key) and the
    relative embeddings [K, H] as the runtime computes with them (normalized where the model does)."""

    index: np.ndarray
    embeddings: Any

    @classmethod
    def of(cls, config: BertConfig, seq_len: int, params: dict[str, Any],
           layer_norm: Callable[[Any, str], Any]) -> "Relative":
        """For `seq_len` tokens, with the runtime's parameters and LayerNorm."""
        embeddings = params["relative_embeddings"]
        if config.relative_embedding_norm:
            embeddings = layer_norm(embeddings, "relative_norm")
        return cls(relative_index(config, seq_len), embeddings)


def attention_scale(config: BertConfig, width: int) -> float:
    """1 / sqrt(D (1 + terms)): the scaling of every score term (1 / sqrt(D) with no disentangled terms)."""
    return 1.0 / math.sqrt(width * (1 + len(config.pos_att_type)))


def relative_index(config: BertConfig, seq_len: int) -> np.ndarray:
    """int64 [S, S], read-only: the relative-embedding row query l and key r read."""
    return _index(seq_len, config.relative_span, config.position_buckets, config.max_relative_positions)


@cache  # one per (S, span, buckets, max): every layer and every batch of a length reads it
def _index(seq_len: int, span: int, buckets: int, max_position: int) -> np.ndarray:
    positions = np.arange(seq_len, dtype=np.int64)
    index = _rows(positions[:, None] - positions[None, :], span, buckets, max_position)  # of l - r
    index.flags.writeable = False
    return index


def distance_rows(config: BertConfig, distance: np.ndarray) -> np.ndarray:
    """int64, shaped as `distance`: the relative-embedding row of each int64 distance l - r."""
    return _rows(distance, config.relative_span, config.position_buckets, config.max_relative_positions)


def _rows(distance: np.ndarray, span: int, buckets: int, max_position: int) -> np.ndarray:
    if buckets > 0:
        distance = log_buckets(distance, buckets, max_position)
    return np.clip(distance + span, 0, 2 * span - 1)


def log_buckets(distance: np.ndarray, buckets: int, max_position: int) -> np.ndarray:
    """transformers' `make_log_bucket_position` on int64 distances, in its float32 arithmetic."""
    mid = buckets // 2
    sign = np.sign(distance)
    near = (distance < mid) & (distance > -mid)
    magnitude = np.where(near, mid - 1, np.abs(distance)).astype(np.float32)
    ratio = np.log(magnitude / np.float32(mid)) / np.log(np.float32((max_position - 1) / mid))
    logarithmic = np.ceil(ratio * np.float32(mid - 1)) + np.float32(mid)
    return np.where(np.abs(distance) <= mid, distance, (logarithmic * sign).astype(np.int64))


def _heads(projected, heads: int):
    """[K, H] -> [A, K, D] (NumPy arrays and torch tensors alike)."""
    rows, hidden = projected.shape
    return projected.reshape(rows, heads, hidden // heads).swapaxes(0, 1)


def projected(config: BertConfig, relative: Relative, prefix: str, dense: Callable[[Any, str], Any]) -> tuple:
    """(Kr, Qr), each [A, K, D] or None where its term is absent: the relative embeddings through
    the layer's key and query (shared keys) or through its position projections."""
    shared = config.share_att_key
    key = f"{prefix}.key" if shared else f"{prefix}.position_key"
    query = f"{prefix}.query" if shared else f"{prefix}.position_query"
    heads = config.num_attention_heads
    return (_heads(dense(relative.embeddings, key), heads) if "c2p" in config.pos_att_type else None,
            _heads(dense(relative.embeddings, query), heads) if "p2c" in config.pos_att_type else None)


def numpy_terms(config: BertConfig, query: np.ndarray, key: np.ndarray, relative: Relative, prefix: str,
                dense: Callable[[np.ndarray, str], np.ndarray]) -> np.ndarray | float:
    """The c2p and p2c terms, unscaled, [B, A, S, D] each -> [B, A, S, S] (0.0 with neither).

    Each product is taken once per (token, row) and gathered per pair."""
    position_key, position_query = projected(config, relative, prefix, dense)
    terms: np.ndarray | float = 0.0
    if position_key is not None:  # q_l . Kr[row(l, r)]
        terms = np.take_along_axis(query @ position_key.swapaxes(-1, -2), relative.index[None, None], axis=-1)
    if position_query is not None:  # k_r . Qr[row(l, r)]: by key, then transposed to [query, key]
        by_key = np.take_along_axis(key @ position_query.swapaxes(-1, -2), relative.index.T[None, None], axis=-1)
        terms = terms + by_key.swapaxes(-1, -2)
    return terms


def torch_terms(config: BertConfig, query, key, relative: Relative, prefix: str, dense: Callable):
    """As `numpy_terms`, on torch tensors [B, A, S, D]; returns [B, A, S, S] or 0.0."""
    import torch  # noqa: PLC0415 (the torch runtime's only)

    position_key, position_query = projected(config, relative, prefix, dense)
    index = torch.from_numpy(np.array(relative.index)).to(query.device).expand(*query.shape[:2], -1, -1)
    terms = 0.0
    if position_key is not None:
        terms = torch.gather(query @ position_key.transpose(-1, -2), -1, index)
    if position_query is not None:
        terms = terms + torch.gather(key @ position_query.transpose(-1, -2), -1, index.transpose(-1, -2)).transpose(-1, -2)
    return terms
