"""The canonical parameter tree every format reads into and writes from.

Canonical names are format-neutral (`layers.{i}.attention.query.kernel`); format spellings live
only in each format's table. One fixed layout: every dense kernel is `[in, out]` (x @ kernel), as
in google-research/bert and Keras; embedding tables (and a stored MLM decoder) are `[V, H]`-like
row tables; the NSP kernel is `[H, 2]`. A format whose layout differs (Hugging Face's `[out, in]`
Linear weights, Google's `[2, H]` NSP weights) says so in its table.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from .config import BertConfig, Heads, position_projection_terms
from .records import field, record
from .tensor import LazyTensor


@record
class Role:
    """One canonical parameter.

    Attributes:
      template: canonical name; `{i}` stands for the layer index.
      component: the component whose count it belongs to (see `config.expected_components`).
      shape: dimension letters of `config.BertConfig.dims`, or literal ints.
      head: None for the encoder, else "pooler", "mlm" or "nsp".
      copy_of: for a tensor a format may store twice, the canonical name it must equal.
      conditional: part of a bert4keras conditional LayerNorm (present only when C > 0).
    """

    template: str
    component: str
    shape: tuple[str | int, ...]
    head: str | None = None
    copy_of: str | None = None
    conditional: bool = False

    @property
    def per_layer(self) -> bool:
        return "{i}" in self.template

    def name(self, layer: int | None = None) -> str:
        return self.template.format(i=layer) if self.per_layer else self.template

    def expected_shape(self, config: BertConfig, dims: dict[str, int] | None = None) -> tuple[int, ...]:
        """The shape `config` gives this role; `dims`, the config's `dims()` once for many roles."""
        dims = config.dims() if dims is None else dims
        return tuple(d if isinstance(d, int) else dims[d] for d in self.shape)


def _norm(prefix: str, component: str, head: str | None = None, width: str = "H") -> tuple[Role, ...]:
    return (
        Role(f"{prefix}.gamma", component, (width,), head),
        Role(f"{prefix}.beta", component, (width,), head),
        Role(f"{prefix}.gamma_cond", component, ("C", width), head, conditional=True),
        Role(f"{prefix}.beta_cond", component, ("C", width), head, conditional=True),
    )


def _dense(prefix: str, component: str, n_in: str, n_out: str | int, head: str | None = None) -> tuple[Role, ...]:
    return (
        Role(f"{prefix}.kernel", component, (n_in, n_out), head),
        Role(f"{prefix}.bias", component, (n_out,), head),
    )


