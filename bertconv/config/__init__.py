"""BertConfig, and the closed-form parameter count of every component.

Dimension letters used across bertconv:
  V vocab size, H hidden size, L layers, A attention heads (H % A == 0), I intermediate size,
  P max positions, T token types (segments), C condition size (bert4keras conditional LayerNorm),
  E embedding size (ALBERT and ELECTRA factorize the embeddings: [V, E] tables projected E -> H;
  E = H otherwise), W the width at which the embeddings are summed and normalized, which is
  also the MLM transform's output width: E, except in brightmart's albert_zh, whose word vectors
  alone are projected E -> H before H-wide position and token-type vectors are added (W = H).

One config serves the BERT family. What differs between BERT, ALBERT, ELECTRA and RoBERTa is
stated in fields, never in parallel classes: `embedding_size` and `embedding_projection`
(factorized embeddings), `word_projection` (brightmart albert_zh's other factorization: see
`BertConfig.word_projection`), `num_hidden_groups` x `inner_group_num` (ALBERT's stored layers,
shared across the L applied ones), `position_offset` (RoBERTa's first position row),
`pre_layer_norm`, `final_layer_norm` and `embedding_layer_norm` (where the LayerNorms are:
Megatron-BERT and ESM normalize before each sublayer and after the last layer),
`position_embedding_type` and `is_decoder` (how attention sees positions and keys), and
`model_type`, which names the family (`bertconv.families`) for writers and messages only.
Reading and writing config files is `config/dialects.py`, as each family declares its keys.

Activation names are bertconv's own and unambiguous: "gelu" is the exact erf form, "gelu_tanh" the
tanh approximation Google trained BERT with, "relu".
"""

from __future__ import annotations

import json
from pathlib import Path

from ..records import field, fields, record, replace

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

#: BERT's per-head width; used to state a default head count when nothing else says it.
DEFAULT_HEAD_SIZE = 64
#: LayerNorm epsilon of google-research/bert, Hugging Face BERT and bert4keras alike.
LAYER_NORM_EPS = 1e-12

ACTIVATIONS = ("gelu", "gelu_tanh", "relu")
#: The provenance of a field neither a config nor the shapes give (an ALBERT's applied layer
#: count without its config): its value is a placeholder no command computes or converts with.
UNKNOWN = "unknown"


