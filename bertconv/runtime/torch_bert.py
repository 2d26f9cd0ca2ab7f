"""BERT with its pre-training heads, in torch, run directly on the canonical tree.

Shape legend: B batch, S sequence length, H hidden size, A attention heads, D = H / A head width,
I intermediate size, V vocab size, M prediction slots per sequence.

The same model as `numpy_bert.NumpyBert`, method for method, on torch tensors: see that module for
the architecture, and `loss` for Google's losses, which the private functions at the end of this
module repeat with torch operations, step for step. torch is an optional extra (`bertconv[torch]`);
this module is imported only when a `TorchBert` is asked for.

Weights run in float32 by default. `dtype=torch.float16` or `torch.bfloat16` runs them natively:
a file stored in that dtype is used as stored, bit for bit, with no round trip through float32.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .. import families
from ..config import Heads
from ..dtypes import BFLOAT16
from ..errors import BadInput
from ..tensor import LazyTensor
from ..tree import ParameterTree
from . import disentangled, sinusoids, weights
from . import token_dropout as dropout
from . import layer_kinds as kinds
from .attention import DistanceRows, distance_rows, visible_keys
from .positions import RotaryTables, rotary_tables
from .inputs import check_model_inputs, check_positions, check_slot_inputs
from .loss import RTD_LOSS_EPSILON, PretrainingLoss, ReplacedTokenLoss, check_replaced_labels
from .numerics import GELU_ERF, GELU_TANH, MLM_LOSS_EPSILON, RELU, Numerics
from .numpy_bert import BertOutput

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import Any


try:
    import torch
    import torch.nn.functional as F
except ImportError:  # an optional extra; TorchBert says how to install it
    torch = None

#: bertconv activation name -> torch.nn.functional.gelu's `approximate` argument (relu apart).
GELU_APPROXIMATE = {GELU_ERF: "none", GELU_TANH: "tanh"}


def _require_torch() -> None:
    if torch is None:
        raise BadInput("the torch runtime needs torch: pip install 'bertconv[torch]' (or torch==2.13.0, the CPU "
                       "build), or use the numpy runtime")


class TorchBert:
    """BERT with the pre-training heads a checkpoint has, on torch tensors.

    Attributes:
      config, numerics, heads, decoder, params: as for `NumpyBert` (params are torch tensors).
      dtype, device: where and in which precision it computes.
    """

    def __init__(self, tree: ParameterTree, numerics: Numerics | None = None, *, dtype: Any = None,
                 device: Any = "cpu", on_tensor: Callable[[int], None] | None = None):
        _require_torch()
        self.path = tree.path
        self.config = tree.config
        self.numerics = numerics or Numerics.for_tree(tree)
        self.dtype = dtype or torch.float32
        self.device = torch.device(device)
        if not self.dtype.is_floating_point:
            raise BadInput(f"dtype {self.dtype} is not a floating-point type")
        self._plan = weights.plan(tree)
        self.heads: Heads = self._plan.heads
        self.decoder = self._plan.decoder
        self.decoder_bias = self._plan.decoder_bias
        self.params: dict[str, torch.Tensor] = weights.load(tree, self._plan, self._to_tensor, on_tensor)
        self._mask_value = self.numerics.mask_value(torch.finfo(self.dtype).min)

    def _to_tensor(self, lazy: LazyTensor) -> "torch.Tensor":
        """A stored tensor -> an owned tensor in `self.dtype` on `self.device`; bfloat16 bits as
        bfloat16. Copied, row-major: torch takes no read-only memory map."""
        values, dtype = lazy.read(), lazy.dtype
        if dtype is BFLOAT16:
            tensor = torch.from_numpy(np.array(values, dtype=np.uint16).view(np.int16)).view(torch.bfloat16)
        else:
            tensor = torch.from_numpy(np.array(values))
        return tensor.to(device=self.device, dtype=self.dtype).contiguous()

    def _tensor(self, array: np.ndarray) -> "torch.Tensor":
        return torch.from_numpy(array).to(self.device)

    def __call__(self, input_ids, token_type_ids=None, attention_mask=None) -> BertOutput:
        """As `NumpyBert.__call__`: the encoder and every head present, as tensors."""
        sequence = self.encode(input_ids, token_type_ids, attention_mask)
        pooled = self.pool(sequence) if self.heads.pooler else None
        return BertOutput(
            sequence_output=sequence,
            pooled_output=pooled,
            mlm_logits=self.mlm_logits(sequence) if self.heads.mlm else None,
            nsp_logits=self.nsp_logits(pooled) if self.heads.nsp else None,
            sop_logits=self.sop_logits(pooled) if self.heads.sop else None,
            rtd_logits=self.rtd_logits(sequence) if self.heads.rtd else None,
        )

    # --- encoder ---------------------------------------------------------------------------

    def encode(self, input_ids, token_type_ids=None, attention_mask=None) -> "torch.Tensor":
        """The last layer's hidden states [B, S, H]."""
        inputs = check_model_inputs(self.config, _numpy(input_ids), _numpy(token_type_ids), _numpy(attention_mask))
        p = self.params
        ids, types = self._tensor(inputs.input_ids), self._tensor(inputs.token_type_ids)
        x = p["embeddings.word"][ids]  # [B, S, E]
        if self.config.token_dropout:  # ESM: as NumpyBert, from the same NumPy decision
            rescale = dropout.token_dropout(self.config, inputs.input_ids, inputs.attention_mask)
            x = x.masked_fill(self._tensor(rescale.masked), 0.0) * float(rescale.train) / self._tensor(rescale.observed)
        if self.config.word_projection:
            x = x @ p["embeddings.word_projection.kernel"]  # [B, S, H] (brightmart albert_zh)
        if self.config.type_vocab_size:  # a model with no token types (fairseq RoBERTa) adds nothing for them
            x = x + p["embeddings.token_type"][types]
        if self.config.position_table and not self.config.relative_positions:
            x = x + p["embeddings.position"][self._tensor(inputs.position_ids)]
        if self.config.embedding_layer_norm:
            x = self._layer_norm(x, "embeddings.norm")
        if self.config.embedding_projection:
            x = self._dense(x, "embeddings.projection")  # [B, S, H]
        visible = visible_keys(self.config, inputs.attention_mask)
        # Added to the scores of hidden keys: [B, 1, 1, S] (padding) or [B, 1, S, S] (causal too).
        adder = self._adder(visible)
        local = self._adder(kinds.window_keys(self.config, visible)) if self.config.local_attention_layers else None
        distances = distance_rows(self.config, x.shape[1]) if self.config.relative_positions else None
        if self.config.relative_attention:  # DeBERTa: as NumpyBert
            distances = disentangled.Relative.of(self.config, x.shape[1], p, self._layer_norm)
        layer_step = self._pre_norm_layer if self.config.pre_layer_norm else self._layer
        for layer in self.config.layer_schedule():
            layer_adder = local if layer in self.config.local_attention_layers else adder
            x = layer_step(x, layer_adder, distances, f"layers.{layer}")
        if self.config.final_layer_norm:
            x = self._layer_norm(x, "final_norm")
        return x

    def _adder(self, visible: np.ndarray) -> "torch.Tensor":
        """0 where a key is visible, the mask value where not (same shape)."""
        hidden = ~self._tensor(visible)
        return torch.zeros(hidden.shape, dtype=self.dtype, device=self.device).masked_fill(hidden, self._mask_value)

    def _pre_norm_layer(self, x: "torch.Tensor", adder: "torch.Tensor", distances: DistanceRows | None,
                        layer: str) -> "torch.Tensor":
        """As `NumpyBert._pre_norm_layer`: x + Attention(LN(x)), then x + FFN(LN(x))."""
        normed = self._layer_norm(x, f"{layer}.attention_norm") if f"{layer}.attention_norm.gamma" in self.params else x
        x = x + self._attention(normed, adder, distances, f"{layer}.attention")
        return x + self._dense(kinds.ffn_inner(self, self._layer_norm(x, f"{layer}.ffn_norm"), layer),
                               f"{layer}.ffn.output")

    def _layer(self, x: "torch.Tensor", adder: "torch.Tensor", distances: DistanceRows | None,
               layer: str) -> "torch.Tensor":
        """One encoder layer: [B, S, H] -> [B, S, H]."""
        attended = self._attention(x, adder, distances, f"{layer}.attention")
        x = self._layer_norm(x + attended, f"{layer}.attention_norm")
        hidden = self._activation(self._dense(x, f"{layer}.ffn.intermediate"))  # [B, S, I]
        return self._layer_norm(x + self._dense(hidden, f"{layer}.ffn.output"), f"{layer}.ffn_norm")

    def _attention(self, x: "torch.Tensor", adder: "torch.Tensor", distances: DistanceRows | None,
                   prefix: str) -> "torch.Tensor":
        """Multi-head self-attention with its output projection: [B, S, H] -> [B, S, H].

        scaled_dot_product_attention computes softmax(q k^T / sqrt(D) + adder) v, the same sum as
        NumpyBert's, in one fused kernel. Relative terms join the adder: (q k^T + R) / sqrt(D) +
        mask is q k^T / sqrt(D) + (R / sqrt(D) + mask); ALBERT's, unscaled, join it as they are.
        """
        batch, seq_len, hidden = x.shape
        heads = self.config.num_attention_heads
        width = hidden // heads  # D

        def split(t: "torch.Tensor") -> "torch.Tensor":  # [B, S, H] -> [B, A, S, D]
            return t.view(batch, seq_len, heads, width).transpose(1, 2)

        query, key, value = (split(t) for t in kinds.queries_keys_values(self, x, prefix))
        if self.config.rotary_positions:
            tables = rotary_tables(self.config, seq_len, kinds.rope_base(self.config, prefix))
            query, key = self._rotate(query, tables), self._rotate(key, tables)
        if self.config.position_embedding_type == "rotary_interleaved":  # RoFormer
            pairs = sinusoids.pair_tables(self.config, seq_len)
            query, key = self._rotate_pairs(query, pairs), self._rotate_pairs(key, pairs)
            value = self._rotate_pairs(value, pairs) if self.config.rotary_value else value
        if self.config.relative_positions:
            relative = self._relative_scores(query, key, distances, prefix)  # [B, A, S, S]
            adder = adder + (relative / math.sqrt(width) if families.of(self.config).relative_terms_scaled else relative)
        scale = disentangled.attention_scale(self.config, width)
        if self.config.relative_attention:  # DeBERTa's c2p / p2c terms join the adder, scaled as q k^T
            adder = adder + disentangled.torch_terms(self.config, query, key, distances, prefix, self._dense) * scale
        if self.config.position_embedding_type == "sinusoidal_relative":  # NEZHA
            context = self._sinusoidal_relative_attention(query, key, value, adder)
        else:
            context = F.scaled_dot_product_attention(query, key, value, attn_mask=adder, scale=scale)  # [B, A, S, D]
        context = context.transpose(1, 2).reshape(batch, seq_len, hidden)
        return self._dense(context, f"{prefix}.output")

    def _rotate(self, t: "torch.Tensor", tables: RotaryTables) -> "torch.Tensor":
        """As `positions.rotate`: [B, A, S, D] rotated by their positions."""
        half = t.shape[-1] // 2
        turned = torch.cat([-t[..., half:], t[..., :half]], dim=-1)
        cos, sin = (self._tensor(np.array(table)).to(t.dtype) for table in (tables.cos, tables.sin))
        return t * cos + turned * sin

    def _rotate_pairs(self, t: "torch.Tensor", tables: sinusoids.PairTables) -> "torch.Tensor":
        """As `sinusoids.rotate_pairs`: [B, A, S, D] rotated pair by pair by their positions."""
        turned = torch.stack([-t[..., 1::2], t[..., 0::2]], dim=-1).reshape(t.shape)
        cos, sin = (self._tensor(np.array(table)).to(t.dtype) for table in (tables.cos, tables.sin))
        return t * cos + turned * sin

    def _sinusoidal_relative_attention(self, query: "torch.Tensor", key: "torch.Tensor", value: "torch.Tensor",
                                       adder: "torch.Tensor") -> "torch.Tensor":
        """NEZHA's attention, as `NumpyBert._attention` with `sinusoids`' terms: [B, A, S, D] each ->
        the context [B, A, S, D]; its context term needs the probabilities, which the fused kernel keeps."""
        pairs = self._tensor(np.array(sinusoids.relative_positions(self.config, query.shape[2]))).to(query.dtype)
        scores = query @ key.transpose(-1, -2) + torch.einsum("bald,lrd->balr", query, pairs)  # [B, A, S, S]
        probs = torch.softmax(scores / math.sqrt(query.shape[-1]) + adder, dim=-1)
        return probs @ value + torch.einsum("balr,lrd->bald", probs, pairs)

    def _relative_scores(self, query: "torch.Tensor", key: "torch.Tensor", distances: DistanceRows,
                         prefix: str) -> "torch.Tensor":
        """As `NumpyBert._relative_scores`: [B, A, S, D] each -> [B, A, S, S] (query l, key r)."""
        table = self.params[f"{prefix}.distance_embedding"][distances.rows]  # [2S - 1, D]
        index = self._tensor(distances.index).expand(*query.shape[:2], -1, -1)  # [B, A, S, S]
        scores = torch.gather(query @ table.T, -1, index)
        if self.config.position_embedding_type == "relative_key_query":
            # By key: row r holds k_r . E[l - r] at column l; transposed back to [query, key].
            scores = scores + torch.gather(key @ table.T, -1, index.transpose(-1, -2)).transpose(-1, -2)
        return scores

    # --- heads -----------------------------------------------------------------------------

    def pool(self, sequence_output: "torch.Tensor") -> "torch.Tensor":
        """The pooler: tanh(dense(sequence_output[:, 0])), [B, S, H] -> [B, H]."""
        weights.require_head(self._plan, "pooler", self.path, "the pooled output")
        return torch.tanh(self._dense(sequence_output[:, 0], "pooler"))

    def mlm_logits(self, hidden: "torch.Tensor") -> "torch.Tensor":
        """The MLM head on hidden states [..., H] -> logits [..., V]."""
        weights.require_head(self._plan, "mlm", self.path, "masked-LM prediction")
        h = hidden if not self.config.mlm_transform else self._layer_norm(  # RoFormer-v2 decodes directly
            self._activation(self._dense(hidden, "mlm.transform"), self.config.mlm_hidden_act), "mlm.norm",
            eps=self.config.mlm_layer_norm_eps)
        if self.config.word_projection:
            h = h @ self.params["embeddings.word_projection.kernel"].T  # [..., E]: back through it
        decoder = self.params[self.decoder]  # [V, E]: the word-embedding table itself when tied
        bias = self.params.get(self.decoder_bias)  # none where the config says so (ModernBERT's decoder_bias)
        return h @ decoder.T if bias is None else h @ decoder.T + bias

    def nsp_logits(self, pooled_output: "torch.Tensor") -> "torch.Tensor":
        """The NSP head: [B, H] -> [B, 2] (class 0: B follows A)."""
        weights.require_head(self._plan, "nsp", self.path, "next-sentence prediction")
        return self._dense(pooled_output, "nsp")

    def sop_logits(self, pooled_output: "torch.Tensor") -> "torch.Tensor":
        """ALBERT's SOP head: [B, H] -> [B, 2] (class 0: the segments in their order)."""
        weights.require_head(self._plan, "sop", self.path, "sentence-order prediction")
        return self._dense(pooled_output, "sop")

    def rtd_logits(self, sequence_output: "torch.Tensor") -> "torch.Tensor":
        """ELECTRA's replaced-token detection: [B, S, H] -> [B, S], one logit per token."""
        weights.require_head(self._plan, "rtd", self.path, "replaced-token detection")
        hidden = self._activation(self._dense(sequence_output, "rtd.dense"))  # [B, S, H]
        return self._dense(hidden, "rtd.output")[..., 0]

    def masked_lm_logits(self, input_ids, token_type_ids, attention_mask, masked_lm_positions) -> "torch.Tensor":
        """MLM logits [B, M, V] at positions [B, M] only: encoder, gather, then the head."""
        weights.require_head(self._plan, "mlm", self.path, "masked-LM prediction")
        sequence = self.encode(input_ids, token_type_ids, attention_mask)
        positions = check_positions(*sequence.shape[:2], _numpy(masked_lm_positions))
        return self.mlm_logits(_gather_positions(sequence, self._tensor(positions)))

    def pretraining_loss(self, input_ids, token_type_ids, attention_mask, masked_lm_positions, masked_lm_ids,
                         masked_lm_weights=None, next_sentence_labels=None) -> PretrainingLoss:
        """As `NumpyBert.pretraining_loss`; the losses are 0-d float32 tensors."""
        weights.require_head(self._plan, "mlm", self.path, "the masked-LM loss")
        sentence = weights.sentence_head(self._plan)
        if next_sentence_labels is not None:
            weights.require_head(self._plan, sentence, self.path, "the sentence-level loss")
        sequence = self.encode(input_ids, token_type_ids, attention_mask)  # [B, S, H]
        slots = check_slot_inputs(*sequence.shape[:2], self.config.vocab_size, _numpy(masked_lm_positions),
                                  _numpy(masked_lm_ids), _numpy(masked_lm_weights), _numpy(next_sentence_labels))
        # The losses are computed in float32 whatever the compute dtype, as Google computes them.
        logits = self.mlm_logits(_gather_positions(sequence, self._tensor(slots.positions))).float()  # [B, M, V]
        mlm, per_slot = _masked_lm_loss(logits, self._tensor(slots.label_ids), self._tensor(slots.label_weights))
        nsp = None
        if slots.nsp_labels is not None:
            nsp_logits = self._dense(self.pool(sequence), sentence).float()
            nsp = _next_sentence_loss(nsp_logits, self._tensor(slots.nsp_labels))
        return PretrainingLoss(mlm=mlm, nsp=nsp, total=mlm if nsp is None else mlm + nsp, mlm_per_slot=per_slot)

    def replaced_token_loss(self, input_ids, token_type_ids, attention_mask, replaced_labels) -> ReplacedTokenLoss:
        """As `NumpyBert.replaced_token_loss`; the losses are float32 tensors."""
        weights.require_head(self._plan, "rtd", self.path, "the replaced-token-detection loss")
        inputs = check_model_inputs(self.config, _numpy(input_ids), _numpy(token_type_ids), _numpy(attention_mask))
        sequence = self.encode(input_ids, token_type_ids, attention_mask)  # [B, S, H]
        labels = check_replaced_labels(*sequence.shape[:2], _numpy(replaced_labels))
        logits = self.rtd_logits(sequence).float()  # [B, S]
        return _replaced_token_loss(logits, self._tensor(labels), self._tensor(inputs.attention_mask))

    # --- building blocks -------------------------------------------------------------------

    def _dense(self, x: "torch.Tensor", prefix: str) -> "torch.Tensor":
        """x @ kernel + bias, kernel [in, out]: [..., in] -> [..., out]."""
        bias, rows = self.params.get(f"{prefix}.bias"), x.reshape(-1, x.shape[-1])
        kernel = self.params[f"{prefix}.kernel"]
        out = rows @ kernel if bias is None else torch.addmm(bias, rows, kernel)
        return out.view(*x.shape[:-1], -1)

    def _layer_norm(self, x: "torch.Tensor", prefix: str, eps: float | None = None) -> "torch.Tensor":
        if self.config.rms_norm:  # RoFormer-v2's
            return kinds.rms_norm(x, self.params.get(f"{prefix}.gamma"), self.numerics.layer_norm_eps)
        return F.layer_norm(x, x.shape[-1:], self.params[f"{prefix}.gamma"], self.params.get(f"{prefix}.beta"),
                            eps=eps if eps is not None else self.numerics.layer_norm_eps)

    def _activation(self, x: "torch.Tensor", name: str | None = None) -> "torch.Tensor":
        """The numerics' activation, or the one `name`d (the MLM head's own)."""
        name = name or self.numerics.activation
        if name == RELU:
            return F.relu(x)
        return F.gelu(x, approximate=GELU_APPROXIMATE[name])