#: Every canonical parameter, in model order. The word table is E wide and the other tables W
#: wide (E = W = H unless the family factorizes its embeddings: ALBERT and ELECTRA sum them at
#: W = E and then project E -> H; brightmart's albert_zh projects the word vectors alone, with a
#: bias-free [E, H] matrix, and sums at W = H: `BertConfig.word_projection`); `layers.{i}` are the
#: stored layers (ALBERT applies them several times: `BertConfig.layer_schedule`).
ROLES: tuple[Role, ...] = (
    Role("embeddings.word", "embeddings.word", ("V", "E")),
    # brightmart's word_embeddings_2: word vectors [*, E] -> [*, H]; its MLM head maps back with
    # the transpose (H -> E) before the tied decoder. No bias.
    Role("embeddings.word_projection.kernel", "embeddings.word_projection", ("E", "H")),
    Role("embeddings.token_type", "embeddings.token_type", ("T", "W")),
    Role("embeddings.position", "embeddings.position", ("P", "W")),
    *_norm("embeddings.norm", "embeddings.norm", width="W"),
    *_dense("embeddings.projection", "embeddings.projection", "E", "H"),
    *_dense("layers.{i}.attention.query", "layers.{i}.attention", "H", "H"),
    *_dense("layers.{i}.attention.key", "layers.{i}.attention", "H", "H"),
    *_dense("layers.{i}.attention.value", "layers.{i}.attention", "H", "H"),
    *_dense("layers.{i}.attention.output", "layers.{i}.attention", "H", "H"),
    # ModernBERT's queries, keys and values as one matrix (`BertConfig.fused_qkv`): its columns
    # are the query's, then the key's, then the value's, head by head within each.
    *_dense("layers.{i}.attention.qkv", "layers.{i}.attention", "H", "3H"),
    # transformers 4's relative positions (`position_embedding_type` relative_key[_query]): one
    # embedding row per distance -(P-1)..P-1, D wide, shared by the layer's heads.
    Role("layers.{i}.attention.distance_embedding", "layers.{i}.attention", ("R", "D")),
    # DeBERTa's projections of the relative embeddings where they are not the layer's key and
    # query (`share_att_key` false): for the c2p terms and for the p2c terms.
    *_dense("layers.{i}.attention.position_key", "layers.{i}.attention", "H", "H"),
    *_dense("layers.{i}.attention.position_query", "layers.{i}.attention", "H", "H"),
    *_norm("layers.{i}.attention_norm", "layers.{i}.attention_norm"),
    *_dense("layers.{i}.ffn.intermediate", "layers.{i}.ffn", "H", "I"),
    # A gated feed-forward's input (`BertConfig.gated_ffn`, ModernBERT's `mlp.Wi`): H -> 2I, the
    # activation's input in the first I columns and the gate in the last I.
    *_dense("layers.{i}.ffn.gated_intermediate", "layers.{i}.ffn", "H", "2I"),
    *_dense("layers.{i}.ffn.output", "layers.{i}.ffn", "I", "H"),
    *_norm("layers.{i}.ffn_norm", "layers.{i}.ffn_norm"),
    # DeBERTa's relative embeddings, shared by every layer: 2 x span rows (`BertConfig.relative_span`),
    # and their LayerNorm (`relative_embedding_norm`).
    Role("relative_embeddings", "relative_embeddings", ("K", "H")),
    *_norm("relative_norm", "relative_norm"),
    # A pre-LayerNorm encoder's LayerNorm after its last layer (`BertConfig.final_layer_norm`).
    *_norm("final_norm", "final_norm"),
    *_dense("pooler", "pooler", "H", "H", head="pooler"),
    *_dense("mlm.transform", "mlm.transform", "H", "W", head="mlm"),
    *_norm("mlm.norm", "mlm.norm", head="mlm", width="W"),
    Role("mlm.output_bias", "mlm.output_bias", ("V",), head="mlm"),
    # The decoder is the word-embedding table (tying); a file may store it anyway, as a copy
    # (tie_word_embeddings true) or as its own matrix (false). Same [V, E] layout as the table.
    Role("mlm.decoder", "mlm.decoder", ("V", "E"), head="mlm", copy_of="embeddings.word"),
    # transformers stores the decoder's own bias too: the same tensor as the output bias when
    # tied, the bias the untied decoder actually applies when not.
    Role("mlm.decoder_bias", "mlm.decoder", ("V",), head="mlm", copy_of="mlm.output_bias"),
    *_dense("nsp", "nsp", "H", 2, head="nsp"),
    # ALBERT's sentence-order prediction: NSP's shape on the pooled output, another task.
    *_dense("sop", "sop", "H", 2, head="sop"),
    # ELECTRA's discriminator: a dense layer and a one-logit output per token (replaced or not).
    *_dense("rtd.dense", "rtd", "H", "H", head="rtd"),
    *_dense("rtd.output", "rtd", "H", 1, head="rtd"),
    # ESM's contact prediction: a logistic regression over the L x A attention maps.
    *_dense("contact", "contact", "N", 1, head="contact"),
)

#: Heads in report order (see `config.Heads`).
HEAD_NAMES = ("pooler", "mlm", "nsp", "sop", "rtd", "contact")

_BY_TEMPLATE = {role.template: role for role in ROLES}
_LAYER_INDEX = re.compile(r"^layers\.(\d+)\.")


@cache  # asked of every name several times per command (order, heads, shapes, counts)
def role_of(name: str) -> Role:
    """The role of a canonical name such as `layers.3.ffn.output.bias`; KeyError if none."""
    match = _LAYER_INDEX.match(name)
    if match:
        return _BY_TEMPLATE[name.replace(match.group(0), "layers.{i}.", 1)]
    return _BY_TEMPLATE[name]