@record
class BertConfig:
    """The hyper-parameters of a BERT model, whatever file they came from.

    `provenance` says where each field came from ("file", "shapes", "flag", "default"), so that
    reports can tell a stated value from a guessed one. It does not take part in equality.
    """

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int
    hidden_act: str = "gelu"
    layer_norm_eps: float = LAYER_NORM_EPS
    tie_word_embeddings: bool = True
    conditional_size: int | None = None
    model_type: str = "bert"
    embedding_size: int | None = None
    embedding_projection: bool = False
    num_hidden_groups: int | None = None
    inner_group_num: int | None = None
    position_offset: int = 0
    #: brightmart/albert_zh's factorization (modeling.py `embedding_lookup_factorized`): the
    #: word vectors [*, E] alone are projected to H by a bias-free [E, H] matrix
    #: (`word_embeddings_2`), position and token-type tables are [*, H] and the embedding
    #: LayerNorm is over H; its MLM head (run_pretraining.py `get_masked_lm_output`) transforms
    #: H -> H and maps back to E through the same matrix, transposed, before the tied [V, E]
    #: decoder. Google's ALBERT (`embedding_projection`) sums and normalizes at E, then projects.
    word_projection: bool = False
    #: How attention sees positions (transformers 4 `BertSelfAttention`): "absolute" (the
    #: embeddings' position table alone), or "relative_key" / "relative_key_query", which add
    #: per-layer `distance_embedding` tables [2P - 1, D] to the scores (the position table is
    #: then stored but not added to the embeddings).
    position_embedding_type: str = "absolute"
    #: Causal self-attention (transformers' `is_decoder`, as in `BertLMHeadModel`): each
    #: position attends to itself and the positions before it only.
    is_decoder: bool = False
    #: The MLM head's own activation and LayerNorm epsilon where they differ from the encoder's
    #: (None: the same). keras-hub's `MaskedLMHead` computes with its own: BertMaskedLM's head is
    #: erf GELU over a tanh-GELU encoder, and every keras-hub head normalizes with epsilon 1e-5.
    mlm_hidden_act: str | None = None
    mlm_layer_norm_eps: float | None = None
    #: Where each layer normalizes: after the residual sum, LN(x + f(x)) (BERT), or before its
    #: sublayer, x + f(LN(x)) (Megatron-BERT, ESM: `layers.{i}.attention_norm` before attention,
    #: `layers.{i}.ffn_norm` before the feed-forward).
    pre_layer_norm: bool = False
    #: A LayerNorm after the last layer (`final_norm`; pre-LayerNorm encoders have one).
    final_layer_norm: bool = False
    #: Whether the summed embeddings are normalized (`embeddings.norm`; Megatron-BERT's are not).
    embedding_layer_norm: bool = True
    #: The base of rotary positions (`position_embedding_type` "rotary", transformers'
    #: `rope_theta`): the query and key of each head rotated by position / base^(2j / D).
    rope_theta: float = 10000.0
    #: ESM's token-dropout rescaling (transformers `EsmEmbeddings`, `token_dropout`): the word
    #: vectors of `mask_token_id` are zeroed and every vector scaled by (1 - 0.15 * 0.8) /
    #: (1 - the sequence's ratio of mask tokens), as in training.
    token_dropout: bool = False
    mask_token_id: int | None = None
    #: Sliding-window attention (ModernBERT's `layer_types`, `local_attention`): the layers listed
    #: attend, from each query, only to the keys at most `local_attention // 2` positions away,
    #: and rotate with `local_rope_theta`; the other layers attend globally with `rope_theta`.
    local_attention_layers: tuple[int, ...] = ()
    local_attention: int = 0
    local_rope_theta: float = 10000.0
    #: A gated feed-forward (GLU; ModernBERT's GeGLU): `ffn.gated_intermediate` maps H -> 2I, and
    #: act(first half) * second half is the I-wide input of `ffn.output`.
    gated_ffn: bool = False
    #: Whether the linear layers and LayerNorms have biases (ModernBERT's `norm_bias`,
    #: `attention_bias`, `mlp_bias`, `classifier_bias` for the MLM transform, `decoder_bias` for
    #: the logits' output bias): without, the `.bias` and `.beta` parameters do not exist.
    norm_bias: bool = True
    attention_bias: bool = True
    ffn_bias: bool = True
    mlm_transform_bias: bool = True
    output_bias: bool = True
    #: Whether the first layer normalizes before attention: ModernBERT's layer 0 has no `attn_norm`
    #: (the embeddings were just normalized).
    first_attention_norm: bool = True
    #: Queries, keys and values as one stored [H, 3H] matrix (`attention.qkv`), as ModernBERT
    #: stores them: a matter of storage, not of what is computed.
    fused_qkv: bool = False
    #: RoFormer's rotary positions on the values too (transformers' `rotary_value`), beside the
    #: queries and keys (`position_embedding_type` "rotary_interleaved").
    rotary_value: bool = False
    #: NEZHA's farthest relative distance (`position_embedding_type` "sinusoidal_relative",
    #: transformers' `max_relative_position`): distances are clipped to +-K, and distance d reads
    #: row d + K of a fixed sinusoid table [2K + 1, D].
    max_relative_position: int = 64
    #: DeBERTa's disentangled attention (transformers `DisentangledSelfAttention`, `relative_attention`):
    #: the scores q k^T gain content-to-position terms q_l . Kr[d(l, r)] ("c2p") and
    #: position-to-content terms k_r . Qr[d(l, r)] ("p2c"), Kr and Qr the relative embeddings
    #: (`relative_embeddings`, LayerNorm'd by `relative_norm` where `relative_embedding_norm`)
    #: projected by the layer's key and query (`share_att_key`) or by projections of their own
    #: (`attention.position_key`, `attention.position_query`). d(l, r) is l - r, log-bucketed past
    #: `position_buckets` / 2 (0: not bucketed) up to `max_relative_positions`, then clamped to the
    #: span (`position_buckets`, else `max_relative_positions`); see `runtime/disentangled.py`.
    relative_attention: bool = False
    position_buckets: int = 0
    max_relative_positions: int = 0
    #: The disentangled terms ("c2p", "p2c"); each widens the scaling to 1 / sqrt(D (1 + terms)),
    #: even where `relative_attention` is off (transformers counts them either way).
    pos_att_type: tuple[str, ...] = ()
    share_att_key: bool = False
    relative_embedding_norm: bool = False
    #: Whether the position table is added to the embeddings (DeBERTa's `position_biased_input`;
    #: DeBERTa-v3 has none: its positions are the relative terms alone).
    position_biased_input: bool = True
    #: RoFormer-v2's norms (bert4keras `LayerNormalization(zero_mean=False)`, keras-hub `RoformerNorm`):
    #: x / sqrt(mean(x^2) + eps), not centred, scaled by gamma where `norm_scale` (keras-hub stores
    #: a scale, bert4keras none); without `norm_scale` the `.gamma` parameters do not exist. Whether
    #: the scale is stored is a matter of storage (a unit scale computes the same), not a computation field.
    rms_norm: bool = False
    norm_scale: bool = True
    #: Whether the MLM head transforms before its decoder (BERT's `mlm.transform`, activation and
    #: `mlm.norm`); RoFormer-v2's decodes the last hidden states directly with the tied table.
    mlm_transform: bool = True
    #: Config keys the file states that this model's computation in bertconv would not honour,
    #: with their values as JSON (`config.dialects.unread_keys`): every command that computes
    #: or converts refuses them unless the user accepts the loss.
    unread: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    provenance: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    #: The config file the values were read from, if any (an input the command reads).
    source: Path | None = field(default=None, compare=False, repr=False)

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def embedding_width(self) -> int:
        """E: the width of the embedding tables (H unless the family factorizes them)."""
        return self.embedding_size or self.hidden_size

    @property
    def summed_width(self) -> int:
        """W: the width at which word, position and token-type vectors are summed and normalized,
        and the MLM transform's output width: E, or H when the word vectors alone are projected."""
        return self.hidden_size if self.word_projection else self.embedding_width

    @property
    def shares_layers(self) -> bool:
        return self.num_hidden_groups is not None

    @property
    def stored_layers(self) -> int:
        """Transformer layers the checkpoint stores: G x J when layers are shared (ALBERT), else L."""
        if self.shares_layers:
            return self.num_hidden_groups * (self.inner_group_num or 1)
        return self.num_hidden_layers

    def layer_schedule(self) -> list[int]:
        """The stored layer each applied layer runs, in order.

        ALBERT (google-research/albert `transformer_model`, transformers `AlbertTransformer`):
        applied layer i runs group `int(i / (L / G))`, and a group runs its J inner layers in
        turn; stored layer g*J + j is inner layer j of group g. Without sharing: 0, 1, ..., L-1.
        """
        if not self.shares_layers:
            return list(range(self.num_hidden_layers))
        groups, inner = self.num_hidden_groups, self.inner_group_num or 1
        per_group = self.num_hidden_layers / groups
        return [int(i / per_group) * inner + j for i in range(self.num_hidden_layers) for j in range(inner)]

    def dims(self) -> dict[str, int]:
        """The dimension letters of the module docstring, for shape templates."""
        return {
            "V": self.vocab_size,
            "H": self.hidden_size,
            "L": self.num_hidden_layers,
            "A": self.num_attention_heads,
            "I": self.intermediate_size,
            "P": self.max_position_embeddings,
            "T": self.type_vocab_size,
            "C": self.conditional_size or 0,
            "E": self.embedding_width,
            "W": self.summed_width,
            "D": self.head_size if self.num_attention_heads else 0,
            "R": 2 * self.max_position_embeddings - 1,
            # ESM's contact head reads every attention map: one input per applied layer and head.
            "N": self.num_hidden_layers * self.num_attention_heads,
            # ModernBERT's fused queries, keys and values, and its gated feed-forward's two halves.
            "3H": 3 * self.hidden_size,
            "2I": 2 * self.intermediate_size,
            "K": 2 * self.relative_span,
        }

    @property
    def relative_span(self) -> int:
        """DeBERTa's span of relative distances: `position_buckets`, else `max_relative_positions`
        (the relative embeddings have 2 x span rows), 0 without disentangled attention."""
        if not self.relative_attention:
            return 0
        return self.position_buckets if self.position_buckets > 0 else self.max_relative_positions

    @property
    def parameter_free_mlm(self) -> bool:
        """Whether the MLM head has no parameter of its own (RoFormer-v2's: the tied table, no
        transform, no output bias): a model has it whatever its file holds."""
        return not self.mlm_transform and not self.output_bias and self.tie_word_embeddings

    @property
    def relative_positions(self) -> bool:
        """Whether attention adds learned relative-distance terms (`position_embedding_type`)."""
        return self.position_embedding_type in RELATIVE_POSITION_TYPES

    @property
    def rotary_positions(self) -> bool:
        """Whether queries and keys are rotated by their positions (no position table): ESM's
        halves, `rope_theta` its base."""
        return self.position_embedding_type == "rotary"

    @property
    def position_table(self) -> bool:
        """Whether the model has a learned position table (stored; added unless relative); the
        computed schemes (`COMPUTED_POSITION_TYPES`) have none, nor a DeBERTa without
        `position_biased_input`."""
        return self.position_embedding_type not in COMPUTED_POSITION_TYPES and self.position_biased_input

    def summary(self) -> dict[str, Any]:
        """The fields reports print (the `config` object of `audit --json`)."""
        out = {f.name: list(value) if isinstance(value := getattr(self, f.name), tuple) else value  # as JSON has it
               for f in fields(self) if f.name not in ("provenance", "source", "unread")}
        out["unread"] = {key: json.loads(value) for key, value in self.unread}
        out["provenance"] = dict(self.provenance)
        return out

    def with_overrides(self, **values: Any) -> "BertConfig":
        """A copy with `values` replaced, each recorded as coming from a flag."""
        given = {k: v for k, v in values.items() if v is not None}
        provenance = {**self.provenance, **{k: "flag" for k in given}}
        return replace(self, **given, provenance=provenance)

    def problems(self) -> list[str]:
        """What makes this config impossible, as sentences (empty when it is consistent)."""
        out = []
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size"):
            # No layers (an embeddings-only file) and no token types (fairseq's RoBERTa) are models too.
            if getattr(self, name) <= 0 and not (name in ("num_hidden_layers", "type_vocab_size")
                                                 and getattr(self, name) == 0):
                out.append(f"{name} is {getattr(self, name)}, must be positive")
        if self.num_attention_heads > 0 and self.hidden_size % self.num_attention_heads:
            out.append(
                f"hidden_size {self.hidden_size} is not divisible by "
                f"num_attention_heads {self.num_attention_heads}"
            )
        if self.hidden_act not in ACTIVATIONS:
            out.append(f"hidden_act {self.hidden_act!r} is not one of {ACTIVATIONS}")
        if self.shares_layers and (self.num_hidden_groups <= 0 or self.num_hidden_layers % self.num_hidden_groups):
            out.append(f"num_hidden_layers {self.num_hidden_layers} is not a multiple of num_hidden_groups "
                       f"{self.num_hidden_groups}")
        if self.word_projection and self.embedding_projection:
            out.append("word_projection and embedding_projection are both set: a model projects its "
                       "embeddings one way (brightmart's word-only projection, or the summed embeddings)")
        if self.token_dropout and self.mask_token_id is None:
            out.append("token_dropout is set but mask_token_id is not: the rescaling counts the mask tokens")
        if any(not 0 <= layer < self.num_hidden_layers for layer in self.local_attention_layers):
            out.append(f"local_attention_layers {list(self.local_attention_layers)} name layers outside 0.."
                       f"{self.num_hidden_layers - 1}")
        unknown_terms = [term for term in self.pos_att_type if term not in DISENTANGLED_TERMS]
        if unknown_terms:
            out.append(f"pos_att_type names {unknown_terms}, expected some of {list(DISENTANGLED_TERMS)}")
        if self.relative_attention and self.max_relative_positions < 1:
            out.append(f"max_relative_positions is {self.max_relative_positions}: disentangled attention needs "
                       f"a positive span")
        if self.position_embedding_type not in POSITION_EMBEDDING_TYPES:
            out.append(f"position_embedding_type {self.position_embedding_type!r} is not one of "
                       f"{POSITION_EMBEDDING_TYPES}")
        return out


