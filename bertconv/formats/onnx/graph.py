"""The ONNX graph of a tree's masked-LM logits: `runtime/numpy_bert.py`'s computation, node for node.

Shape legend: B batch, S sequence length, H hidden size, A attention heads, D = H / A head width,
I intermediate size, V vocab size, E embedding width, W the width the embeddings are summed at,
P the position table's rows.

The graph computes what `NumpyBert.encode` and `NumpyBert.mlm_logits` compute, from the same
config and `Numerics`, in the same order of operations:
  inputs:     input_ids, attention_mask int64 [B, S] (1: a token, 0: padding), and token_type_ids
              int64 [B, S] when the model has token types (type_vocab_size > 0); B and S dynamic
  embeddings: word[ids] (@ word projection) + token_type[types] + position[rows], LayerNorm
              (rows 0..S-1, or RoBERTa's rows counted past the padding id; none with relative
              positions), then the E -> H projection where the config has one
  layers:     LN(x + attention(x)), LN(x + FFN(x)) in `config.layer_schedule()` order, the
              shared layers of ALBERT reading the same initializers each time; attention adds
              the relative terms before or after the scale as the family says, and the mask
              adder (`Numerics.mask_value` of float32) where a key is padding or, in a causal
              model, after the query
  MLM head:   LN(act(h @ transform + b)) (@ word projection^T) @ decoder^T + bias  -> logits [B, S, V]
The decoder of a tied model is the word-embedding initializer itself (one tensor, read twice).

float16 (`Precision.FLOAT16`): weights are stored and multiplied in float16, while every
LayerNorm (its input sum, gamma and beta included) and the attention softmax (scores, scale,
mask adder and relative terms) are computed in float32, with casts around them; the logits are
returned as float32 in both precisions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
from onnx import NodeProto, TensorProto, ValueInfoProto, helper, numpy_helper

from ... import families
from ...config import BertConfig
from ...runtime.numerics import GELU_ERF, GELU_TANH, GELU_TANH_CUBIC, GELU_TANH_SCALE, RELU, Numerics

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


@dataclass(frozen=True)
class Initializer:
    """A weight of the graph: the tree's canonical tensor `name`, stored as `dtype`."""

    name: str
    dtype: np.dtype


