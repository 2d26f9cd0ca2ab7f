"""ModernBERT's two kinds of layer, decided once for both runtimes (in NumPy): global attention,
and sliding-window attention, each with its own rotary base (`BertConfig.local_attention_layers`);
and the parts of a layer that differ by family, for both runtimes: the feed-forward's input,
queries, keys and values, and RoFormer-v2's RMS norms.

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


def ffn_inner(model, x, layer: str):
    """The feed-forward's inner activations [..., I] of `model` (a NumpyBert or TorchBert, whose
    `_dense` and `_activation` it calls) on [..., H]: act(x W + b), or for a gated feed-forward
    (ModernBERT's GeGLU) act(a) * g, [a, g] = x W + b split in two halves."""
    if not model.config.gated_ffn:
        return model._activation(model._dense(x, f"{layer}.ffn.intermediate"))
    gated = model._dense(x, f"{layer}.ffn.gated_intermediate")  # [..., 2I]
    half = model.config.intermediate_size
    return model._activation(gated[..., :half]) * gated[..., half:]


def queries_keys_values(model, x, prefix: str) -> tuple:
    """Queries, keys and values [B, S, H] each of `model`'s attention `prefix`, from their own
    matrices or from one fused [H, 3H] (ModernBERT's: the query's columns, the key's, the value's)."""
    if not model.config.fused_qkv:
        return tuple(model._dense(x, f"{prefix}.{part}") for part in ("query", "key", "value"))
    fused = model._dense(x, f"{prefix}.qkv")  # [B, S, 3H]
    hidden = model.config.hidden_size
    return fused[..., :hidden], fused[..., hidden:2 * hidden], fused[..., 2 * hidden:]


def rms_norm(x, scale, eps: float):
    """RoFormer-v2's norm (`BertConfig.rms_norm`) of a NumPy array or torch tensor [..., H]:
    x / sqrt(mean(x^2) + eps) over the last axis, neither centred nor shifted, times the stored
    scale [H] where there is one (keras-hub's `RoformerNorm`; bert4keras' has none)."""
    square = x * x
    if isinstance(x, np.ndarray):
        mean_square = square.mean(axis=-1, keepdims=True)
        normed = x / np.sqrt(mean_square + np.float32(eps))
    else:  # torch
        normed = x * (square.mean(dim=-1, keepdim=True) + eps).rsqrt()
    return normed if scale is None else normed * scale
