"""Positions computed from the position alone, with no parameters, decided once for both runtimes
in NumPy: RoFormer's rotary pairs and NEZHA's functional relative positions.

Shape legend: P the config's max_position_embeddings, S sequence length, D head width, F = D / 2
frequencies, K the farthest relative distance (`max_relative_position`).

RoFormer (`position_embedding_type` "rotary_interleaved"; transformers' `RoFormerSinusoidalPositionalEmbedding`
and `apply_rotary_position_embeddings`, bert4keras' likewise): dimensions (2j, 2j + 1) of a query,
key (and, with `rotary_value`, value) at position p are rotated by the angle p / 10000^(2j / D):
t * cos + turned * sin, turned = [-t1, t0, -t3, t2, ...], cos and sin holding each angle twice,
side by side. ESM's rotary (`positions.py`) turns halves (j, j + F) instead.

NEZHA (`position_embedding_type` "sinusoidal_relative"; transformers 4's `NezhaRelativePositionsEncoding`,
bert4keras' `RelativePositionEmbedding` with its Sinusoidal initializer): a fixed table R [2K + 1, D],
R[k, 2j] = sin(k / 10000^(2j / D)), R[k, 2j + 1] = cos(the same), whose row clip(r - l, -K, K) + K
query l and key r read: the scores gain q_l . R[row] before the 1 / sqrt(D) scaling, the context
of query l gains sum_r p_lr R[row].
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np

from ..config import BertConfig
from ..records import record

#: The base of both schemes' frequencies (a constant in both libraries).
BASE = 10000


@record
class PairTables:
    """cos and sin of every position's angles, float32 [S, D] each (each angle twice, side by side)."""

    cos: np.ndarray
    sin: np.ndarray


@cache
def roformer_position_table(positions: int, head_size: int) -> np.ndarray:
    """float32 [P, D]: transformers' `RoFormerSinusoidalPositionalEmbedding.create_weight`, bit for
    bit (angles in float64, rounded once): sin of the F angles, then their cos. Read-only."""
    # The very expressions transformers evaluates, so that NumPy takes the same paths.
    denominators = np.array([np.power(BASE, 2 * (j // 2) / head_size) for j in range(head_size)])
    angles = np.arange(positions)[:, None] / denominators[None, :]  # [P, D], each angle twice
    half = head_size // 2 if head_size % 2 == 0 else head_size // 2 + 1
    table = np.empty((positions, head_size), dtype=np.float32)
    table[:, :half] = np.sin(angles[:, 0::2])
    table[:, half:] = np.cos(angles[:, 1::2])
    table.flags.writeable = False
    return table


def pair_tables(config: BertConfig, seq_len: int) -> PairTables:
    """The RoFormer tables for positions 0..S-1 (read-only arrays, shared)."""
    return _pair_tables(config.max_position_embeddings, config.head_size, seq_len)


@cache  # one per (P, D, S): every layer and every batch of a length reads the same tables
def _pair_tables(positions: int, head_size: int, seq_len: int) -> PairTables:
    rows = roformer_position_table(positions, head_size)[:seq_len]
    sin, cos = rows[:, :head_size // 2], rows[:, head_size // 2:]
    tables = PairTables(np.repeat(cos, 2, axis=-1), np.repeat(sin, 2, axis=-1))
    tables.cos.flags.writeable = tables.sin.flags.writeable = False
    return tables


def rotate_pairs(t: np.ndarray, tables: PairTables) -> np.ndarray:
    """Queries, keys or values [B, A, S, D] rotated pair by pair by their positions (NumPy)."""
    turned = np.stack([-t[..., 1::2], t[..., 0::2]], axis=-1).reshape(t.shape)
    return t * tables.cos + turned * tables.sin


@cache
def relative_table(max_relative_position: int, head_size: int) -> np.ndarray:
    """float32 [2K + 1, D]: NEZHA's sinusoids of rows 0..2K, as transformers 4 computes them in
    float32 (the frequencies exp(2j * -ln(10000) / D)). Read-only."""
    rows = np.arange(2 * max_relative_position + 1, dtype=np.float32)[:, None]
    frequencies = np.exp(np.arange(0, head_size, 2, dtype=np.float32) * np.float32(-math.log(BASE) / head_size))
    table = np.zeros((rows.shape[0], head_size), dtype=np.float32)
    table[:, 0::2] = np.sin(rows * frequencies)
    table[:, 1::2] = np.cos(rows * frequencies)
    table.flags.writeable = False
    return table


def relative_positions(config: BertConfig, seq_len: int) -> np.ndarray:
    """float32 [S, S, D]: the row of R that query l and key r read, for every pair (read-only)."""
    return _relative_positions(config.max_relative_position, config.head_size, seq_len)


@cache
def _relative_positions(max_relative_position: int, head_size: int, seq_len: int) -> np.ndarray:
    positions = np.arange(seq_len)
    rows = np.clip(positions[None, :] - positions[:, None], -max_relative_position, max_relative_position)
    pairs = relative_table(max_relative_position, head_size)[rows + max_relative_position]
    pairs.flags.writeable = False
    return pairs


def relative_scores(query: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """NEZHA's score terms q_l . R[row(l, r)]: queries [B, A, S, D], pairs [S, S, D] -> [B, A, S, S]
    (NumPy; per query position, one product over the batch's heads, as transformers 4 takes it)."""
    batch, heads, seq_len, width = query.shape
    by_position = query.transpose(2, 0, 1, 3).reshape(seq_len, batch * heads, width)  # [S, B*A, D]
    scores = by_position @ pairs.transpose(0, 2, 1)  # [S, B*A, S]
    return scores.reshape(seq_len, batch, heads, seq_len).transpose(1, 2, 0, 3)


def relative_context(probs: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """NEZHA's context terms sum_r p_lr R[row(l, r)]: probabilities [B, A, S, S], pairs [S, S, D]
    -> [B, A, S, D] (NumPy)."""
    batch, heads, seq_len, _ = probs.shape
    by_position = probs.transpose(2, 0, 1, 3).reshape(seq_len, batch * heads, seq_len)  # [S, B*A, S]
    context = by_position @ pairs  # [S, B*A, D]
    return context.reshape(seq_len, batch, heads, -1).transpose(1, 2, 0, 3)


def keras_relative_table(max_relative_position: int, head_size: int) -> np.ndarray:
    """float32 [2K + 1, D]: NEZHA's R as bert4keras' Sinusoidal initializer computes it (and stores it,
    as `Embedding-Relative-Position`): frequencies 10000^(-2j / D) by a float32 power, where
    transformers 4 takes exp(2j * -ln(10000) / D); the two differ in the last float32 bits."""
    frequencies = np.power(np.float32(BASE), -2 * np.arange(head_size // 2, dtype=np.float32) / np.float32(head_size))
    angles = np.arange(2 * max_relative_position + 1, dtype=np.float32)[:, None] * frequencies.astype(np.float32)
    return np.stack([np.sin(angles), np.cos(angles)], axis=-1).reshape(angles.shape[0], head_size)
