"""BERT with its pre-training heads, in NumPy, run directly on the canonical tree.

Shape legend: B batch, S sequence length, H hidden size, A attention heads, D = H / A head width,
I intermediate size, V vocab size, M prediction slots per sequence, E embedding width (H unless
the model factorizes its embeddings), W the width the embeddings are summed at (`config.summed_width`).

The model is google-research/bert's `BertModel` plus the heads of run_pretraining.py, grown to
the BERT family (ALBERT, ELECTRA, RoBERTa) by what the tree and its config hold:
  embeddings: word[ids] + token_type[types] + position[rows], LayerNorm       [B, S, W]
              (rows 0..S-1, or counted past the padding id with a position offset: RoBERTa;
              none with rotary positions, which rotate each head's queries and keys instead:
              ESM, whose <mask> vectors are zeroed and the others rescaled (token dropout),
              and RoFormer, which turns adjacent pairs (`sinusoids`); none with NEZHA's fixed
              relative sinusoids, added to the scores and the context (`sinusoids`);
              brightmart's albert_zh first maps word[ids] E -> H by its bias-free
              word projection, and sums at W = H; no position term with relative positions)
  projection: x @ kernel + bias, where the config has one (ALBERT, ELECTRA)   [B, S, H]
  layers:     x = LN(x + SelfAttention(x, mask));  x = LN(x + FFN(x)), running the stored
              layers in `config.layer_schedule()` order (ALBERT repeats them) [B, S, H]
              (pre-LayerNorm encoders, Megatron-BERT and ESM: x = x + SelfAttention(LN(x));
              x = x + FFN(LN(x)), then LN once after the last layer; their embeddings may
              have no LayerNorm)
              (attention: softmax((q k^T + relative terms) / sqrt(D) + mask) v, the relative
              terms q_l . E[l-r] (relative_key), + k_r . E[l-r] (relative_key_query), of the
              layer's distance table E (transformers 4; its ALBERT adds them unscaled, after
              the mask); the mask hides padding keys, and in a causal model (is_decoder)
              the keys after the query)
  pooler:     tanh(x[:, 0] @ kernel + bias)                                   [B, H]
  MLM head:   LN(act(h @ transform + b)) @ decoder^T + output_bias            [..., V]
              (transform H -> W; the decoder is the [V, E] word table when tied; with
              brightmart's word projection P [E, H], the transform's output is mapped
              by P^T, H -> E, before the decoder)
  NSP / SOP:  pooled @ kernel + bias                                          [B, 2]
  RTD head:   act(x @ dense + b) @ output + b, one logit per token            [B, S]
Weights are float32 (float16 and bfloat16 files are widened exactly); the conventions that vary
between implementations (activation, LayerNorm epsilon, mask adder) come from a `Numerics`.
`torch_bert.TorchBert` mirrors this API method for method.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext

import numpy as np

from .. import families
from ..config import Heads
from ..records import record
from ..tree import ParameterTree
from . import blas, disentangled, weights
from . import loss as losses
from . import sinusoids
from . import token_dropout as dropout
from . import layer_kinds as kinds
from .attention import DistanceRows, distance_rows, visible_keys
from .positions import rotary_tables, rotate
from .inputs import check_model_inputs, check_positions, check_slot_inputs
from .numerics import GELU_ERF, GELU_TANH, GELU_TANH_CUBIC, GELU_TANH_SCALE, RELU, Numerics

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import Any, ContextManager


@record
class BertOutput:
    """What a forward pass returns, as arrays of the runtime's type.

    Attributes:
      sequence_output: [B, S, H] the last layer's hidden states.
      pooled_output: [B, H] tanh(dense([CLS])), or None without a pooler.
      mlm_logits: [B, S, V] masked-LM logits at every position, or None without an MLM head.
      nsp_logits: [B, 2] next-sentence logits, or None without an NSP head.
      sop_logits: [B, 2] ALBERT's sentence-order logits (class 0: in order), or None without one.
      rtd_logits: [B, S] ELECTRA's replaced-token logits (> 0: replaced), or None without one.
    """

    sequence_output: Any
    pooled_output: Any | None
    mlm_logits: Any | None
    nsp_logits: Any | None
    sop_logits: Any | None = None
    rtd_logits: Any | None = None


# --- activations ---------------------------------------------------------------------------

#: erf is evaluated as 1 - erfc(|x|), with erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z / 2): the
#: form of Numerical Recipes' `erfcc`, with a polynomial P fitted here, at import, to the standard
#: library's `math.erfc` at Chebyshev nodes. Degree 12 on z in [0, 6] gives |error| < 1e-10 in
#: float64 (tests/test_runtime.py measures it); past z = 6, erfc < 2.2e-17 is taken as 0.
ERFC_FIT_DEGREE = 12
ERFC_FIT_Z_MAX = 6.0
_ERFC_FIT_NODES = 64


def _fit_erfc() -> tuple[np.ndarray, float]:
    """(coefficients of P in u in [-1, 1], highest power first; t at z = ERFC_FIT_Z_MAX)."""
    t_min = 1.0 / (1.0 + ERFC_FIT_Z_MAX / 2.0)
    k = np.arange(_ERFC_FIT_NODES)
    u = np.cos(np.pi * (k + 0.5) / _ERFC_FIT_NODES)  # Chebyshev nodes in (-1, 1)
    t = t_min + (u + 1.0) / 2.0 * (1.0 - t_min)
    z = 2.0 / t - 2.0
    target = np.log([math.erfc(v) for v in z]) + z * z - np.log(t)  # P(t), exactly
    chebyshev = np.polynomial.chebyshev.chebfit(u, target, ERFC_FIT_DEGREE)
    return np.polynomial.chebyshev.cheb2poly(chebyshev)[::-1], t_min


_ERFC_POLY, _ERFC_T_MIN = _fit_erfc()


#: Elements per block of the float64 erf and GELU: a block's temporaries stay in a core's cache
#: (on whole activations the arithmetic is memory-bound, about 5x slower).
_BLOCK = 1 << 15
_SQRT_HALF = 1.0 / math.sqrt(2.0)


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, elementwise, computed in float64 and returned in `x`'s dtype."""
    return _blockwise(_erf64, x)


