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
shared across the L applied ones), `position_offset` (RoBERTa's first position row), and
`model_type`, which names the family for writers and messages only.

Activation names are bertconv's own and unambiguous: "gelu" is the exact erf form, "gelu_tanh" the
tanh approximation Google trained BERT with, "relu". The same word "gelu" in a config file means
different functions depending on who wrote it (see `parse_activation`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from . import json_text
from .errors import bad_input

#: BERT's per-head width; used to state a default head count when nothing else says it.
DEFAULT_HEAD_SIZE = 64
#: LayerNorm epsilon of google-research/bert, Hugging Face BERT and bert4keras alike.
LAYER_NORM_EPS = 1e-12

ACTIVATIONS = ("gelu", "gelu_tanh", "relu")
#: Written into Google-style configs beside `hidden_act`, whose "gelu" means tanh to Google's
#: code and erf to bert4keras: it records which one the weights were trained with. Other tools
#: ignore unknown keys.
EXACT_ACTIVATION_KEY = "bertconv_hidden_act"

#: Hugging Face's names for each bertconv activation (first is the one bertconv writes).
_HF_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "relu": "relu",
}


def parse_activation(name: str, *, gelu_means: str) -> str:
    """bertconv's activation for a config's `hidden_act`.

    `gelu_means` is "gelu_tanh" for google-research/bert configs (its `gelu` is the tanh
    approximation) and "gelu" for Hugging Face and bert4keras (exact erf).
    """
    if name == "gelu":
        return gelu_means
    if name in _HF_ACTIVATIONS:
        return _HF_ACTIVATIONS[name]
    if name in ("gelu_erf",):
        return "gelu"
    if name == "gelu_tanh":
        return "gelu_tanh"
    raise ValueError(f"unknown activation {name!r}; bertconv knows {', '.join(ACTIVATIONS)}")


@dataclass(frozen=True)
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
    def family(self) -> str:
        """The model type, or the variant that computes otherwise than its family's own code
        ("albert_zh": brightmart's ALBERT), for writers, which write only what they name."""
        return "albert_zh" if self.word_projection else self.model_type

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
        }

    @property
    def relative_positions(self) -> bool:
        """Whether attention adds learned relative-distance terms (`position_embedding_type`)."""
        return self.position_embedding_type != "absolute"

    def summary(self) -> dict[str, Any]:
        """The fields reports print (the `config` object of `audit --json`)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("provenance", "source")}
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
        if self.position_embedding_type not in POSITION_EMBEDDING_TYPES:
            out.append(f"position_embedding_type {self.position_embedding_type!r} is not one of "
                       f"{POSITION_EMBEDDING_TYPES}")
        if self.model_type not in FAMILIES:
            out.append(f"model_type {self.model_type!r} is not one of {FAMILIES}")
        return out

    # --- reading and writing config files -------------------------------------------------

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, gelu_means: str, source: str = "file",
                  family: str = "bert") -> "BertConfig":
        """A config from a `bert_config.json` or Hugging Face `config.json` dictionary.

        Raises KeyError for a missing required field and ValueError naming the field for a value
        of the wrong JSON type or range; `load_config_file` turns both into messages naming the file.
        `family` is the model type when the dictionary names none (Google's configs do not).
        """
        missing = [k for k in REQUIRED_FIELDS if k not in data]
        if missing:
            raise KeyError(", ".join(missing))
        if data.get("ln_type") not in (None, "postln"):
            raise ValueError(f"ln_type is {json.dumps(data['ln_type'])}: brightmart albert_zh's pre-LayerNorm "
                             f"transformer (its xxlarge model), which normalizes before each sublayer and not "
                             f"after; bertconv's model is post-LayerNorm (\"postln\") only, and the names alone "
                             f"cannot tell the two apart")
        values: dict[str, Any] = {k: _size(data, k) for k in REQUIRED_FIELDS}
        values["type_vocab_size"] = _size(data, "type_vocab_size") if "type_vocab_size" in data else 2
        if data.get(EXACT_ACTIVATION_KEY) in ACTIVATIONS:
            values["hidden_act"] = data[EXACT_ACTIVATION_KEY]
        else:
            act = data.get("hidden_act", _DEFAULT_HIDDEN_ACT.get(data.get("model_type", family), "gelu"))
            if not isinstance(act, str):
                raise ValueError(f"hidden_act is {json.dumps(act)}, expected a string such as \"gelu\"")
            values["hidden_act"] = parse_activation(act, gelu_means=gelu_means)
        values["layer_norm_eps"] = _epsilon(data) if "layer_norm_eps" in data else LAYER_NORM_EPS
        tie = data.get("tie_word_embeddings", True)
        if not isinstance(tie, bool):
            raise ValueError(f"tie_word_embeddings is {json.dumps(tie)}, expected true or false")
        values["tie_word_embeddings"] = tie
        if data.get("conditional_size"):
            values["conditional_size"] = _size(data, "conditional_size")
        values.update(_family_fields(data, family))
        values.update(_attention_fields(data))
        provenance = {k: source if k in data else "default" for k in values}
        provenance["hidden_act"] = source if "hidden_act" in data else "default"
        return cls(**values, provenance=provenance)

    def to_google_dict(self) -> dict[str, Any]:
        """google-research/bert's `bert_config.json`.

        Its "gelu" is the tanh form to Google's code and erf to bert4keras, so the activation
        is also recorded exactly under `EXACT_ACTIVATION_KEY`.
        """
        return {
            "attention_probs_dropout_prob": 0.1,
            "hidden_act": {"gelu_tanh": "gelu", "gelu": "gelu", "relu": "relu"}[self.hidden_act],
            EXACT_ACTIVATION_KEY: self.hidden_act,
            "hidden_dropout_prob": 0.1,
            "hidden_size": self.hidden_size,
            "initializer_range": 0.02,
            "intermediate_size": self.intermediate_size,
            # Not a key of Google's own configs (its code hard-codes 1e-12); it ignores extra keys,
            # and every reader of bertconv's takes it, so a model trained with another epsilon keeps it.
            "layer_norm_eps": self.layer_norm_eps,
            "max_position_embeddings": self.max_position_embeddings,
            "num_attention_heads": self.num_attention_heads,
            "num_hidden_layers": self.num_hidden_layers,
            "type_vocab_size": self.type_vocab_size,
            "vocab_size": self.vocab_size,
            **self._family_dict(),
        }

    def _family_dict(self) -> dict[str, Any]:
        """The keys a family adds to BERT's, under the names its own configs use."""
        out: dict[str, Any] = {}
        if self.model_type != "bert":
            out["model_type"] = self.model_type
        if self.embedding_size is not None or self.model_type in ("albert", "electra"):
            # transformers' ALBERT and ELECTRA configs default to 128, not to H.
            out["embedding_size"] = self.embedding_width
        if self.shares_layers:
            out["num_hidden_groups"] = self.num_hidden_groups
            out["inner_group_num"] = self.inner_group_num or 1
        if self.position_offset:
            out["pad_token_id"] = self.position_offset - 1
        if self.word_projection:
            # brightmart's modeling.py reads `config.ln_type` and fails without it.
            out["ln_type"] = "postln"
        if self.model_type == "roberta":
            # fairseq's dictionary: <s> 0, <pad> 1, </s> 2 (RobertaConfig's defaults, stated).
            out.update(bos_token_id=0, eos_token_id=2)
        return out

    def to_bert4keras_dict(self) -> dict[str, Any]:
        """The `bert_config.json` that `build_transformer_model` takes: Google's keys, with the
        activation under bert4keras' own name (its "gelu" is the erf form, "gelu_tanh" the
        approximation), and the condition size of a conditional LayerNorm when there is one."""
        out = self.to_google_dict()
        out["hidden_act"] = {"gelu_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}[self.hidden_act]
        if self.conditional_size:
            out["conditional_size"] = self.conditional_size
        return out

    def to_hf_dict(self, *, architectures: list[str], dtype: str) -> dict[str, Any]:
        """Hugging Face's `config.json` for a BERT model."""
        return {
            "architectures": architectures,
            "attention_probs_dropout_prob": 0.1,
            "dtype": dtype,
            "hidden_act": {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}[self.hidden_act],
            "hidden_dropout_prob": 0.1,
            "hidden_size": self.hidden_size,
            "initializer_range": 0.02,
            "intermediate_size": self.intermediate_size,
            "layer_norm_eps": self.layer_norm_eps,
            "max_position_embeddings": self.max_position_embeddings,
            "model_type": self.model_type,
            "num_attention_heads": self.num_attention_heads,
            "num_hidden_layers": self.num_hidden_layers,
            "pad_token_id": 0,
            "tie_word_embeddings": self.tie_word_embeddings,
            "type_vocab_size": self.type_vocab_size,
            "vocab_size": self.vocab_size,
            **self._family_dict(),
            **self._attention_dict(),
        }

    def _attention_dict(self) -> dict[str, Any]:
        """`position_embedding_type` and `is_decoder`, where they differ from BERT's defaults
        (a format without these keys reads the defaults back, and `convert` refuses the loss)."""
        out: dict[str, Any] = {}
        if self.relative_positions:
            out["position_embedding_type"] = self.position_embedding_type
        if self.is_decoder:
            out["is_decoder"] = True
        return out


#: The fields that decide what a model computes: a conversion keeps each exactly (or refuses),
#: and `diff` counts a difference in any of them as a difference of the models.
COMPUTATION_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                      "intermediate_size", "max_position_embeddings", "type_vocab_size", "hidden_act",
                      "layer_norm_eps", "tie_word_embeddings", "conditional_size", "model_type",
                      "embedding_size", "embedding_projection", "num_hidden_groups", "inner_group_num",
                      "position_offset", "word_projection", "position_embedding_type", "is_decoder")

#: transformers 4's `position_embedding_type` values (transformers 5's BERT knows "absolute" only).
POSITION_EMBEDDING_TYPES = ("absolute", "relative_key", "relative_key_query")

#: A family's activation when its config states none (transformers' AlbertConfig: "gelu_new").
_DEFAULT_HIDDEN_ACT = {"albert": "gelu_new"}

#: The families one canonical tree holds.
FAMILIES = ("bert", "albert", "electra", "roberta")
#: How each family (and variant: `BertConfig.family`) is written in messages.
FAMILY_NAMES = {"bert": "BERT", "albert": "ALBERT", "electra": "ELECTRA", "roberta": "RoBERTa",
                "albert_zh": "brightmart albert_zh ALBERT (word vectors projected alone, E -> H, by "
                             "word_embeddings_2)"}

REQUIRED_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                   "intermediate_size", "max_position_embeddings")