#: The fields that decide what a model computes: a conversion keeps each exactly (or refuses),
#: and `diff` counts a difference in any of them as a difference of the models.
COMPUTATION_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                      "intermediate_size", "max_position_embeddings", "type_vocab_size", "hidden_act",
                      "layer_norm_eps", "tie_word_embeddings", "conditional_size", "model_type",
                      "embedding_size", "embedding_projection", "num_hidden_groups", "inner_group_num",
                      "position_offset", "word_projection", "position_embedding_type", "is_decoder",
                      "mlm_hidden_act", "mlm_layer_norm_eps", "pre_layer_norm", "final_layer_norm",
                      "embedding_layer_norm", "rope_theta", "token_dropout", "mask_token_id",
                      "local_attention_layers", "local_attention", "local_rope_theta", "gated_ffn", "norm_bias",
                      "attention_bias", "ffn_bias", "mlm_transform_bias", "output_bias", "first_attention_norm",
                      "rotary_value", "max_relative_position",
                      "relative_attention", "position_buckets", "max_relative_positions", "pos_att_type",
                      "share_att_key", "relative_embedding_norm", "position_biased_input", "rms_norm",
                      "mlm_transform")

#: transformers 4's relative `position_embedding_type` values (transformers 5's BERT knows "absolute" only).
RELATIVE_POSITION_TYPES = ("relative_key", "relative_key_query")
#: Position schemes computed from the position alone, with no parameters: rotary (ESM's halves),
#: rotary_interleaved (RoFormer's adjacent pairs, `runtime/sinusoids.py`), sinusoidal_relative
#: (NEZHA's functional relative positions, `runtime/sinusoids.py`).
COMPUTED_POSITION_TYPES = ("rotary", "rotary_interleaved", "sinusoidal_relative")
#: Every `position_embedding_type`: absolute, learned relative, or computed.
POSITION_EMBEDDING_TYPES = ("absolute", *RELATIVE_POSITION_TYPES, *COMPUTED_POSITION_TYPES)
#: DeBERTa's disentangled terms (`pos_att_type`): content-to-position, position-to-content.
DISENTANGLED_TERMS = ("c2p", "p2c")