@dataclass
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
    ("pre_layer_norm", lambda config: config.pre_layer_norm),
    ("final_layer_norm", lambda config: config.final_layer_norm),
    ("embedding_layer_norm", lambda config: not config.embedding_layer_norm),
    ("position_embedding_type", lambda config: not config.position_table),
    ("rotary_value", lambda config: config.rotary_value),
    ("token_dropout", lambda config: config.token_dropout),
    # ModernBERT's sliding-window layers, GeGLU, bias-free layers and bare first layer.
    ("local_attention_layers", lambda config: bool(config.local_attention_layers)),
    ("gated_ffn", lambda config: config.gated_ffn),
    *((flag, lambda config, flag=flag: not getattr(config, flag))
      for flag in ("norm_bias", "attention_bias", "ffn_bias", "mlm_transform_bias", "output_bias",
                   "first_attention_norm")),
    ("fused_qkv", lambda config: config.fused_qkv),
    ("relative_attention", lambda config: config.relative_attention),
    ("pos_att_type", lambda config: bool(config.pos_att_type)),
    ("position_biased_input", lambda config: not config.position_biased_input),
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
        """x @ kernel + bias, kernel [in, out]: [..., in] -> [..., out]."""
        product = self.op("MatMul", x, self.weight(f"{prefix}.kernel"), hint=f"{prefix}.product")
        return self.op("Add", product, self.weight(f"{prefix}.bias"), hint=prefix)

    def layer_norm(self, terms: list[str], prefix: str, eps: float | None = None) -> str:
        """LayerNorm over the last axis of the sum of `terms`, summed and normalized in float32
        (gamma and beta stored float32), returned in the export's precision; `eps` the Numerics'
        epsilon unless given (a head normalized otherwise than its encoder, as keras-hub's)."""
        total = self.float32(terms[0])
        for term in terms[1:]:
            total = self.op("Add", total, self.float32(term))
        normed = self.op("LayerNormalization", total, self.weight(f"{prefix}.gamma", keep_float32=True),
                         self.weight(f"{prefix}.beta", keep_float32=True), axis=-1,
                         epsilon=float(self.numerics.layer_norm_eps if eps is None else eps))
        return self.compute_dtype(normed)

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
        x = self.embeddings(ids, types, seq_len)
        adder = self.mask_adder(mask, seq_len)
        distances = self.distance_index(seq_len) if config.relative_positions else None
        for layer in config.layer_schedule():
            x = self.layer(x, adder, distances, seq_len, f"layers.{layer}")
        logits = self.float32(self.mlm_logits(x, decoder, decoder_bias))
        self.graph.nodes.append(helper.make_node("Identity", [logits], [LOGITS], name="logits"))
        self.graph.outputs.append(helper.make_tensor_value_info(LOGITS, TensorProto.FLOAT,
                                                                ["batch", "sequence", config.vocab_size]))
        return self.graph

    def _input(self, name: str) -> str:
        self.graph.inputs.append(helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"]))
        return name

    def embeddings(self, ids: str, types: str | None, seq_len: str) -> str:
        """[B, S] ids -> [B, S, H] (`NumpyBert.encode` before the layers)."""
        config = self.config
        x = self.op("Gather", self.weight("embeddings.word"), ids)  # [B, S, E]
        if config.word_projection:
            x = self.op("MatMul", x, self.weight("embeddings.word_projection.kernel"))  # [B, S, H]
        terms = [x]
        if types is not None:
            terms.append(self.op("Gather", self.weight("embeddings.token_type"), types))
        if not config.relative_positions:
            terms.append(self.op("Gather", self.weight("embeddings.position"), self.position_ids(ids, seq_len)))
        x = self.layer_norm(terms, "embeddings.norm")  # [B, S, W]
        return self.dense(x, "embeddings.projection") if config.embedding_projection else x

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
        hidden = self.numerics.mask_value(float(np.finfo(np.float32).min))
        return self.op("Where", visible, self.constant(0.0, np.float32), self.constant(hidden, np.float32))

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

    def layer(self, x: str, adder: str, distances, seq_len: str, prefix: str) -> str:
        """One encoder layer: [B, S, H] -> [B, S, H]."""
        attended = self.attention(x, adder, distances, f"{prefix}.attention")
        x = self.layer_norm([x, attended], f"{prefix}.attention_norm")
        hidden = self.activation(self.dense(x, f"{prefix}.ffn.intermediate"))  # [B, S, I]
        return self.layer_norm([x, self.dense(hidden, f"{prefix}.ffn.output")], f"{prefix}.ffn_norm")

    def attention(self, x: str, adder: str, distances, prefix: str) -> str:
        """Multi-head self-attention with its output projection (`NumpyBert._attention`)."""
        heads = self.config.num_attention_heads
        width = self.config.hidden_size // heads
        split = self.constant([0, 0, heads, width], np.int64)

        def by_head(t: str) -> str:  # [B, S, H] -> [B, A, S, D]
            return self.op("Transpose", self.op("Reshape", t, split), perm=[0, 2, 1, 3])

        query = by_head(self.dense(x, f"{prefix}.query"))
        key = by_head(self.dense(x, f"{prefix}.key"))
        value = by_head(self.dense(x, f"{prefix}.value"))
        scores = self.float32(self.op("MatMul", query, self.op("Transpose", key, perm=[0, 1, 3, 2])))  # [B, A, S, S]
        scaled = families.of(self.config).relative_terms_scaled
        if distances is not None and scaled:
            scores = self.op("Add", scores, self.relative_scores(query, key, scores, distances, prefix))
        scores = self.op("Mul", scores, self.constant(1.0 / math.sqrt(width), np.float32))
        scores = self.op("Add", scores, adder)
        if distances is not None and not scaled:
            scores = self.op("Add", scores, self.relative_scores(query, key, scores, distances, prefix))
        probs = self.compute_dtype(self.op("Softmax", scores, axis=-1))
        context = self.op("Transpose", self.op("MatMul", probs, value), perm=[0, 2, 1, 3])  # [B, S, A, D]
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
        transformed = self.activation(self.dense(x, "mlm.transform"), self.config.mlm_hidden_act)
        h = self.layer_norm([transformed], "mlm.norm", eps=self.config.mlm_layer_norm_eps)  # [B, S, W]
        if self.config.word_projection:  # back through brightmart's projection: [.., H] @ P^T -> [.., E]
            h = self.op("MatMul", h, self.op("Transpose", self.weight("embeddings.word_projection.kernel"),
                                             perm=[1, 0]))
        rows = self.op("Reshape", h, self.constant([-1, self.config.embedding_width], np.int64))  # [B*S, E]
        logits = self.op("Gemm", rows, self.weight(decoder), self.weight(decoder_bias), transB=1)  # [B*S, V]
        shape = self.op("Concat", self.op("Shape", x, start=0, end=2),
                        self.constant([self.config.vocab_size], np.int64), axis=0)
        return self.op("Reshape", logits, shape)