def _family_fields(data: dict[str, Any], family: str) -> dict[str, Any]:
    """What a family's config adds to BERT's: embedding size, layer sharing, position offset.

    ALBERT always projects its embeddings (`embedding_hidden_mapping_in`, even when E = H);
    ELECTRA only when E differs from H (`embeddings_project`); RoBERTa's positions start after
    the padding index (`padding_idx + 1`), whose rows are never used.
    """
    model_type = data.get("model_type", family)
    if not isinstance(model_type, str):
        raise ValueError(f"model_type is {json.dumps(model_type)}, expected a string such as \"bert\"")
    out: dict[str, Any] = {"model_type": model_type}
    if "embedding_size" in data:
        out["embedding_size"] = _size(data, "embedding_size")
    width = out.get("embedding_size", data["hidden_size"])
    out["embedding_projection"] = model_type == "albert" or (model_type == "electra" and width != data["hidden_size"])
    if model_type == "albert":
        out["num_hidden_groups"] = _size(data, "num_hidden_groups") if "num_hidden_groups" in data else 1
        out["inner_group_num"] = _size(data, "inner_group_num") if "inner_group_num" in data else 1
    if model_type == "roberta":
        out["position_offset"] = (_size(data, "pad_token_id") if "pad_token_id" in data else 1) + 1
    return out