def _numpy(values):
    """A CPU torch tensor as a NumPy array (for the shared input checks); anything else unchanged."""
    if torch is not None and isinstance(values, torch.Tensor):
        return values.detach().cpu().numpy()
    return values


# --- Google's losses, mirroring loss.py step for step ----------------------------------------


def _gather_positions(sequence: "torch.Tensor", positions: "torch.Tensor") -> "torch.Tensor":
    """Step 1: [B, S, H] at positions [B, M] -> [B, M, H]."""
    batch = torch.arange(sequence.shape[0], device=sequence.device)[:, None]  # [B, 1]
    return sequence[batch, positions]


def _masked_lm_loss(logits: "torch.Tensor", label_ids: "torch.Tensor",
                    label_weights: "torch.Tensor") -> tuple["torch.Tensor", "torch.Tensor"]:
    """Steps 3-5 on logits [B, M, V]: (loss, per-slot loss [B, M])."""
    log_probs = torch.log_softmax(logits, dim=-1)  # [B, M, V]
    per_slot = -log_probs.gather(-1, label_ids[..., None])[..., 0]  # [B, M]
    numerator = torch.sum(label_weights * per_slot)
    denominator = torch.sum(label_weights) + MLM_LOSS_EPSILON
    return numerator / denominator, per_slot


def _next_sentence_loss(logits: "torch.Tensor", labels: "torch.Tensor") -> "torch.Tensor":
    """NSP logits [B, 2] -> the batch mean of -log p(label)."""
    log_probs = torch.log_softmax(logits, dim=-1)  # [B, 2]
    return -log_probs.gather(-1, labels[:, None])[:, 0].mean()


def _replaced_token_loss(logits: "torch.Tensor", labels: "torch.Tensor", mask: "torch.Tensor") -> ReplacedTokenLoss:
    """ELECTRA's discriminator loss on logits [B, S], 0/1 labels and the input mask [B, S]."""
    weights = mask.to(logits.dtype)
    per_token = F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype), reduction="none")  # [B, S]
    weighted = per_token * weights
    per_example = weighted.sum(dim=-1) / (RTD_LOSS_EPSILON + weights.sum(dim=-1))  # [B]
    return ReplacedTokenLoss(loss=weighted.sum() / (RTD_LOSS_EPSILON + weights.sum()), per_example=per_example,
                             per_token=per_token)
