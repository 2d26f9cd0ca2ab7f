"""The ONNX graph of a tree's masked-LM logits: `runtime/numpy_bert.py`'s computation, node for node.

Shape legend: B batch, S sequence length, H hidden size, A attention heads, D = H / A head width,
I intermediate size, V vocab size, E embedding width, W the width the embeddings are summed at,
P the position table's rows.

The graph computes what `NumpyBert.encode` and `NumpyBert.mlm_logits` compute, from the same
config and `Numerics`, in the same order of operations:
  inputs:     input_ids, attention_mask int64 [B, S] (1: a token, 0: padding), and token_type_ids
              int64 [B, S] when the model has token types (type_vocab_size > 0); B and S dynamic
  embeddings: word[ids] (ESM's token dropout: <mask> vectors zeroed, all rescaled; @ word
              projection) + token_type[types] + position[rows], LayerNorm where the family has
              one (rows 0..S-1, or RoBERTa's rows counted past the padding id; none with
              relative or rotary positions), then the E -> H projection where the config has one
  layers:     LN(x + attention(x)), LN(x + FFN(x)) in `config.layer_schedule()` order, or
              pre-LayerNorm x + attention(LN(x)), x + FFN(LN(x)) and a final LN (Megatron-BERT,
              ESM, ModernBERT); the shared layers of ALBERT read the same initializers each time;
              attention rotates queries and keys by position (rotary halves; RoFormer's pairs,
              `sinusoids`), adds the relative terms before or after the scale as the family says
              (NEZHA's to the context too), or DeBERTa's c2p and p2c terms (`disentangled`) before
              its scale 1 / sqrt(D (1 + terms)), and the mask adder (`Numerics.mask_value` of
              float32) where a key is padding or, in a causal model, after the query, or in a
              sliding-window layer, out of the window (`layer_kinds`: ModernBERT, whose fused
              queries, keys and values and GeGLU are there too)
  MLM head:   LN(act(h @ transform + b)) (@ word projection^T) @ decoder^T + bias  -> logits [B, S, V]
The decoder of a tied model is the word-embedding initializer itself (one tensor, read twice).
A bias or LayerNorm beta the model has not (ModernBERT's config says which) is not added.

float16 (`Precision.FLOAT16`): weights are stored and multiplied in float16, while every
LayerNorm (its input sum, gamma and beta included) and the attention softmax (scores, scale,
mask adder and relative terms) are computed in float32, with casts around them, and so are the
rotary rotations, NEZHA's relative terms, DeBERTa's relative projections and their products,
the token-dropout rescaling and a pre-LayerNorm encoder's residual stream (which grows layer by
layer, unnormalized); the logits are returned as float32 in both precisions.
"""

from __future__ import annotations

import math
from enum import Enum

import numpy as np
from onnx import NodeProto, TensorProto, ValueInfoProto, helper, numpy_helper

from ... import families
from ...config import BertConfig
from ...records import field, record
from ...runtime.disentangled import attention_scale
from ...runtime.numerics import GELU_ERF, GELU_TANH, GELU_TANH_CUBIC, GELU_TANH_SCALE, RELU, Numerics
from ...runtime.positions import inverse_frequencies
from ...runtime.layer_kinds import rope_base
from ...runtime.token_dropout import MASK_RATIO_TRAIN
from ...tree import has_parameter
from . import disentangled, layer_kinds, sinusoids

#: LayerNormalization entered the default domain at opset 17.
OPSET = 17
#: The IR version of opset 17 (onnx.helper.VERSION_TABLE): what every runtime that reads opset 17
#: reads, rather than the newest IR the `onnx` package would stamp.
IR_VERSION = 8

INPUT_IDS, ATTENTION_MASK, TOKEN_TYPE_IDS = "input_ids", "attention_mask", "token_type_ids"
LOGITS = "logits"


class Precision(Enum):
    """What the weights are stored and multiplied in."""

    FLOAT32 = "float32"
    FLOAT16 = "float16"

    @property
    def numpy(self) -> np.dtype:
        return np.dtype(self.value)

    @property
    def onnx(self) -> int:
        return TensorProto.FLOAT if self is Precision.FLOAT32 else TensorProto.FLOAT16


@record
class Initializer:
    """A weight of the graph: the tree's canonical tensor `name`, stored as `dtype`."""

    name: str
    dtype: np.dtype


