"""ModernBERT's two kinds of layer, decided once for both runtimes (in NumPy): global attention,
and sliding-window attention, each with its own rotary base (`BertConfig.local_attention_layers`).

Shape legend: B batch, S sequence length.

A sliding-window layer's query at position l sees the keys r with |l - r| <= local_attention // 2
(transformers 5 `sliding_window_bidirectional_overlay`), and padding keys never; its queries and
keys are rotated with base `local_rope_theta`. A global layer sees every key that is not padding
and rotates with `rope_theta`. Positions count from the first token of the padded batch (0..S-1),
as transformers 5 counts them: a right-padded sequence computes what it computes alone.
"""

from __future__ import annotations

import numpy as np

from ..config import BertConfig
from ..tree import layer_of


def rope_base(config: BertConfig, prefix: str) -> float:
    """The rotary base of the layer of a canonical prefix (`layers.3.attention`)."""
    return config.local_rope_theta if layer_of(prefix) in config.local_attention_layers else config.rope_theta


def window_keys(config: BertConfig, visible: np.ndarray) -> np.ndarray:
    """bool [B, 1, S, S] (query, key): the keys a sliding-window layer's queries see, from what a
    global layer's see (`attention.visible_keys`, [B, 1, 1 or S, S])."""
    seq_len = visible.shape[-1]
    positions = np.arange(seq_len)
    near = np.abs(positions[:, None] - positions[None, :]) <= config.local_attention // 2  # [query, key]
    return visible & near


def split_gated(hidden, gated_width: int):
    """A gated feed-forward's [..., 2I] input (NumPy or torch) -> (activation input, gate), [..., I] each."""
    half = gated_width // 2
    return hidden[..., :half], hidden[..., half:]


def split_qkv(fused, hidden_size: int):
    """Fused [..., 3H] queries, keys and values (NumPy or torch) -> the three [..., H]."""
    return fused[..., :hidden_size], fused[..., hidden_size:2 * hidden_size], fused[..., 2 * hidden_size:]