def default_heads(hidden_size: int) -> int:
    """The stated default head count when no config gives one: H / 64 as in every released BERT
    (12 for H=768, 16 for 1024, 8 for 512), or 1 when H is not a multiple of 64."""
    if hidden_size >= DEFAULT_HEAD_SIZE and hidden_size % DEFAULT_HEAD_SIZE == 0:
        return hidden_size // DEFAULT_HEAD_SIZE
    return 1


# --- closed-form parameter counts ---------------------------------------------------------


@record
class Heads:
    """Which pre-training heads a checkpoint carries.

    `untied_decoder` is a stored MLM decoder matrix that is a parameter of its own
    (tie_word_embeddings false), and `untied_decoder_bias` the separate bias such a decoder may
    carry; tied ones are counted once, as the word embeddings and the output bias.
    """

    pooler: bool = True
    mlm: bool = True
    nsp: bool = True
    untied_decoder: bool = False
    untied_decoder_bias: bool = False
    sop: bool = False
    rtd: bool = False
    contact: bool = False

    def as_dict(self) -> dict[str, bool]:
        """Which heads are present: pooler, masked LM, next-sentence prediction, ALBERT's
        sentence-order prediction (NSP's shape, another meaning), ELECTRA's replaced-token
        detection (the discriminator's head), ESM's contact prediction (a logistic regression
        over every layer's attention maps, which the runtimes do not compute)."""
        return {"pooler": self.pooler, "mlm": self.mlm, "nsp": self.nsp, "sop": self.sop, "rtd": self.rtd,
                "contact": self.contact}