def gelu_erf(x: np.ndarray) -> np.ndarray:
    """0.5 x (1 + erf(x / sqrt(2))): transformers' "gelu", torch.nn.functional.gelu(approximate="none").

    Computed in float64 and rounded once to `x`'s dtype.
    """
    return _blockwise(lambda v: 0.5 * v * (1.0 + _erf64(v * _SQRT_HALF)), x)


def _blockwise(function: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
    """`function` (float64 in, float64 out, elementwise) over `x` in blocks, in `x`'s float dtype."""
    x = np.asarray(x)
    flat = x.reshape(-1)
    out = np.empty(flat.shape, dtype=np.result_type(x, np.float32))
    for start in range(0, flat.size, _BLOCK):
        out[start:start + _BLOCK] = function(flat[start:start + _BLOCK].astype(np.float64))
    return out.reshape(x.shape)


def _erf64(x: np.ndarray) -> np.ndarray:
    """erf of a float64 array, in float64 (see ERFC_FIT_DEGREE for the method and its error)."""
    z = np.minimum(np.abs(x), ERFC_FIT_Z_MAX)
    t = 1.0 / (1.0 + 0.5 * z)
    u = (2.0 * t - (1.0 + _ERFC_T_MIN)) / (1.0 - _ERFC_T_MIN)
    poly = np.full_like(u, _ERFC_POLY[0])
    for coefficient in _ERFC_POLY[1:]:
        poly *= u
        poly += coefficient
    poly -= z * z
    erfc = t * np.exp(poly, out=poly)
    erfc[z >= ERFC_FIT_Z_MAX] = 0.0
    return np.copysign(1.0 - erfc, x)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): google-research/bert's `gelu`."""
    inner = np.float32(GELU_TANH_SCALE) * (x + np.float32(GELU_TANH_CUBIC) * x * x * x)
    return 0.5 * x * (1.0 + np.tanh(inner))


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0)


#: bertconv activation name -> its NumPy function.
ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {GELU_ERF: gelu_erf, GELU_TANH: gelu_tanh, RELU: relu}


# --- the model -----------------------------------------------------------------------------


