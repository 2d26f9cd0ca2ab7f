"""Config files in each dialect, read into a `BertConfig` and written from one, as each family
declares its keys.

Reading: the sizes every config states, then what the family's declaration says its computation
reads (embedding size and projection, layer groups, position offset, position scheme, decoder),
then every other key sorted into inert (never changes the computation), fixed at the value
bertconv computes, or *unread*: kept in `BertConfig.unread`, which every command that computes
or converts refuses unless the user accepts the loss (`checks/contract.py`).

Activation names are bertconv's own ("gelu" erf, "gelu_tanh", "relu"): the same word "gelu" in
a file means different functions depending on who wrote it (see `parse_activation`).
"""

from __future__ import annotations

import json
from pathlib import Path

from .. import json_text
from ..records import replace
from . import ACTIVATIONS, LAYER_NORM_EPS, BertConfig, layer_kinds
from ..errors import bad_input
from ..families import DEFAULT, FAMILIES, of
from ..families.family import BASE_COMPUTES, BASE_FIXED, EXACT_ACTIVATION_KEY, GOOGLE, HF, INERT, REQUIRED, Family

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

#: Hugging Face's names for each bertconv activation (first is the one bertconv writes).
_HF_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "relu": "relu",
}


#: The Hugging Face name bertconv writes for each of its activations.
_HF_NAME = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}


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


def is_hf_config(data: dict[str, Any]) -> bool:
    """A Hugging Face `config.json` names its model type; Google's `bert_config.json` does not."""
    return "model_type" in data or "architectures" in data


# --- reading --------------------------------------------------------------------------------


def config_from_dict(data: dict[str, Any], *, gelu_means: str, source: str = "file",
                     family: str = DEFAULT.model_type) -> BertConfig:
    """A config from a `bert_config.json` or Hugging Face `config.json` dictionary.

    Raises KeyError for a missing required field and ValueError naming the field for a value
    of the wrong JSON type or range, or a model type of no family; `load_config_file` turns both
    into messages naming the file. `family` is the model type when the dictionary names none
    (Google's configs do not).
    """
    dialect = HF if is_hf_config(data) else GOOGLE
    declared = _family(data, family)
    stated, data = data, in_bert_names(data, declared, dialect)
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise KeyError(", ".join(missing))
    if data.get("ln_type") not in (None, "postln"):
        raise ValueError(f"ln_type is {json.dumps(data['ln_type'])}: brightmart albert_zh's pre-LayerNorm "
                         f"transformer (its xxlarge model), which normalizes before each sublayer and not "
                         f"after; bertconv's model is post-LayerNorm (\"postln\") only, and the names alone "
                         f"cannot tell the two apart")
    values: dict[str, Any] = {k: _size(data, k) for k in REQUIRED}
    values["type_vocab_size"] = (0 if not declared.token_types else
                                 _size(data, "type_vocab_size") if "type_vocab_size" in data else 2)
    if "hidden_act" in declared.inert.get(dialect, ()):
        values["hidden_act"] = parse_activation(declared.hf_default_activation, gelu_means=gelu_means)
    elif data.get(EXACT_ACTIVATION_KEY) in ACTIVATIONS:
        values["hidden_act"] = data[EXACT_ACTIVATION_KEY]
    else:
        act = data.get("hidden_act", declared.hf_default_activation)
        if not isinstance(act, str):
            raise ValueError(f"hidden_act is {json.dumps(act)}, expected a string such as \"gelu\"")
        values["hidden_act"] = parse_activation(act, gelu_means=gelu_means)
    values["layer_norm_eps"] = _epsilon(data) if "layer_norm_eps" in data else declared.layer_norm_eps or LAYER_NORM_EPS
    tie = data.get("tie_word_embeddings", True)
    if not isinstance(tie, bool):
        raise ValueError(f"tie_word_embeddings is {json.dumps(tie)}, expected true or false")
    values["tie_word_embeddings"] = tie
    if data.get("conditional_size"):
        values["conditional_size"] = _size(data, "conditional_size")
    values.update(_family_fields(data, declared, dialect))
    provenance = {k: source if k in data else "default" for k in values}
    if "layer_norm_eps" not in data and declared.layer_norm_eps is not None:
        provenance["layer_norm_eps"] = "family"
    provenance["hidden_act"] = ("family" if "hidden_act" in declared.inert.get(dialect, ())
                                else source if "hidden_act" in data else "default")
    return BertConfig(**values, unread=unread_keys(stated, declared, dialect), provenance=provenance)