@record(frozen=False)
class Graph:
    """The nodes, inputs and outputs of the graph, and the tree tensors it reads as initializers
    (in the order of first use; each canonical name once)."""

    nodes: list[NodeProto] = field(default_factory=list)
    inputs: list[ValueInfoProto] = field(default_factory=list)
    outputs: list[ValueInfoProto] = field(default_factory=list)
    initializers: dict[str, Initializer] = field(default_factory=dict)

    def graph_proto(self, name: str):
        """A GraphProto of the nodes and values, without the initializers' data."""
        return helper.make_graph(self.nodes, name, self.inputs, self.outputs)


#: What the graph does not compute yet, each with the config's test: a tree that has one is
#: refused by name rather than exported as another model (the check after writing would catch
#: it too, but only after the work, and only on the inputs it tries).
NOT_COMPUTED = (
    # DeBERTa's relative buckets that never settle with distance.
    *disentangled.NOT_COMPUTED,
)


def not_computed(config: BertConfig) -> list[str]:
    """The config fields of `config` whose computation the graph does not build (`NOT_COMPUTED`)."""
    return [field for field, present in NOT_COMPUTED if present(config)]


def build(config: BertConfig, numerics: Numerics, decoder: str, decoder_bias: str,
          precision: Precision = Precision.FLOAT32) -> Graph:
    """The graph of the MLM logits of a model of `config`, computed with `numerics`.

    `decoder` and `decoder_bias` are the canonical names of the decoder matrix [V, E] and the
    logits' bias [V] (`runtime.weights.WeightPlan`: the word table when tied).
    """
    return _Builder(config, numerics, precision).model(decoder, decoder_bias)