def _attention_fields(data: dict[str, Any]) -> dict[str, Any]:
    """How attention sees positions and which keys it may see (transformers' config keys).

    `add_cross_attention` adds cross-attention layers that the canonical tree has no place for:
    refused when true.
    """
    out: dict[str, Any] = {}
    if "position_embedding_type" in data:
        kind = data["position_embedding_type"]
        if kind not in POSITION_EMBEDDING_TYPES:
            raise ValueError(f"position_embedding_type is {json.dumps(kind)}, expected one of "
                             f"{', '.join(POSITION_EMBEDDING_TYPES)}")
        out["position_embedding_type"] = kind
    for key in ("is_decoder", "add_cross_attention"):
        if not isinstance(data.get(key, False), bool):
            raise ValueError(f"{key} is {json.dumps(data[key])}, expected true or false")
    out["is_decoder"] = data.get("is_decoder", False)
    if data.get("add_cross_attention", False):
        raise ValueError("add_cross_attention is true: the model has cross-attention layers over an encoder's "
                         "outputs, which bertconv's canonical tree does not hold")
    return out


def _size(data: dict[str, Any], key: str) -> int:
    """A size field: a JSON integer (never a string, a boolean or a fraction)."""
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key} is {json.dumps(value)}, expected a whole number")
    if value < 0:
        raise ValueError(f"{key} is {value}, expected a non-negative number")
    return value