def in_bert_names(data: dict[str, Any], family: Family, dialect: str) -> dict[str, Any]:
    """`data` with the family's own key names as BERT's (DistilBERT's `dim` as `hidden_size`) and
    without the keys its library never reads (`Family.lacks`: `unread_keys` names them). Raises
    ValueError for a key stated under both names."""
    lacks = family.lacks.get(dialect, ())
    out = {key: value for key, value in data.items() if key not in lacks}
    for own, bert in family.key_names.get(dialect, {}).items():
        if own not in out:
            continue
        if bert in out:
            raise ValueError(f"{own} and {bert} are both stated, and {family.display}'s library reads {bert} as "
                             f"{own}: which one it computes with depends on the order it sets them")
        out[bert] = out.pop(own)
    return out


def computed_keys(family: Family, dialect: str) -> tuple[str, ...]:
    """The config keys, as the family's configs name them, whose values its computation reads."""
    lacks = family.lacks.get(dialect, ())
    return (*(k for k in BASE_COMPUTES.get(dialect, ()) if k not in lacks), *family.key_names.get(dialect, {}),
            *family.computes.get(dialect, ()))


def _family(data: dict[str, Any], default: str) -> Family:
    model_type = data.get("model_type", default)
    if not isinstance(model_type, str):
        raise ValueError(f"model_type is {json.dumps(model_type)}, expected a string such as \"bert\"")
    if model_type not in FAMILIES:
        raise ValueError(f"config is for model_type {model_type!r}, expected one of the BERT family: "
                         f"{', '.join(FAMILIES)}")
    return FAMILIES[model_type]


def _family_fields(data: dict[str, Any], family: Family, dialect: str) -> dict[str, Any]:
    """What the family's declaration says its computation reads beyond BERT's sizes."""
    computes = family.computes.get(dialect, ())
    out: dict[str, Any] = {"model_type": family.model_type}
    if "embedding_size" in data and "embedding_size" in computes:
        out["embedding_size"] = _size(data, "embedding_size")
    out["embedding_projection"] = family.projects(out.get("embedding_size", data["hidden_size"]), data["hidden_size"])
    if family.shares_layers:
        out["num_hidden_groups"] = _size(data, "num_hidden_groups") if "num_hidden_groups" in data else 1
        out["inner_group_num"] = _size(data, "inner_group_num") if "inner_group_num" in data else 1
    if family.position_offset_key is not None:
        key, default = family.position_offset_key
        out["position_offset"] = (_size(data, key) if key in data else default) + 1
    if "position_embedding_type" not in computes and "absolute" not in family.position_embedding_types:
        out["position_embedding_type"] = family.position_embedding_types[0]  # its only scheme (ModernBERT's rotary)
    if "position_embedding_type" in computes and ("position_embedding_type" in data
                                                  or "absolute" not in family.position_embedding_types):
        kind = data.get("position_embedding_type", "absolute")
        if kind not in family.position_embedding_types:
            raise ValueError(f"position_embedding_type is {json.dumps(kind)}, expected one of "
                             f"{', '.join(family.position_embedding_types)}")
        out["position_embedding_type"] = kind
    elif "absolute" not in family.position_embedding_types:  # a scheme its configs never name (RoFormer's)
        out["position_embedding_type"] = family.position_embedding_types[0]
    for key in ("is_decoder", "add_cross_attention", "rotary_value"):
        if key in computes and not isinstance(data.get(key, False), bool):
            raise ValueError(f"{key} is {json.dumps(data[key])}, expected true or false")
    if "is_decoder" in computes:
        out["is_decoder"] = data.get("is_decoder", False)
    out.update(_layer_norms(data, family))
    if "rope_theta" in computes and "rope_theta" in data:
        out["rope_theta"] = _positive(data, "rope_theta")
    if "token_dropout" in computes:
        if not isinstance(data.get("token_dropout", False), bool):
            raise ValueError(f"token_dropout is {json.dumps(data['token_dropout'])}, expected true or false")
        out["token_dropout"] = data.get("token_dropout", False)
    if "rotary_value" in computes:
        out["rotary_value"] = data.get("rotary_value", False)
    if "max_relative_position" in computes and "max_relative_position" in data:
        out["max_relative_position"] = _size(data, "max_relative_position")
    if "mask_token_id" in computes and data.get("mask_token_id") is not None:
        out["mask_token_id"] = _size(data, "mask_token_id")
    out.update(_modern_fields(data, family, computes))
    if family.config_fields is not None:
        out.update(family.config_fields(data))
    out.update(family.fields)
    if "add_cross_attention" in computes and data.get("add_cross_attention", False):
        raise ValueError("add_cross_attention is true: the model has cross-attention layers over an encoder's "
                         "outputs, which bertconv's canonical tree does not hold")
    return out