def expected_components(config: BertConfig, heads: Heads) -> dict[str, int]:
    """Closed-form parameter count of every component, in model order.

    Component names are bertconv's (see `tree.ROLES`); they correspond one to one to
    bert4keras layers. A conditional LayerNorm (C > 0) adds two bias-free [C, H] kernels.
    Factorized embeddings are [rows, E] with a projection E -> H; the MLM transform then maps
    H -> E. brightmart's word-only projection (`word_projection`) is a bias-free [E, H] matrix on
    the [V, E] word table, the other tables and the MLM transform being H wide (W = H); the MLM
    head reuses that matrix, so it is counted once. Shared layers (ALBERT) are counted once each:
    the stored layers, not the applied ones. ModernBERT's have no biases where its config says
    so (`norm_bias`, `attention_bias`, ...), a gated feed-forward H -> 2I -> H, and no LayerNorm
    before its first layer's attention.
    """
    V, H, I, P, T, C, E, W = (config.vocab_size, config.hidden_size, config.intermediate_size,
                              config.max_position_embeddings, config.type_vocab_size,
                              config.conditional_size or 0, config.embedding_width, config.summed_width)
    R, D = 2 * P - 1, config.hidden_size // max(config.num_attention_heads, 1)
    # A LayerNorm's gamma and (unless `norm_bias` is false) beta; a linear layer's kernel and bias.
    norm_terms = int(config.norm_scale) + int(config.norm_bias)
    norm = norm_terms * H + 2 * C * H
    attention_biases = 4 * H if config.attention_bias else 0
    ffn_inner = 2 * I if config.gated_ffn else I
    ffn = H * ffn_inner + I * H + ((ffn_inner + H) if config.ffn_bias else 0)
    out: dict[str, int] = {"embeddings.word": V * E}
    if config.word_projection:
        out["embeddings.word_projection"] = E * H
    out.update({
        "embeddings.token_type": T * W,
    })
    if config.position_table:
        out["embeddings.position"] = P * W
    if config.embedding_layer_norm:
        out["embeddings.norm"] = norm_terms * W + 2 * C * W
    if config.embedding_projection:
        out["embeddings.projection"] = E * H + H
    if config.relative_attention:
        out["relative_embeddings"] = 2 * config.relative_span * H
    if config.relative_embedding_norm:
        out["relative_norm"] = 2 * H
    position_projections = len(position_projection_terms(config))
    for i in range(config.stored_layers):
        out[f"layers.{i}.attention"] = (4 * H * H + attention_biases + (R * D if config.relative_positions else 0)
                                        + position_projections * (H * H + H))
        if i or config.first_attention_norm:
            out[f"layers.{i}.attention_norm"] = norm
        out[f"layers.{i}.ffn"] = ffn
        out[f"layers.{i}.ffn_norm"] = norm
    if config.final_layer_norm:
        out["final_norm"] = norm
    if heads.pooler:
        out["pooler"] = H * H + H
    if heads.mlm:
        if config.mlm_transform:
            out["mlm.transform"] = H * W + (W if config.mlm_transform_bias else 0)
            out["mlm.norm"] = norm_terms * W + 2 * C * W
        if config.output_bias:
            out["mlm.output_bias"] = V
        if heads.untied_decoder:
            out["mlm.decoder"] = V * E + (V if heads.untied_decoder_bias else 0)
    if heads.nsp:
        out["nsp"] = 2 * H + 2
    if heads.sop:
        out["sop"] = 2 * H + 2
    if heads.rtd:
        out["rtd"] = H * H + H + H + 1
    if heads.contact:
        out["contact"] = config.num_hidden_layers * config.num_attention_heads + 1
    return out


def position_projection_terms(config: BertConfig) -> tuple[str, ...]:
    """The disentangled terms whose relative embeddings a layer projects with a dense layer of its
    own (DeBERTa's `pos_key_proj` for c2p, `pos_query_proj` for p2c): none with shared keys."""
    if not config.relative_attention or config.share_att_key:
        return ()
    return tuple(term for term in DISENTANGLED_TERMS if term in config.pos_att_type)


def expected_parameters(config: BertConfig, heads: Heads) -> int:
    """Total closed-form parameter count; a tied decoder is counted once (as the embeddings)."""
    return sum(expected_components(config, heads).values())