def layer_of(name: str) -> int | None:
    match = _LAYER_INDEX.match(name)
    return int(match.group(1)) if match else None


def component_of(name: str) -> str:
    layer = layer_of(name)
    component = role_of(name).component
    return component.format(i=layer) if layer is not None else component


#: Roles a model has because of a config field's value: a target with no place for them has
#: none for the field's value either, and says so by the field's name.
FIELD_ROLES = {"layers.{i}.attention.distance_embedding": "position_embedding_type",
               "relative_embeddings": "relative_attention", "relative_norm.gamma": "relative_embedding_norm",
               "relative_norm.beta": "relative_embedding_norm", "layers.{i}.attention.position_key.kernel": "share_att_key",
               "layers.{i}.attention.position_key.bias": "share_att_key",
               "layers.{i}.attention.position_query.kernel": "share_att_key",
               "layers.{i}.attention.position_query.bias": "share_att_key"}


def fields_behind(names: list[str]) -> list[str]:
    """The config fields (`FIELD_ROLES`) whose values give a model the parameters `names`."""
    return sorted({FIELD_ROLES[role_of(n).template] for n in names if role_of(n).template in FIELD_ROLES})


def canonical_names(config: BertConfig, heads: Heads, *, conditional: bool = False) -> list[str]:
    """Every canonical name a model with `config` and `heads` has, in model order.

    Stored copies (`copy_of`) are not listed, except an untied decoder, which is a parameter.
    """
    present = {**heads.as_dict(), None: True}
    names = []
    for role in ROLES:
        if not present[role.head] or (role.conditional and not conditional):
            continue
        if role.component == "embeddings.projection" and not config.embedding_projection:
            continue
        if role.component == "embeddings.word_projection" and not config.word_projection:
            continue
        if role.template.endswith("distance_embedding") and not config.relative_positions:
            continue
        if role.component == "embeddings.position" and not config.position_table:
            continue
        if role.component == "embeddings.norm" and not config.embedding_layer_norm:
            continue
        if role.component == "final_norm" and not config.final_layer_norm:
            continue
        if role.component == "embeddings.token_type" and config.type_vocab_size == 0:
            continue  # no token types (fairseq's RoBERTa, bert4keras' segment_vocab_size=0)
        if not _has_role(config, role.template):
            continue
        if role.copy_of and not ((role.template == "mlm.decoder" and heads.untied_decoder)
                                 or (role.template == "mlm.decoder_bias" and heads.untied_decoder_bias)):
            continue
        if role.per_layer:
            first = 1 if role.component == "layers.{i}.attention_norm" and not config.first_attention_norm else 0
            names.extend(role.name(i) for i in range(first, config.stored_layers))
        else:
            names.append(role.name())
    # Per-layer roles were emitted role-major; put them in model (layer-major) order.
    return sorted(names, key=model_order_key)


#: The roles of the fused and of the separate queries, keys and values.
_SEPARATE_QKV = tuple(f"layers.{{i}}.attention.{part}.{kind}" for part in ("query", "key", "value")
                      for kind in ("kernel", "bias"))
_FUSED_QKV = ("layers.{i}.attention.qkv.kernel", "layers.{i}.attention.qkv.bias")
#: Which `BertConfig` bias flag removes which roles' biases (when false).
_BIAS_FLAGS = {
    "attention_bias": ("layers.{i}.attention.query.bias", "layers.{i}.attention.key.bias",
                       "layers.{i}.attention.value.bias", "layers.{i}.attention.qkv.bias",
                       "layers.{i}.attention.output.bias"),
    "ffn_bias": ("layers.{i}.ffn.intermediate.bias", "layers.{i}.ffn.gated_intermediate.bias",
                 "layers.{i}.ffn.output.bias"),
    "mlm_transform_bias": ("mlm.transform.bias",),
    "output_bias": ("mlm.output_bias",),
}