class _Builder:
    """Appends nodes to one `Graph`; every method returns the name of the value it computed."""

    def __init__(self, config: BertConfig, numerics: Numerics, precision: Precision):
        self.config = config
        self.numerics = numerics
        self.precision = precision
        self.graph = Graph()
        self._count = 0

    # --- plumbing --------------------------------------------------------------------------

    def op(self, op_type: str, *inputs: str, hint: str | None = None, **attributes) -> str:
        """One node; its single output's name (`hint`, such as the layer it computes, then a count)."""
        self._count += 1
        output = f"{hint or op_type.lower()}_{self._count}"
        self.graph.nodes.append(helper.make_node(op_type, list(inputs), [output], name=f"{op_type}_{self._count}",
                                                 **attributes))
        return output

    def constant(self, value, dtype) -> str:
        """A small constant (a scalar or a shape) as a Constant node."""
        return self.op("Constant", value=numpy_helper.from_array(np.asarray(value, dtype=dtype)))

    def weight(self, name: str, *, keep_float32: bool = False) -> str:
        """The tree tensor `name`, stored in the export's precision (float32 where `keep_float32`)."""
        dtype = np.dtype(np.float32) if keep_float32 else self.precision.numpy
        self.graph.initializers.setdefault(name, Initializer(name, dtype))
        return name

    def float32(self, x: str) -> str:
        """`x` as float32 (itself in a float32 export)."""
        return x if self.precision is Precision.FLOAT32 else self.op("Cast", x, to=TensorProto.FLOAT)

    def compute_dtype(self, x: str) -> str:
        """A float32 value `x` back in the export's precision."""
        return x if self.precision is Precision.FLOAT32 else self.op("Cast", x, to=self.precision.onnx)

    def dense(self, x: str, prefix: str) -> str:
        """x @ kernel + bias, kernel [in, out]: [..., in] -> [..., out]; no bias where the model has none."""
        product = self.op("MatMul", x, self.weight(f"{prefix}.kernel"), hint=f"{prefix}.product")
        if not has_parameter(self.config, f"{prefix}.bias"):  # ModernBERT's, as its config says
            return product
        return self.op("Add", product, self.weight(f"{prefix}.bias"), hint=prefix)

    def layer_norm(self, terms: list[str], prefix: str, eps: float | None = None) -> str:
        """LayerNorm over the last axis of the sum of `terms`, summed and normalized in float32
        (gamma and beta stored float32), returned in the export's precision; `eps` the Numerics'
        epsilon unless given (a head normalized otherwise than its encoder, as keras-hub's)."""
        total = self.float32(terms[0])
        for term in terms[1:]:
            total = self.op("Add", total, self.float32(term))
        if self.config.rms_norm:
            return self.compute_dtype(self.rms_norm(total, prefix))
        beta = [self.weight(f"{prefix}.beta", keep_float32=True)] if self.config.norm_bias else []
        normed = self.op("LayerNormalization", total, self.weight(f"{prefix}.gamma", keep_float32=True), *beta, axis=-1,
                         epsilon=float(self.numerics.layer_norm_eps if eps is None else eps))
        return self.compute_dtype(normed)

    def rms_norm(self, x: str, prefix: str) -> str:
        """RoFormer-v2's norm of float32 [..., H] (`layer_kinds.rms_norm`): x / sqrt(mean(x^2) + eps),
        times the stored scale where the model has one (keras-hub's; bert4keras' norms have none)."""
        mean_square = self.op("ReduceMean", self.op("Mul", x, x), axes=[-1], keepdims=1)
        root = self.op("Sqrt", self.op("Add", mean_square, self.constant(self.numerics.layer_norm_eps, np.float32)))
        normed = self.op("Div", x, root)
        if not has_parameter(self.config, f"{prefix}.gamma"):
            return normed
        return self.op("Mul", normed, self.weight(f"{prefix}.gamma", keep_float32=True))

    def activation(self, x: str, name: str | None = None) -> str:
        """The activation `name`, else the `Numerics` one, elementwise (`numpy_bert.ACTIVATIONS`)."""
        name = name or self.numerics.activation
        if name == RELU:
            return self.op("Relu", x)
        dtype = self.precision.numpy
        half = self.op("Mul", x, self.constant(0.5, dtype))
        if name == GELU_ERF:  # 0.5 x (1 + erf(x / sqrt(2)))
            inner = self.op("Erf", self.op("Mul", x, self.constant(1.0 / math.sqrt(2.0), dtype)))
        elif name == GELU_TANH:  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
            cube = self.op("Mul", self.op("Mul", self.op("Mul", x, self.constant(GELU_TANH_CUBIC, dtype)), x), x)
            inner = self.op("Tanh", self.op("Mul", self.constant(GELU_TANH_SCALE, dtype), self.op("Add", x, cube)))
        else:
            raise ValueError(f"no ONNX form for activation {name!r}")
        return self.op("Mul", half, self.op("Add", self.constant(1.0, dtype), inner), hint=name)

    # --- the model -------------------------------------------------------------------------

    def model(self, decoder: str, decoder_bias: str) -> Graph:
        config = self.config
        ids = self._input(INPUT_IDS)
        mask = self._input(ATTENTION_MASK)
        types = self._input(TOKEN_TYPE_IDS) if config.type_vocab_size else None
        seq_len = self.op("Shape", ids, start=1, end=2)  # [1]: S
        x = self.embeddings(ids, types, mask, seq_len)
        adder = self.mask_adder(mask, seq_len)
        local = layer_kinds.window_adder(self, adder, seq_len) if config.local_attention_layers else None
        positions = self.positions(seq_len)
        layer_step = self.pre_norm_layer if config.pre_layer_norm else self.layer
        for layer in config.layer_schedule():
            x = layer_step(x, local if layer in config.local_attention_layers else adder, positions, f"layers.{layer}")
        if config.final_layer_norm:
            x = self.layer_norm([x], "final_norm")
        logits = self.float32(self.mlm_logits(x, decoder, decoder_bias))
        self.graph.nodes.append(helper.make_node("Identity", [logits], [LOGITS], name="logits"))
        self.graph.outputs.append(helper.make_tensor_value_info(LOGITS, TensorProto.FLOAT,
                                                                ["batch", "sequence", config.vocab_size]))
        return self.graph

    def _input(self, name: str) -> str:
        self.graph.inputs.append(helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"]))
        return name

    def embeddings(self, ids: str, types: str | None, mask: str, seq_len: str) -> str:
        """[B, S] ids -> [B, S, H] (`NumpyBert.encode` before the layers)."""
        config = self.config
        x = self.op("Gather", self.weight("embeddings.word"), ids)  # [B, S, E]
        if config.token_dropout:
            x = self.token_dropout(x, ids, mask)
        if config.word_projection:
            x = self.op("MatMul", x, self.weight("embeddings.word_projection.kernel"))  # [B, S, H]
        terms = [x]
        if types is not None:
            terms.append(self.op("Gather", self.weight("embeddings.token_type"), types))
        if config.position_table and not config.relative_positions:
            terms.append(self.op("Gather", self.weight("embeddings.position"), self.position_ids(ids, seq_len)))
        if config.embedding_layer_norm:
            x = self.layer_norm(terms, "embeddings.norm")  # [B, S, W]
        else:  # summed in float32, as the norm would sum them
            x = self.float32(terms[0])
            for term in terms[1:]:
                x = self.op("Add", x, self.float32(term))
            x = self.compute_dtype(x)
        return self.dense(x, "embeddings.projection") if config.embedding_projection else x

    def token_dropout(self, x: str, ids: str, mask: str) -> str:
        """ESM's rescaling of the word vectors [B, S, E] (`runtime.token_dropout`): those of <mask>
        zeroed, then all times (1 - 0.15 * 0.8) / (1 - the sequence's ratio of <mask> tokens), in float32."""
        masked = self.op("Equal", ids, self.constant(self.config.mask_token_id, np.int64))  # [B, S]
        last = self.constant([-1], np.int64)
        count = self.op("ReduceSum", self.op("Cast", masked, to=TensorProto.FLOAT), last, keepdims=1)  # [B, 1]
        length = self.op("ReduceSum", self.op("Cast", mask, to=TensorProto.FLOAT), last, keepdims=1)
        observed = self.op("Sub", self.constant(1.0, np.float32), self.op("Div", count, length))
        zeroed = self.op("Where", self.op("Unsqueeze", masked, last), self.constant(0.0, np.float32), self.float32(x))
        scaled = self.op("Mul", zeroed, self.constant(1 - MASK_RATIO_TRAIN, np.float32))
        return self.compute_dtype(self.op("Div", scaled, self.op("Unsqueeze", observed, last)))

    def position_ids(self, ids: str, seq_len: str) -> str:
        """The position-table rows (`runtime.inputs.position_ids`): [S] 0..S-1 (broadcast over the
        batch), or with an offset, [B, S]: padding at row pad, the others pad + their rank."""
        if not self.config.position_offset:
            return self.arange(seq_len)
        pad = self.constant(self.config.position_offset - 1, np.int64)
        tokens = self.op("Cast", self.op("Not", self.op("Equal", ids, pad)), to=TensorProto.INT64)
        ranks = self.op("CumSum", tokens, self.constant(1, np.int64))
        return self.op("Add", self.op("Mul", ranks, tokens), pad)

    def arange(self, seq_len: str) -> str:
        """int64 [S]: 0, 1, ..., S - 1."""
        end = self.op("Squeeze", seq_len, self.constant([0], np.int64))
        return self.op("Range", self.constant(0, np.int64), end, self.constant(1, np.int64))

    def mask_adder(self, mask: str, seq_len: str) -> str:
        """float32 added to the scores: 0 where a key is visible (`attention.visible_keys`), the
        mask value elsewhere; [B, 1, 1, S], or [B, 1, S, S] in a causal model."""
        visible = self.op("Unsqueeze", self.op("Cast", mask, to=TensorProto.BOOL), self.constant([1, 2], np.int64))
        if self.config.is_decoder:
            positions = self.arange(seq_len)
            queries = self.op("Unsqueeze", positions, self.constant([1], np.int64))  # [S, 1]
            keys = self.op("Unsqueeze", positions, self.constant([0], np.int64))  # [1, S]
            visible = self.op("And", visible, self.op("LessOrEqual", keys, queries))
        hidden = self.constant(self.hidden_key_adder(), np.float32)
        return self.op("Where", visible, self.constant(0.0, np.float32), hidden)

    def hidden_key_adder(self) -> float:
        """What the scores of a key a query does not see gain (`Numerics.mask_value` of float32)."""
        return self.numerics.mask_value(float(np.finfo(np.float32).min))

    def positions(self, seq_len: str):
        """What every layer's attention reads of the positions of S tokens: the relative distances'
        index, the rotary tables by base, DeBERTa's relative embeddings (`disentangled`), RoFormer's
        or NEZHA's tables (`sinusoids`), or None."""
        if self.config.relative_positions:
            return self.distance_index(seq_len)
        if self.config.rotary_positions:
            return {base: self.rotary_tables(seq_len, base) for base in layer_kinds.rope_bases(self.config)}
        if self.config.relative_attention and self.config.pos_att_type:
            return disentangled.relative(self, seq_len)
        return sinusoids.tables(self, seq_len)

    def distance_index(self, seq_len: str) -> tuple[str, str, str]:
        """(first row, end row, index [S, S]) of the distance table for S tokens
        (`attention.distance_rows`): rows P - S .. P + S - 2, index[l, r] = l - r + S - 1."""
        positions = self.arange(seq_len)
        queries = self.op("Unsqueeze", positions, self.constant([1], np.int64))
        keys = self.op("Unsqueeze", positions, self.constant([0], np.int64))
        last = self.op("Sub", seq_len, self.constant([1], np.int64))  # [1]: S - 1
        index = self.op("Add", self.op("Sub", queries, keys), last)  # [S, S]
        first = self.op("Sub", self.constant([self.config.max_position_embeddings], np.int64), seq_len)
        end = self.op("Add", self.op("Add", first, seq_len), last)  # first + 2S - 1
        return first, end, index

    def rotary_tables(self, seq_len: str, base: float) -> tuple[str, str]:
        """float32 cos and sin [S, D] of every position's angles with the rotary `base`, the F
        angles twice (`runtime.positions.rotary_tables`)."""
        positions = self.op("Cast", self.arange(seq_len), to=TensorProto.FLOAT)
        frequencies = self.constant(inverse_frequencies(base, self.config.head_size), np.float32)
        angles = self.op("Mul", self.op("Unsqueeze", positions, self.constant([1], np.int64)), frequencies)  # [S, F]
        both = self.op("Concat", angles, angles, axis=-1)
        return self.op("Cos", both), self.op("Sin", both)

    def rotate(self, t: str, tables: tuple[str, str]) -> str:
        """Queries or keys [B, A, S, D] rotated by position, in float32: t cos + [-t[F:], t[:F]] sin."""
        cos, sin = tables
        half = self.config.head_size // 2
        t = self.float32(t)
        axis, start, middle, end = (self.constant([v], np.int64) for v in (-1, 0, half, 2 * half))
        turned = self.op("Concat", self.op("Neg", self.op("Slice", t, middle, end, axis)),
                         self.op("Slice", t, start, middle, axis), axis=-1)
        return self.compute_dtype(self.op("Add", self.op("Mul", t, cos), self.op("Mul", turned, sin)))

    def pre_norm_layer(self, x: str, adder: str, positions, prefix: str) -> str:
        """One pre-LayerNorm layer (Megatron-BERT, ESM, ModernBERT, whose layer 0 has no attention
        LayerNorm): x + attention(LN(x)), then x + FFN(LN(x)), the residual stream in float32."""
        x = self.float32(x)
        norm = f"{prefix}.attention_norm"
        normed = self.layer_norm([x], norm) if has_parameter(self.config, f"{norm}.gamma") else self.compute_dtype(x)
        x = self.op("Add", x, self.float32(self.attention(normed, adder, positions, f"{prefix}.attention")))
        hidden = layer_kinds.ffn_inner(self, self.layer_norm([x], f"{prefix}.ffn_norm"), prefix)
        return self.op("Add", x, self.float32(self.dense(hidden, f"{prefix}.ffn.output")))

    def layer(self, x: str, adder: str, distances, prefix: str) -> str:
        """One encoder layer: [B, S, H] -> [B, S, H]."""
        attended = self.attention(x, adder, distances, f"{prefix}.attention")
        x = self.layer_norm([x, attended], f"{prefix}.attention_norm")
        hidden = self.activation(self.dense(x, f"{prefix}.ffn.intermediate"))  # [B, S, I]
        return self.layer_norm([x, self.dense(hidden, f"{prefix}.ffn.output")], f"{prefix}.ffn_norm")

    def attention(self, x: str, adder: str, positions, prefix: str) -> str:
        """Multi-head self-attention with its output projection (`NumpyBert._attention`);
        `positions` what `positions` built, if the model has positions there (DeBERTa's
        `disentangled.Relative`)."""
        heads = self.config.num_attention_heads
        width = self.config.hidden_size // heads
        split = self.constant([0, 0, heads, width], np.int64)

        def by_head(t: str) -> str:  # [B, S, H] -> [B, A, S, D]
            return self.op("Transpose", self.op("Reshape", t, split), perm=[0, 2, 1, 3])

        query, key, value = (by_head(t) for t in layer_kinds.queries_keys_values(self, x, prefix))
        distances = positions if self.config.relative_positions else None
        scheme = self.config.position_embedding_type
        if self.config.rotary_positions:
            tables = positions[rope_base(self.config, prefix)]
            query, key = self.rotate(query, tables), self.rotate(key, tables)
        if scheme == "rotary_interleaved":  # RoFormer
            query, key = sinusoids.rotate_pairs(self, query, positions), sinusoids.rotate_pairs(self, key, positions)
            value = sinusoids.rotate_pairs(self, value, positions) if self.config.rotary_value else value
        scores = self.float32(self.op("MatMul", query, self.op("Transpose", key, perm=[0, 1, 3, 2])))  # [B, A, S, S]
        if scheme == "sinusoidal_relative":  # NEZHA
            scores = self.op("Add", scores, sinusoids.relative_scores(self, query, positions))
        scaled = families.of(self.config).relative_terms_scaled
        if distances is not None and scaled:
            scores = self.op("Add", scores, self.relative_scores(query, key, scores, distances, prefix))
        if isinstance(positions, disentangled.Relative):  # DeBERTa's c2p and p2c terms
            scores = self.op("Add", scores, disentangled.scores(self, query, key, self.op("Shape", scores),
                                                                positions, prefix))
        scores = self.op("Mul", scores, self.constant(attention_scale(self.config, width), np.float32))
        scores = self.op("Add", scores, adder)
        if distances is not None and not scaled:
            scores = self.op("Add", scores, self.relative_scores(query, key, scores, distances, prefix))
        probs = self.op("Softmax", scores, axis=-1)
        context = self.op("MatMul", self.compute_dtype(probs), value)  # [B, A, S, D]
        if scheme == "sinusoidal_relative":
            context = sinusoids.relative_context(self, context, probs, positions)
        context = self.op("Transpose", context, perm=[0, 2, 1, 3])  # [B, S, A, D]
        context = self.op("Reshape", context, self.constant([0, 0, self.config.hidden_size], np.int64))
        return self.dense(context, f"{prefix}.output")

    def relative_scores(self, query: str, key: str, scores: str, distances, prefix: str) -> str:
        """float32 [B, A, S, S]: q_l . E[l - r] (+ k_r . E[l - r] for relative_key_query), E the
        layer's distance table, gathered per pair from one product per (token, distance)
        (`NumpyBert._relative_scores`)."""
        first, end, index = distances
        table = self.op("Slice", self.weight(f"{prefix}.distance_embedding"), first, end,
                        self.constant([0], np.int64))  # [2S - 1, D]
        by_distance = self.op("Transpose", table, perm=[1, 0])  # [D, 2S - 1]
        pairs = self.op("Shape", scores)  # [B, A, S, S]
        relative = self.op("GatherElements", self.op("MatMul", query, by_distance),
                           self.op("Expand", index, pairs), axis=3)
        relative = self.float32(relative)
        if self.config.position_embedding_type == "relative_key_query":
            by_key_index = self.op("Expand", self.op("Transpose", index, perm=[1, 0]), pairs)
            by_key = self.op("GatherElements", self.op("MatMul", key, by_distance), by_key_index, axis=3)
            relative = self.op("Add", relative, self.float32(self.op("Transpose", by_key, perm=[0, 1, 3, 2])))
        return relative

    def mlm_logits(self, x: str, decoder: str, decoder_bias: str) -> str:
        """The MLM head on [B, S, H] -> logits [B, S, V] (`NumpyBert.mlm_logits`)."""
        h = x  # RoFormer-v2 decodes the last hidden states themselves
        if self.config.mlm_transform:
            transformed = self.activation(self.dense(x, "mlm.transform"), self.config.mlm_hidden_act)
            h = self.layer_norm([transformed], "mlm.norm", eps=self.config.mlm_layer_norm_eps)  # [B, S, W]
        if self.config.word_projection:  # back through brightmart's projection: [.., H] @ P^T -> [.., E]
            h = self.op("MatMul", h, self.op("Transpose", self.weight("embeddings.word_projection.kernel"),
                                             perm=[1, 0]))
        rows = self.op("Reshape", h, self.constant([-1, self.config.embedding_width], np.int64))  # [B*S, E]
        bias = [self.weight(decoder_bias)] if has_parameter(self.config, decoder_bias) else []
        logits = self.op("Gemm", rows, self.weight(decoder), *bias, transB=1)  # [B*S, V]
        shape = self.op("Concat", self.op("Shape", x, start=0, end=2),
                        self.constant([self.config.vocab_size], np.int64), axis=0)
        return self.op("Reshape", logits, shape)
