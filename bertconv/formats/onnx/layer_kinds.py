"""ModernBERT's layers in the ONNX graph: what `runtime/layer_kinds.py` decides for the runtimes.

Shape legend: B batch, A attention heads, S sequence length, H hidden size, I intermediate size.

  layer kinds:  sliding-window layers (`config.local_attention_layers`) add to their scores the
                mask adder where a key is within `local_attention // 2` positions of the query,
                the mask value elsewhere ([B, 1, S, S], built from S); their queries and keys
                rotate with `local_rope_theta`, the global layers' with `rope_theta`
  fused qkv:    queries, keys and values the three H-wide column blocks of one [H, 3H] product
  gated FFN:    GeGLU: act(a) * g, [a, g] the two I-wide halves of x @ [H, 2I]
"""

from __future__ import annotations


import numpy as np

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from ...config import BertConfig
    from .graph import _Builder


def rope_bases(config: "BertConfig") -> set[float]:
    """The rotary bases the layers rotate with: `rope_theta`, and `local_rope_theta` where some
    layers attend within a window."""
    return {config.rope_theta, *((config.local_rope_theta,) if config.local_attention_layers else ())}


def window_adder(b: "_Builder", adder: str, seq_len: str) -> str:
    """float32 [B, 1, S, S] added to a sliding-window layer's scores: `adder` (the padding mask's,
    [B, 1, 1 or S, S]) where the key is within `local_attention // 2` of the query, the mask value
    elsewhere (`layer_kinds.window_keys`)."""
    positions = b.arange(seq_len)
    queries = b.op("Unsqueeze", positions, b.constant([1], np.int64))  # [S, 1]
    keys = b.op("Unsqueeze", positions, b.constant([0], np.int64))  # [1, S]
    near = b.op("LessOrEqual", b.op("Abs", b.op("Sub", queries, keys)),
                b.constant(b.config.local_attention // 2, np.int64))  # [S, S]
    return b.op("Where", near, adder, b.constant(b.hidden_key_adder(), np.float32))


def queries_keys_values(b: "_Builder", x: str, prefix: str) -> tuple[str, str, str]:
    """Queries, keys and values [B, S, H] of the attention `prefix`, from their own matrices or
    from the fused [H, 3H] one (its column blocks in that order)."""
    if not b.config.fused_qkv:
        return tuple(b.dense(x, f"{prefix}.{part}") for part in ("query", "key", "value"))
    fused = b.dense(x, f"{prefix}.qkv")  # [B, S, 3H]
    hidden = b.config.hidden_size
    return tuple(_last_axis_slice(b, fused, start, start + hidden) for start in (0, hidden, 2 * hidden))


def ffn_inner(b: "_Builder", x: str, layer: str) -> str:
    """The feed-forward's inner activations [B, S, I]: act(x W + b), or GeGLU's act(a) * g."""
    if not b.config.gated_ffn:
        return b.activation(b.dense(x, f"{layer}.ffn.intermediate"))
    gated = b.dense(x, f"{layer}.ffn.gated_intermediate")  # [B, S, 2I]
    inner = b.config.intermediate_size
    return b.op("Mul", b.activation(_last_axis_slice(b, gated, 0, inner)), _last_axis_slice(b, gated, inner, 2 * inner))


def _last_axis_slice(b: "_Builder", x: str, start: int, end: int) -> str:
    return b.op("Slice", x, b.constant([start], np.int64), b.constant([end], np.int64), b.constant([-1], np.int64))