def _has_role(config: BertConfig, template: str) -> bool:
    """Whether a model with `config` has the role at all: queries, keys and values stored fused
    or apart, a gated or a plain feed-forward input, biases and LayerNorm betas where it has them,
    DeBERTa's relative embeddings and position projections where its config computes them."""
    if template in _SEPARATE_QKV and config.fused_qkv or template in _FUSED_QKV and not config.fused_qkv:
        return False
    gated = template.startswith("layers.{i}.ffn.gated_intermediate.")
    if template.startswith("layers.{i}.ffn.intermediate.") and config.gated_ffn or gated and not config.gated_ffn:
        return False
    if template.endswith(".beta") and not config.norm_bias or template.endswith(".gamma") and not config.norm_scale:
        return False
    if template.startswith(("mlm.transform.", "mlm.norm.")) and not config.mlm_transform:
        return False
    if _disentangled_role_absent(template, config):
        return False
    return not any(template in templates and not getattr(config, flag) for flag, templates in _BIAS_FLAGS.items())


def has_parameter(config: BertConfig, name: str) -> bool:
    """Whether a model with `config` has the canonical parameter `name` at all, whatever heads it
    carries (a ModernBERT has no `mlm.transform.bias` unless `classifier_bias`, no
    `layers.0.attention_norm`): what a check may require of a file."""
    role = role_of(name)
    if role.component == "layers.{i}.attention_norm" and layer_of(name) == 0 and not config.first_attention_norm:
        return False
    return _has_role(config, role.template)


#: DeBERTa's roles, each with the config's test for its presence.
_DISENTANGLED_ROLES = {
    "relative_embeddings": lambda config: config.relative_attention,
    "relative_norm": lambda config: config.relative_embedding_norm,
    "layers.{i}.attention.position_key": lambda config: "c2p" in position_projection_terms(config),
    "layers.{i}.attention.position_query": lambda config: "p2c" in position_projection_terms(config),
}


def _disentangled_role_absent(template: str, config: BertConfig) -> bool:
    """Whether `template` is one of DeBERTa's roles (or a tensor of one) that `config` does not have."""
    for prefix, present in _DISENTANGLED_ROLES.items():
        if template == prefix or template.startswith(prefix + "."):
            return not present(config)
    return False


#: Sort ranks for `model_order_key`: the encoder's roles before each head's, then each role's place in ROLES.
_HEAD_RANK = {None: 0, **{head: rank for rank, head in enumerate(HEAD_NAMES, start=1)}}
_ROLE_RANK = {role.template: rank for rank, role in enumerate(ROLES)}


def model_order_key(name: str) -> tuple[int, int, int]:
    role = role_of(name)
    layer = layer_of(name)
    section = 0 if name.startswith("embeddings.") else 1 if layer is not None else 2
    return (section * 10 + _HEAD_RANK[role.head], layer if layer is not None else -1, _ROLE_RANK[role.template])


# --- the tree ---------------------------------------------------------------------------


@record(frozen=False)
class Parameter:
    """A canonical parameter as found in a file.

    `tensor` is already in canonical layout (the format's table applied its transposes);
    `source_shape` is the shape under its `source` name in the file (before those transposes).
    `shared_with` names another canonical parameter this one shares storage with in the file
    (tying by identity, as in a `pytorch_model.bin`).
    """

    name: str
    tensor: LazyTensor
    source: str
    file: Path
    shared_with: str | None = None
    source_shape: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.source_shape is None:
            self.source_shape = tuple(self.tensor.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.tensor.shape)


@record
class Ignored:
    """An entry of a checkpoint that is not a BERT parameter, with why it was set aside.

    `copy_of` names the canonical parameter this entry is a second stored copy of, when the
    format's framework loads the tree's copy over it (transformers' TF loader overwrites the
    encoder's embeddings with the MLM head's copies); `tensor` is then its data, which
    `checks.copies` compares with the tree's by value. `unread` is an entry that no row and no
    known kind of non-model entry names: the model's computation may read it, so the commands that
    compute or convert refuse it unless the user accepts the loss (`checks.contract`).
    """

    name: str
    reason: str
    parameters: int
    dtype: str = ""
    shape: tuple[int, ...] = ()
    copy_of: str | None = None
    tensor: LazyTensor | None = field(default=None, compare=False, repr=False)
    unread: bool = False

    def as_dict(self) -> dict:
        return {"name": self.name, "reason": self.reason, "parameters": self.parameters,
                "dtype": self.dtype, "shape": list(self.shape)}