def _modern_fields(data: dict[str, Any], family: Family, computes: tuple[str, ...]) -> dict[str, Any]:
    """What a ModernBERT-like declaration adds: fused attention and a gated feed-forward (the
    family's), biases and the MLM head's activation (keys with the family's defaults), and the
    layer kinds (`layer_kinds`)."""
    out: dict[str, Any] = {"fused_qkv": family.fused_qkv, "gated_ffn": family.gated_ffn,
                           "first_attention_norm": family.first_attention_norm}
    for key, (name, default) in family.bias_keys.items():
        if not isinstance(data.get(key, default), bool):
            raise ValueError(f"{key} is {json.dumps(data[key])}, expected true or false")
        out[name] = data.get(key, default)
    if family.mlm_activation_key is not None:
        key, default = family.mlm_activation_key
        act = data.get(key, default)
        if not isinstance(act, str):
            raise ValueError(f"{key} is {json.dumps(act)}, expected a string such as \"gelu\"")
        out["mlm_hidden_act"] = parse_activation(act, gelu_means="gelu")
    if "local_attention" in computes:
        out.update(layer_kinds.read(data, _size(data, "num_hidden_layers")))
    return out


def _layer_norms(data: dict[str, Any], family: Family) -> dict[str, Any]:
    """Where the family's LayerNorms are; a config key decides the embeddings' where the family
    names one (ESM's `emb_layer_norm_before`, absent or null meaning none)."""
    key = family.embedding_layer_norm
    value = data.get(key) if isinstance(key, str) else None
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"{key} is {json.dumps(value)}, expected true, false or null")
    return family.layer_norms(value)


def unread_keys(data: dict[str, Any], family: Family, dialect: str) -> tuple[tuple[str, str], ...]:
    """The keys of `data` that `family`'s computation in bertconv would not honour, with their
    values as JSON: neither declared nor inert, or fixed at another value than bertconv computes."""
    known = {*computed_keys(family, dialect), *INERT.get(dialect, ()), *family.inert.get(dialect, ())}
    fixed = {**BASE_FIXED.get(dialect, {}), **family.fixed.get(dialect, {})}
    unread = []
    for key, value in data.items():
        if key in known or (key in fixed and value == fixed[key]):
            continue
        unread.append((key, json.dumps(value, sort_keys=True)[:200]))
    return tuple(unread)


def _size(data: dict[str, Any], key: str) -> int:
    """A size field: a JSON integer (never a string, a boolean or a fraction)."""
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key} is {json.dumps(value)}, expected a whole number")
    if value < 0:
        raise ValueError(f"{key} is {value}, expected a non-negative number")
    return value


def _positive(data: dict[str, Any], key: str) -> float:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{key} is {json.dumps(value)}, expected a positive number")
    return float(value)


