"""DeBERTa-v2 and DeBERTa-v3 (microsoft/DeBERTa; transformers `DebertaV2Model`, model_type
"deberta-v2", which DeBERTa-v3's checkpoints are too): BERT's post-LayerNorm layers with
disentangled attention. Each layer's scores q k^T gain content-to-position ("c2p") and
position-to-content ("p2c") terms read from relative embeddings shared by every layer
(`encoder.rel_embeddings`, normalized by `encoder.LayerNorm` in v3), at log-bucketed distances
(`position_buckets`), projected by the layer's own key and query (`share_att_key`) or by
projections of their own; all terms scaled by 1 / sqrt(D (1 + terms)). DeBERTa-v3 adds no
absolute positions (`position_biased_input` false) and has no token types.

Its masked-LM head comes in two layouts of transformers' `DebertaV2ForMaskedLM`: `cls.predictions.*`
(`legacy` true, the default) and `lm_predictions.lm_head.*` (`legacy` false); a checkpoint in the
other layout loads with its head newly initialized. Both compute the same function of their
tensors: the layout is the file's (`formats/hf/deberta.py`), not the config's. The published
DeBERTa-v3 checkpoints are replaced-token-detection discriminators: beside an
`lm_predictions.lm_head` they hold `mask_predictions.*`, the RTD head no transformers class loads.

Not computed, and so refused by name: the convolution beside the first layer of
deberta-v2-xlarge and -xxlarge (`conv_kernel_size` > 0), and embeddings narrower than the hidden
size (`embedding_size`, projected by a bias-free `embed_proj`).
"""

from __future__ import annotations

import json

from .family import HF, Family

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

#: DebertaV2Config's defaults where they differ from BERT's (a config that omits these keys means them).
DEFAULT_LAYER_NORM_EPS = 1e-7
DEFAULT_TYPE_VOCAB_SIZE = 0
#: The keys of its disentangled attention, as transformers' configs name them.
DISENTANGLED_KEYS = ("relative_attention", "max_relative_positions", "position_buckets", "pos_att_type",
                     "norm_rel_ebd", "share_att_key", "position_biased_input")


def config_fields(data: dict[str, Any]) -> dict[str, Any]:
    """`BertConfig` fields from a DeBERTa-v2 config.json, read as `DebertaV2Config` and its modules
    read them (`getattr` defaults included). Raises ValueError naming a key of a bad value or
    one bertconv does not compute."""
    out: dict[str, Any] = {}
    if "type_vocab_size" not in data:
        out["type_vocab_size"] = DEFAULT_TYPE_VOCAB_SIZE
    if "layer_norm_eps" not in data:
        out["layer_norm_eps"] = DEFAULT_LAYER_NORM_EPS
    embedding_size = data.get("embedding_size", data["hidden_size"])
    if embedding_size != data["hidden_size"]:
        raise ValueError(f"embedding_size is {json.dumps(embedding_size)} and hidden_size {data['hidden_size']}: "
                         f"DeBERTa then sums its embeddings at that width and projects them to the hidden size "
                         f"by a bias-free embed_proj, which bertconv does not compute")
    for key in ("relative_attention", "share_att_key", "position_biased_input"):
        if not isinstance(data.get(key, False), bool):
            raise ValueError(f"{key} is {json.dumps(data[key])}, expected true or false")
    out["relative_attention"] = data.get("relative_attention", False)
    out["share_att_key"] = data.get("share_att_key", False)
    out["position_biased_input"] = data.get("position_biased_input", True)
    out["pos_att_type"] = _terms(data.get("pos_att_type"))
    out["relative_embedding_norm"] = "layer_norm" in _words(data, "norm_rel_ebd")
    if out["relative_attention"]:
        buckets = _whole(data, "position_buckets", -1)
        most = _whole(data, "max_relative_positions", -1)
        out["position_buckets"] = max(buckets, 0)
        out["max_relative_positions"] = most if most >= 1 else data["max_position_embeddings"]
    return out


def config_keys(config: Any) -> dict[str, Any]:
    """The DeBERTa keys of a config.json transformers 5's default `DebertaV2ForMaskedLM` builds
    the model from (without `legacy`, its default, true: the `cls.predictions` head the writer writes)."""
    out: dict[str, Any] = {
        "relative_attention": config.relative_attention,
        "pos_att_type": list(config.pos_att_type),
        "share_att_key": config.share_att_key,
        "position_biased_input": config.position_biased_input,
        "norm_rel_ebd": "layer_norm" if config.relative_embedding_norm else "none",
    }
    if config.relative_attention:
        out["position_buckets"] = config.position_buckets or -1
        out["max_relative_positions"] = config.max_relative_positions
    return out


def _terms(value: Any) -> tuple[str, ...]:
    """`pos_att_type` as `DebertaV2Config` reads it ("p2c|c2p" or a list, any case), in bertconv's order."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = value.split("|")
    if not isinstance(value, list) or not all(isinstance(term, str) for term in value):
        raise ValueError(f"pos_att_type is {json.dumps(value)}, expected \"c2p|p2c\" or a list such as [\"c2p\"]")
    terms = {term.strip().lower() for term in value} - {""}
    unknown = sorted(terms - {"c2p", "p2c"})
    if unknown:
        raise ValueError(f"pos_att_type names {json.dumps(unknown)}: transformers' DeBERTa-v2 computes c2p and "
                         f"p2c only (DeBERTa-v1's p2p is another model)")
    return tuple(term for term in ("c2p", "p2c") if term in terms)


def _words(data: dict[str, Any], key: str) -> list[str]:
    value = data.get(key, "none")
    if not isinstance(value, str):
        raise ValueError(f"{key} is {json.dumps(value)}, expected a string such as \"layer_norm\"")
    words = [word.strip() for word in value.lower().split("|")]
    unknown = [word for word in words if word not in ("none", "layer_norm")]
    if unknown:
        raise ValueError(f"{key} names {json.dumps(unknown)}: transformers' DeBERTa-v2 knows layer_norm only")
    return words


def _whole(data: dict[str, Any], key: str, default: int) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key} is {json.dumps(value)}, expected a whole number")
    return value


FAMILY = Family(
    model_type="deberta-v2",
    display="DeBERTa-v2",
    heads=("mlm",),
    computes={HF: (*DISENTANGLED_KEYS, "embedding_size")},
    # deberta-v2-xlarge's convolution beside the first layer (`ConvLayer`) is not computed: a
    # config with one is refused by name. Its settings are read only when it is there.
    fixed={HF: {"conv_kernel_size": 0}},
    # The pooler settings are `ContextPooler`'s, a classification head's (no masked LM reads them);
    # `legacy` names the head layout transformers builds, which the file's names decide here
    # (the reader notes a file whose layout its config would not load: `formats/hf/deberta.py`).
    inert={HF: ("pooler_hidden_size", "pooler_dropout", "pooler_hidden_act", "cls_dropout", "conv_act",
                "conv_groups", "legacy")},
    hf_marks=(".deberta.", ".lm_predictions.", ".mask_predictions.", ".query_proj.", ".rel_embeddings."),
    shares_hf_marks_with=("bert",),
    holds_no_token_types=True,
    config_fields=config_fields,
    config_keys=config_keys,
)