@record(frozen=False)
class ParameterTree:
    """A BERT checkpoint in canonical form: config, parameters (lazy), and what was set aside.

    Attributes:
      format: the format it was read from ("hf-safetensors", "google-tf", ...).
      path: the file or directory it was read from.
      config: hyper-parameters (from a config file, flags, or the tensors' shapes).
      params: canonical name -> Parameter, in model order.
      ignored: entries that are not BERT parameters (buffers, optimizer slots, other heads).
      files: every file the tree reads from (for "inputs untouched" checks and reports).
      vocab: a vocab.txt found beside the checkpoint, if any.
      scope: the name prefix the BERT was found under in the file ("module/" for a TF-Hub
        fine-tune), "" when its names are the format's own.
      model: which of a checkpoint's models this is, when it holds more than one ("generator"
        or "discriminator" of an ELECTRA pre-training checkpoint); None when it holds one.
      copies: the other checkpoints of the same model in its directory, not read (a Hugging Face
        snapshot's `pytorch_model.bin` beside the `model.safetensors` read); `verify` compares them.
      notes: sentences on how the path given led to the file read (a repo id resolved in the
        Hugging Face cache, the copy chosen), which every report carries.
    """

    format: str
    path: Path
    config: BertConfig
    params: dict[str, Parameter]
    ignored: list[Ignored] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    vocab: Path | None = None
    scope: str = ""
    model: str | None = None
    copies: tuple[Path, ...] = ()
    notes: tuple[str, ...] = ()

    def __contains__(self, name: str) -> bool:
        return name in self.params

    def __getitem__(self, name: str) -> Parameter:
        return self.params[name]

    def __iter__(self) -> Iterator[Parameter]:
        return iter(self.params.values())

    @property
    def heads(self) -> Heads:
        """The heads present, judged from which canonical names the file holds."""
        heads_present = {role_of(name).head for name in self.params}
        if self.config.parameter_free_mlm:  # RoFormer-v2's: the tied table alone, nothing to find
            heads_present.add("mlm")
        return Heads(
            **{head: head in heads_present for head in HEAD_NAMES},
            untied_decoder=self.has_untied_decoder,
            untied_decoder_bias=self.has_untied_decoder_bias,
        )

    @property
    def has_untied_decoder(self) -> bool:
        """A stored decoder that is a parameter of its own: the config says the embeddings are
        not tied, and the file does not share the decoder's storage with the embeddings."""
        decoder = self.params.get("mlm.decoder")
        return (decoder is not None and decoder.shared_with is None
                and not self.config.tie_word_embeddings)

    @property
    def has_untied_decoder_bias(self) -> bool:
        """An untied decoder's own stored bias (transformers keeps it apart from the output
        bias when the embeddings are not tied)."""
        bias = self.params.get("mlm.decoder_bias")
        return self.has_untied_decoder and bias is not None and bias.shared_with is None

    def is_counted(self, name: str) -> bool:
        """Whether `name` counts as a parameter of its own (a tied copy does not)."""
        if role_of(name).copy_of is None:
            return True
        if name == "mlm.decoder":
            return self.has_untied_decoder
        return name == "mlm.decoder_bias" and self.has_untied_decoder_bias

    @property
    def conditional(self) -> bool:
        return any(role_of(n).conditional for n in self.params)

    def missing_untied_decoder(self) -> str | None:
        """Why the MLM head lacks its decoder, when the config says the decoder is untied
        (tie_word_embeddings false) and the file stores none: a masked-LM loader would initialize
        it fresh, so no runtime may stand in the word embeddings for it."""
        if self.config.tie_word_embeddings or not self.heads.mlm or "mlm.decoder" in self.params:
            return None
        return ("the config says the MLM decoder is untied (tie_word_embeddings false), but the file stores no "
                "decoder matrix (mlm.decoder): a masked-LM loader would initialize it fresh")

    def missing_condition(self) -> str | None:
        """Why the config does not fit, when it states a condition size and no conditional
        LayerNorm kernel is stored."""
        if not self.config.conditional_size or self.conditional:
            return None
        return (f"the config states conditional_size {self.config.conditional_size}, but the file has no "
                f"conditional LayerNorm kernels: the config is not this checkpoint's")