def _epsilon(data: dict[str, Any]) -> float:
    value = data["layer_norm_eps"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise ValueError(f"layer_norm_eps is {json.dumps(value)}, expected a small positive number such as 1e-12")
    return float(value)


def load_config_file(path: Path, *, gelu_means_for_google: str, family: str = DEFAULT.model_type) -> BertConfig:
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
    gelu_means = "gelu" if is_hf_config(data) else gelu_means_for_google
    try:
        return replace(config_from_dict(data, gelu_means=gelu_means, family=family), source=path)
    except KeyError as exc:
        raise bad_input(path, f"config lacks required field(s) {exc.args[0]}") from None
    except (TypeError, ValueError) as exc:
        raise bad_input(path, f"config has a bad value: {exc}") from None


# --- writing --------------------------------------------------------------------------------


def google_config_dict(config: BertConfig) -> dict[str, Any]:
    """google-research/bert's `bert_config.json`.

    Its "gelu" is the tanh form to Google's code and erf to bert4keras, so the activation
    is also recorded exactly under `EXACT_ACTIVATION_KEY`.
    """
    return {
        "attention_probs_dropout_prob": 0.1,
        "hidden_act": {"gelu_tanh": "gelu", "gelu": "gelu", "relu": "relu"}[config.hidden_act],
        EXACT_ACTIVATION_KEY: config.hidden_act,
        "hidden_dropout_prob": 0.1,
        "hidden_size": config.hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": config.intermediate_size,
        # Not a key of Google's own configs (its code hard-codes 1e-12); it ignores extra keys,
        # and every reader of bertconv's takes it, so a model trained with another epsilon keeps it.
        "layer_norm_eps": config.layer_norm_eps,
        "max_position_embeddings": config.max_position_embeddings,
        "num_attention_heads": config.num_attention_heads,
        "num_hidden_layers": config.num_hidden_layers,
        "type_vocab_size": config.type_vocab_size,
        "vocab_size": config.vocab_size,
        **_family_dict(config),
    }


def bert4keras_config_dict(config: BertConfig) -> dict[str, Any]:
    """The `bert_config.json` that `build_transformer_model` takes: Google's keys, with the
    activation under bert4keras' own name (its "gelu" is the erf form, "gelu_tanh" the
    approximation), and the condition size of a conditional LayerNorm when there is one."""
    out = google_config_dict(config)
    out["hidden_act"] = {"gelu_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}[config.hidden_act]
    if config.conditional_size:
        out["conditional_size"] = config.conditional_size
    return out


def hf_config_dict(config: BertConfig, *, architectures: list[str], dtype: str) -> dict[str, Any]:
    """Hugging Face's `config.json` for a model of the config's family."""
    out = {
        "architectures": architectures,
        "attention_probs_dropout_prob": 0.1,
        "dtype": dtype,
        "hidden_act": _HF_NAME[config.hidden_act],
        "hidden_dropout_prob": 0.1,
        "hidden_size": config.hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": config.intermediate_size,
        "layer_norm_eps": config.layer_norm_eps,
        "max_position_embeddings": config.max_position_embeddings,
        "model_type": config.model_type,
        "num_attention_heads": config.num_attention_heads,
        "num_hidden_layers": config.num_hidden_layers,
        "pad_token_id": 0,
        "tie_word_embeddings": config.tie_word_embeddings,
        "type_vocab_size": config.type_vocab_size,
        "vocab_size": config.vocab_size,
        **_family_dict(config),
    }
    # Where the model's computation differs from BERT's defaults (a format without these keys
    # reads the defaults back, and `convert` refuses the loss).
    if config.relative_positions:
        out["position_embedding_type"] = config.position_embedding_type
    if config.is_decoder:
        out["is_decoder"] = True
    # Keys the family's own config class does not have (ESM's hidden_act, type_vocab_size), but
    # for BERT's keys it writes under its own names (ModernBERT's layer_norm_eps as norm_eps).
    renamed = of(config).key_names.get(HF, {}).values()
    for key in of(config).inert.get(HF, ()):
        if key not in renamed:
            out.pop(key, None)
    return in_family_names(out, of(config), HF)


def in_family_names(data: dict[str, Any], family: Family, dialect: str) -> dict[str, Any]:
    """The inverse of `in_bert_names`: BERT's key names as the family's own, without the keys its
    library never reads (a config can only state what its code computes; the read-back of a
    conversion refuses whatever that loses)."""
    lacks = family.lacks.get(dialect, ())
    own_name = {bert: own for own, bert in family.key_names.get(dialect, {}).items()}
    return {own_name.get(key, key): value for key, value in data.items() if key in own_name or key not in lacks}


def _family_dict(config: BertConfig) -> dict[str, Any]:
    """The keys a family adds to BERT's, under the names its own configs use."""
    family = of(config)
    out: dict[str, Any] = {}
    if family is not DEFAULT:
        out["model_type"] = config.model_type
    if config.embedding_size is not None or family.states_embedding_size:
        out["embedding_size"] = config.embedding_width
    if config.shares_layers:
        out["num_hidden_groups"] = config.num_hidden_groups
        out["inner_group_num"] = config.inner_group_num or 1
    if family.position_offset_key is not None:
        out[family.position_offset_key[0]] = config.position_offset - 1
    if isinstance(family.embedding_layer_norm, str):
        out[family.embedding_layer_norm] = config.embedding_layer_norm
    if config.rotary_positions and "rope_theta" in family.computes.get(HF, ()):
        out["position_embedding_type"] = config.position_embedding_type
        out["rope_theta"] = config.rope_theta
    if "local_attention" in family.computes.get(HF, ()):
        out.update(layer_kinds.write(config))
    for key, (name, _) in family.bias_keys.items():
        out[key] = getattr(config, name)
    if family.mlm_activation_key is not None:
        out[family.mlm_activation_key[0]] = _HF_NAME[config.mlm_hidden_act or config.hidden_act]
    for key in ("rotary_value", "max_relative_position"):
        if key in family.computes.get(HF, ()):
            out[key] = getattr(config, key)
    if "token_dropout" in family.computes.get(HF, ()):
        out["token_dropout"] = config.token_dropout
        out["mask_token_id"] = config.mask_token_id
    if family.config_keys is not None:
        out.update(family.config_keys(config))
    for variant in family.variants:
        if getattr(config, variant.flag):
            out.update(variant.stated)
    out.update(family.stated)
    return out