def _epsilon(data: dict[str, Any]) -> float:
    value = data["layer_norm_eps"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise ValueError(f"layer_norm_eps is {json.dumps(value)}, expected a small positive number such as 1e-12")
    return float(value)


def is_hf_config(data: dict[str, Any]) -> bool:
    """A Hugging Face `config.json` names its model type; Google's `bert_config.json` does not."""
    return "model_type" in data or "architectures" in data


def load_config_file(path: Path, *, gelu_means_for_google: str, family: str = "bert") -> BertConfig:
    """Read a `bert_config.json` or HF `config.json` (or ALBERT's / ELECTRA's Google configs).

    `gelu_means_for_google` is how a Google-style file's "gelu" is read: the format of the
    checkpoint it accompanies decides (google-research/bert trained tanh, bert4keras uses erf).
    `family` is the model type of a config that names none (Google's configs do not).
    """
    path = Path(path)
    try:
        data = json_text.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise bad_input(path, "config file does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad_input(path, f"cannot read config as JSON: {exc}") from None
    if not isinstance(data, dict):
        raise bad_input(path, "config is not a JSON object")
    if data.get("model_type", family) not in FAMILIES:
        raise bad_input(path, f"config is for model_type {data['model_type']!r}, expected one of the BERT "
                              f"family: {', '.join(FAMILIES)}")
    gelu_means = "gelu" if is_hf_config(data) else gelu_means_for_google
    try:
        return replace(BertConfig.from_dict(data, gelu_means=gelu_means, family=family), source=path)
    except KeyError as exc:
        raise bad_input(path, f"config lacks required field(s) {exc.args[0]}") from None
    except (TypeError, ValueError) as exc:
        raise bad_input(path, f"config has a bad value: {exc}") from None


def default_heads(hidden_size: int) -> int:
    """The stated default head count when no config gives one: H / 64 as in every released BERT
    (12 for H=768, 16 for 1024, 8 for 512), or 1 when H is not a multiple of 64."""
    if hidden_size >= DEFAULT_HEAD_SIZE and hidden_size % DEFAULT_HEAD_SIZE == 0:
        return hidden_size // DEFAULT_HEAD_SIZE
    return 1


# --- closed-form parameter counts ---------------------------------------------------------


@dataclass(frozen=True)
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

    def as_dict(self) -> dict[str, bool]:
        """Which heads are present: pooler, masked LM, next-sentence prediction, ALBERT's
        sentence-order prediction (NSP's shape, another meaning), ELECTRA's replaced-token
        detection (the discriminator's head)."""
        return {"pooler": self.pooler, "mlm": self.mlm, "nsp": self.nsp, "sop": self.sop, "rtd": self.rtd}


def expected_components(config: BertConfig, heads: Heads) -> dict[str, int]:
    """Closed-form parameter count of every component, in model order.

    Component names are bertconv's (see `tree.ROLES`); they correspond one to one to
    bert4keras layers. A conditional LayerNorm (C > 0) adds two bias-free [C, H] kernels.
    Factorized embeddings are [rows, E] with a projection E -> H; the MLM transform then maps
    H -> E. brightmart's word-only projection (`word_projection`) is a bias-free [E, H] matrix on
    the [V, E] word table, the other tables and the MLM transform being H wide (W = H); the MLM
    head reuses that matrix, so it is counted once. Shared layers (ALBERT) are counted once each:
    the stored layers, not the applied ones.
    """
    V, H, I, P, T, C, E, W = (config.vocab_size, config.hidden_size, config.intermediate_size,
                              config.max_position_embeddings, config.type_vocab_size,
                              config.conditional_size or 0, config.embedding_width, config.summed_width)
    R, D = 2 * P - 1, config.hidden_size // max(config.num_attention_heads, 1)
    norm = 2 * H + 2 * C * H
    out: dict[str, int] = {"embeddings.word": V * E}
    if config.word_projection:
        out["embeddings.word_projection"] = E * H
    out.update({
        "embeddings.token_type": T * W,
        "embeddings.position": P * W,
        "embeddings.norm": 2 * W + 2 * C * W,
    })
    if config.embedding_projection:
        out["embeddings.projection"] = E * H + H
    for i in range(config.stored_layers):
        out[f"layers.{i}.attention"] = 4 * H * H + 4 * H + (R * D if config.relative_positions else 0)
        out[f"layers.{i}.attention_norm"] = norm
        out[f"layers.{i}.ffn"] = 2 * H * I + I + H
        out[f"layers.{i}.ffn_norm"] = norm
    if heads.pooler:
        out["pooler"] = H * H + H
    if heads.mlm:
        out["mlm.transform"] = H * W + W
        out["mlm.norm"] = 2 * W + 2 * C * W
        out["mlm.output_bias"] = V
        if heads.untied_decoder:
            out["mlm.decoder"] = V * E + (V if heads.untied_decoder_bias else 0)
    if heads.nsp:
        out["nsp"] = 2 * H + 2
    if heads.sop:
        out["sop"] = 2 * H + 2
    if heads.rtd:
        out["rtd"] = H * H + H + H + 1
    return out


def expected_parameters(config: BertConfig, heads: Heads) -> int:
    """Total closed-form parameter count; a tied decoder is counted once (as the embeddings)."""
    return sum(expected_components(config, heads).values())
