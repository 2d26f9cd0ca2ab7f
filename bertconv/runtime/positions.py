"""Rotary positions (`position_embedding_type` "rotary": ESM-2, transformers' `EsmRotaryEmbedding`),
decided once for both runtimes, in NumPy.

Shape legend: S sequence length, D head width, F = D / 2 frequencies.

Head dimension pair (j, j + F) of the query and key at position p is rotated by the angle
p * inv_freq[j], inv_freq[j] = 1 / base^(2j / D): t * cos + rotate_half(t) * sin, where
rotate_half(t) = [-t[F:], t[:F]] and cos, sin repeat the F angles twice. Attention then compares
rotated queries with rotated keys, so a score depends on the two positions' distance alone.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from ..config import BertConfig
from ..records import record


@record
class RotaryTables:
    """cos and sin of every position's angles, float32 [S, D] each (the F angles twice)."""

    cos: np.ndarray
    sin: np.ndarray


def inverse_frequencies(base: float, head_size: int) -> np.ndarray:
    """float32 [F]: 1 / base^(2j / D), in float32 as transformers computes it."""
    exponents = np.arange(0, head_size, 2, dtype=np.float32) / np.float32(head_size)
    return (np.float32(1.0) / np.power(np.float32(base), exponents)).astype(np.float32)


def rotary_tables(config: BertConfig, seq_len: int, base: float | None = None) -> RotaryTables:
    """The tables for positions 0..S-1 of a rotary model (read-only arrays, shared), with the
    config's base unless another is given (a ModernBERT sliding-window layer's)."""
    return _tables(float(base or config.rope_theta), config.head_size, seq_len)


@cache  # one per (base, D, S): every layer and every batch of a length reads the same tables
def _tables(base: float, head_size: int, seq_len: int) -> RotaryTables:
    angles = np.arange(seq_len, dtype=np.float32)[:, None] * inverse_frequencies(base, head_size)  # [S, F]
    both = np.concatenate([angles, angles], axis=-1)  # [S, D]
    cos, sin = np.cos(both), np.sin(both)
    cos.flags.writeable = sin.flags.writeable = False
    return RotaryTables(cos, sin)


def rotate(t: np.ndarray, tables: RotaryTables) -> np.ndarray:
    """Queries or keys [B, A, S, D] rotated by their positions (NumPy)."""
    half = t.shape[-1] // 2
    turned = np.concatenate([-t[..., half:], t[..., :half]], axis=-1)
    return t * tables.cos + turned * tables.sin