class NumpyBert:
    """BERT with the pre-training heads a checkpoint has, on float32 NumPy arrays.

    Attributes:
      config: the tree's hyper-parameters.
      numerics: activation, LayerNorm epsilon and mask adder in use.
      heads: which heads are present (each complete; see `weights.plan`).
      decoder: canonical name of the MLM decoder matrix: "embeddings.word" when tied.
      params: canonical name -> float32 array in canonical layout (kernels [in, out]): read-only
        views of the file's memory maps where the stored layout allows (a Hugging Face kernel is
        the transposed view of its [out, in] matrix), else owned copies (`weights.float32_values`).
    """

    def __init__(self, tree: ParameterTree, numerics: Numerics | None = None, *,
                 on_tensor: Callable[[int], None] | None = None):
        self.path = tree.path
        self.config = tree.config
        self.numerics = numerics or Numerics.for_tree(tree)
        self._plan = weights.plan(tree)
        self.heads: Heads = self._plan.heads
        self.decoder = self._plan.decoder
        self.decoder_bias = self._plan.decoder_bias
        self.params: dict[str, np.ndarray] = weights.load(tree, self._plan, weights.float32_values, on_tensor)
        self._activation = ACTIVATIONS[self.numerics.activation]
        self._mask_value = np.float32(self.numerics.mask_value(float(np.finfo(np.float32).min)))

    def __call__(self, input_ids, token_type_ids=None, attention_mask=None) -> BertOutput:
        """The encoder and every head present, on ids [B, S] (token types and mask [B, S] optional).

        The MLM logits are computed at every position ([B, S, V]); for a loss, `pretraining_loss`
        computes them only at the masked positions.
        """
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

    def encode(self, input_ids, token_type_ids=None, attention_mask=None) -> np.ndarray:
        """The last layer's hidden states [B, S, H]."""
        inputs = check_model_inputs(self.config, input_ids, token_type_ids, attention_mask)
        p = self.params
        x = p["embeddings.word"][inputs.input_ids]  # [B, S, E]
        if self.config.token_dropout:  # ESM: <mask> vectors zeroed, the rest rescaled as in training
            x = dropout.apply(x, dropout.token_dropout(self.config, inputs.input_ids, inputs.attention_mask))
        if self.config.word_projection:
            x = _matmul(x, p["embeddings.word_projection.kernel"])  # [B, S, H] (brightmart albert_zh)
        if self.config.type_vocab_size:  # a model with no token types (fairseq RoBERTa) adds nothing for them
            x = x + p["embeddings.token_type"][inputs.token_type_ids]
        if self.config.position_table and not self.config.relative_positions:
            x = x + p["embeddings.position"][inputs.position_ids]
        if self.config.embedding_layer_norm:
            x = self._layer_norm(x, "embeddings.norm")
        if self.config.embedding_projection:
            x = self._dense(x, "embeddings.projection")  # [B, S, H]
        # Added to the scores of hidden keys: [B, 1, 1, S] (padding) or [B, 1, S, S] (causal too).
        visible = visible_keys(self.config, inputs.attention_mask)
        adder = np.where(visible, np.float32(0), self._mask_value)
        local = (np.where(kinds.window_keys(self.config, visible), np.float32(0), self._mask_value)
                 if self.config.local_attention_layers else None)  # ModernBERT's sliding-window layers
        distances = distance_rows(self.config, x.shape[1]) if self.config.relative_positions else None
        if self.config.relative_attention:  # DeBERTa: the relative embeddings and the rows each pair reads
            distances = disentangled.Relative.of(self.config, x.shape[1], p, self._layer_norm)
        layer_step = self._pre_norm_layer if self.config.pre_layer_norm else self._layer
        for layer in self.config.layer_schedule():
            layer_adder = local if layer in self.config.local_attention_layers else adder
            x = layer_step(x, layer_adder, distances, f"layers.{layer}")
        if self.config.final_layer_norm:
            x = self._layer_norm(x, "final_norm")
        return x

    def _pre_norm_layer(self, x: np.ndarray, adder: np.ndarray, distances: DistanceRows | None,
                        layer: str) -> np.ndarray:
        """One pre-LayerNorm layer (Megatron-BERT, ESM, ModernBERT, whose layer 0 has no attention
        LayerNorm): x + Attention(LN(x)), then x + FFN(LN(x))."""
        normed = self._layer_norm(x, f"{layer}.attention_norm") if f"{layer}.attention_norm.gamma" in self.params else x
        x = x + self._attention(normed, adder, distances, f"{layer}.attention")
        return x + self._dense(kinds.ffn_inner(self, self._layer_norm(x, f"{layer}.ffn_norm"), layer),
                               f"{layer}.ffn.output")

    def _layer(self, x: np.ndarray, adder: np.ndarray, distances: DistanceRows | None, layer: str) -> np.ndarray:
        """One encoder layer: [B, S, H] -> [B, S, H]."""
        attended = self._attention(x, adder, distances, f"{layer}.attention")
        x = self._layer_norm(x + attended, f"{layer}.attention_norm")
        hidden = self._activation(self._dense(x, f"{layer}.ffn.intermediate"))  # [B, S, I]
        return self._layer_norm(x + self._dense(hidden, f"{layer}.ffn.output"), f"{layer}.ffn_norm")

    def _attention(self, x: np.ndarray, adder: np.ndarray, distances: DistanceRows | disentangled.Relative | None,
                   prefix: str) -> np.ndarray:
        """Multi-head self-attention with its output projection: [B, S, H] -> [B, S, H]."""
        batch, seq_len, hidden = x.shape
        heads = self.config.num_attention_heads
        width = hidden // heads  # D

        def split(t: np.ndarray) -> np.ndarray:  # [B, S, H] -> [B, A, S, D]
            return t.reshape(batch, seq_len, heads, width).transpose(0, 2, 1, 3)

        query, key, value = (split(t) for t in kinds.queries_keys_values(self, x, prefix))
        if self.config.rotary_positions:
            tables = rotary_tables(self.config, seq_len, kinds.rope_base(self.config, prefix))
            query, key = rotate(query, tables), rotate(key, tables)
        if self.config.position_embedding_type == "rotary_interleaved":  # RoFormer
            pairs = sinusoids.pair_tables(self.config, seq_len)
            query, key = sinusoids.rotate_pairs(query, pairs), sinusoids.rotate_pairs(key, pairs)
            value = sinusoids.rotate_pairs(value, pairs) if self.config.rotary_value else value
        relative = (sinusoids.relative_positions(self.config, seq_len)  # NEZHA: [S, S, D]
                    if self.config.position_embedding_type == "sinusoidal_relative" else None)
        with _blas_threads(seq_len):  # per head: [S, D] @ [D, S], then [S, S] @ [S, D]
            scores = query @ key.transpose(0, 1, 3, 2)  # [B, A, S, S]
            if relative is not None:
                scores += sinusoids.relative_scores(query, relative)
        scaled = families.of(self.config).relative_terms_scaled
        if self.config.relative_positions and scaled:
            scores += self._relative_scores(query, key, distances, prefix)
        if self.config.relative_attention:
            scores += disentangled.numpy_terms(self.config, query, key, distances, prefix, self._dense)
        scores *= np.float32(disentangled.attention_scale(self.config, width))
        scores += adder
        if self.config.relative_positions and not scaled:
            scores += self._relative_scores(query, key, distances, prefix)
        probs = _softmax_(scores)
        with _blas_threads(seq_len):
            context = probs @ value  # [B, A, S, D]
            if relative is not None:
                context += sinusoids.relative_context(probs, relative)
            context = context.transpose(0, 2, 1, 3).reshape(batch, seq_len, hidden)  # [B, S, H]
        return self._dense(context, f"{prefix}.output")

    def _relative_scores(self, query: np.ndarray, key: np.ndarray, distances: DistanceRows,
                         prefix: str) -> np.ndarray:
        """transformers 4's relative terms, [B, A, S, D] each -> [B, A, S, S] (query l, key r):
        q_l . E[l - r], plus k_r . E[l - r] for relative_key_query, E the layer's distance table.

        Each product is taken once per (token, distance) and gathered per pair, instead of
        materializing E[l - r] for every pair ([S, S, D]).
        """
        table = self.params[f"{prefix}.distance_embedding"][distances.rows]  # [2S - 1, D]
        index = np.broadcast_to(distances.index, (*query.shape[:2], *distances.index.shape))  # [B, A, S, S]
        with _blas_threads(query.shape[2]):
            scores = np.take_along_axis(query @ table.T, index, axis=-1)
            if self.config.position_embedding_type == "relative_key_query":
                # By key: row r holds k_r . E[l - r] at column l; transposed back to [query, key].
                by_key = np.take_along_axis(key @ table.T, index.swapaxes(-1, -2), axis=-1)
                scores += by_key.swapaxes(-1, -2)
        return scores

    # --- heads -----------------------------------------------------------------------------

    def pool(self, sequence_output: np.ndarray) -> np.ndarray:
        """The pooler: tanh(dense(sequence_output[:, 0])), [B, S, H] -> [B, H]."""
        weights.require_head(self._plan, "pooler", self.path, "the pooled output")
        return np.tanh(self._dense(sequence_output[:, 0], "pooler"))

    def mlm_logits(self, hidden: np.ndarray) -> np.ndarray:
        """The MLM head on hidden states [..., H] -> logits [..., V]."""
        weights.require_head(self._plan, "mlm", self.path, "masked-LM prediction")
        activation = ACTIVATIONS[self.config.mlm_hidden_act] if self.config.mlm_hidden_act else self._activation
        h = hidden if not self.config.mlm_transform else self._layer_norm(  # RoFormer-v2 decodes directly
            activation(self._dense(hidden, "mlm.transform")), "mlm.norm", eps=self.config.mlm_layer_norm_eps)
        if self.config.word_projection:
            h = _matmul(h, self.params["embeddings.word_projection.kernel"].T)  # [..., E]: back through it
        decoder = self.params[self.decoder]  # [V, E]: the word-embedding table itself when tied
        logits = _matmul(h, decoder.T)
        bias = self.params.get(self.decoder_bias)  # none where the config says so (ModernBERT's decoder_bias)
        return logits if bias is None else logits + bias

    def nsp_logits(self, pooled_output: np.ndarray) -> np.ndarray:
        """The NSP head: [B, H] -> [B, 2] (class 0: B follows A)."""
        weights.require_head(self._plan, "nsp", self.path, "next-sentence prediction")
        return self._dense(pooled_output, "nsp")

    def sop_logits(self, pooled_output: np.ndarray) -> np.ndarray:
        """ALBERT's SOP head: [B, H] -> [B, 2] (class 0: the segments in their order)."""
        weights.require_head(self._plan, "sop", self.path, "sentence-order prediction")
        return self._dense(pooled_output, "sop")

    def rtd_logits(self, sequence_output: np.ndarray) -> np.ndarray:
        """ELECTRA's replaced-token detection: [B, S, H] -> [B, S], one logit per token."""
        weights.require_head(self._plan, "rtd", self.path, "replaced-token detection")
        hidden = self._activation(self._dense(sequence_output, "rtd.dense"))  # [B, S, H]
        return self._dense(hidden, "rtd.output")[..., 0]

    def masked_lm_logits(self, input_ids, token_type_ids, attention_mask, masked_lm_positions) -> np.ndarray:
        """MLM logits [B, M, V] at positions [B, M] only: encoder, gather, then the head."""
        weights.require_head(self._plan, "mlm", self.path, "masked-LM prediction")
        sequence = self.encode(input_ids, token_type_ids, attention_mask)
        positions = check_positions(*sequence.shape[:2], masked_lm_positions)
        return self.mlm_logits(losses.gather_positions(sequence, positions))

    def pretraining_loss(self, input_ids, token_type_ids, attention_mask, masked_lm_positions, masked_lm_ids,
                         masked_lm_weights=None, next_sentence_labels=None) -> losses.PretrainingLoss:
        """Google's pre-training loss (see `loss`): masked-LM, plus NSP when labels are given.

        Args:
          input_ids, token_type_ids, attention_mask: [B, S] as for `encode`.
          masked_lm_positions, masked_lm_ids: [B, M] slot positions and their original token ids.
          masked_lm_weights: [B, M] 1.0 for real slots, 0.0 for padding; default all ones.
          next_sentence_labels: [B] 0 (is next) or 1 (random), or None for no NSP loss; for a model
            with ALBERT's SOP head and no NSP head, 0 (in order) or 1 (swapped), for the SOP loss.
        """
        weights.require_head(self._plan, "mlm", self.path, "the masked-LM loss")
        sentence = weights.sentence_head(self._plan)
        if next_sentence_labels is not None:
            weights.require_head(self._plan, sentence, self.path, "the sentence-level loss")
        sequence = self.encode(input_ids, token_type_ids, attention_mask)  # [B, S, H]
        slots = check_slot_inputs(*sequence.shape[:2], self.config.vocab_size, masked_lm_positions,
                                  masked_lm_ids, masked_lm_weights, next_sentence_labels)
        logits = self.mlm_logits(losses.gather_positions(sequence, slots.positions))  # [B, M, V]
        mlm, per_slot = losses.masked_lm_loss(logits, slots.label_ids, slots.label_weights)
        nsp = None
        if slots.nsp_labels is not None:
            nsp = losses.next_sentence_loss(self._dense(self.pool(sequence), sentence), slots.nsp_labels)
        return losses.PretrainingLoss(mlm=mlm, nsp=nsp, total=mlm if nsp is None else mlm + nsp,
                                      mlm_per_slot=per_slot)

    def replaced_token_loss(self, input_ids, token_type_ids, attention_mask,
                            replaced_labels) -> losses.ReplacedTokenLoss:
        """ELECTRA's discriminator loss (see `loss.replaced_token_loss`), the input mask as weights.

        Args:
          input_ids, token_type_ids, attention_mask: [B, S] as for `encode` (no mask: all tokens).
          replaced_labels: [B, S] 1 where the token was replaced (by the generator's sample), else 0.
        """
        weights.require_head(self._plan, "rtd", self.path, "the replaced-token-detection loss")
        inputs = check_model_inputs(self.config, input_ids, token_type_ids, attention_mask)
        sequence = self.encode(input_ids, token_type_ids, attention_mask)  # [B, S, H]
        labels = losses.check_replaced_labels(*sequence.shape[:2], replaced_labels)
        return losses.replaced_token_loss(self.rtd_logits(sequence), labels, inputs.attention_mask)

    # --- building blocks -------------------------------------------------------------------

    def _dense(self, x: np.ndarray, prefix: str) -> np.ndarray:
        """x @ kernel + bias, kernel [in, out]: [..., in] -> [..., out]; no bias where the model has none."""
        out = _matmul(x, self.params[f"{prefix}.kernel"])
        bias = self.params.get(f"{prefix}.bias")
        return out if bias is None else out + bias

    def _layer_norm(self, x: np.ndarray, prefix: str, eps: float | None = None) -> np.ndarray:
        """(x - mean) / sqrt(var + eps) * gamma + beta over the last axis (biased variance); eps the
        numerics' unless given; RoFormer-v2's RMS norm where the config says so."""
        if self.config.rms_norm:
            return kinds.rms_norm(x, self.params.get(f"{prefix}.gamma"), self.numerics.layer_norm_eps)
        mean = x.mean(axis=-1, keepdims=True)
        centered = x - mean
        variance = np.mean(centered * centered, axis=-1, keepdims=True)
        normed = centered / np.sqrt(variance + np.float32(eps if eps is not None else self.numerics.layer_norm_eps))
        scaled = normed * self.params[f"{prefix}.gamma"]
        beta = self.params.get(f"{prefix}.beta")  # none where the config says so (ModernBERT's norm_bias)
        return scaled if beta is None else scaled + beta


def _matmul(x: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """[..., K] @ [K, N] -> [..., N] as one 2-D product (one BLAS call, not one per batch row)."""
    rows = x.reshape(-1, x.shape[-1])
    with _blas_threads(rows.shape[0]):
        return (rows @ matrix).reshape(*x.shape[:-1], matrix.shape[-1])


#: Products of fewer rows than this run on one BLAS thread (see `blas`): at 256 rows a 768 x 3072
#: kernel is ~30 ms of one core, long against waking a second thread; at a fill-mask text's ten
#: rows it is a fraction of a millisecond, and splitting it only adds the wait for the other thread.
BLAS_THREADS_MIN_ROWS = 256


def _blas_threads(rows: int) -> ContextManager[None]:
    """The BLAS threading for a product with `rows` rows: one thread below BLAS_THREADS_MIN_ROWS."""
    return blas.one_thread() if rows < BLAS_THREADS_MIN_ROWS else nullcontext()


def _softmax_(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, max-subtracted, computed in place in `scores` and returned."""
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    return scores
