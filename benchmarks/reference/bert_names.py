"""Google <-> Hugging Face BERT names for the benchmark inputs and reference scripts.

Written independently of bertconv (the code under test) so that inputs and references do not
depend on it. Google kernels are `[in, out]`; Hugging Face `nn.Linear` weights are `[out, in]`.
`cls/seq_relationship/output_weights` is `[2, H]` in both (already `[out, in]`).
"""

from __future__ import annotations

import re

NOT_PARAMETERS = re.compile(r"^(global_step|.*/adam_[mv]|AdamWeightDecayOptimizer.*)$")


def google_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Every tensor of a Google BertForPreTraining checkpoint (pooler, MLM and NSP heads)."""
    V, H, I = config["vocab_size"], config["hidden_size"], config["intermediate_size"]
    P, T, L = config["max_position_embeddings"], config["type_vocab_size"], config["num_hidden_layers"]
    shapes = {
        "bert/embeddings/word_embeddings": (V, H),
        "bert/embeddings/position_embeddings": (P, H),
        "bert/embeddings/token_type_embeddings": (T, H),
        "bert/embeddings/LayerNorm/gamma": (H,),
        "bert/embeddings/LayerNorm/beta": (H,),
    }
    for i in range(L):
        p = f"bert/encoder/layer_{i}"
        for part in ("attention/self/query", "attention/self/key", "attention/self/value", "attention/output/dense"):
            shapes[f"{p}/{part}/kernel"] = (H, H)
            shapes[f"{p}/{part}/bias"] = (H,)
        shapes[f"{p}/intermediate/dense/kernel"] = (H, I)
        shapes[f"{p}/intermediate/dense/bias"] = (I,)
        shapes[f"{p}/output/dense/kernel"] = (I, H)
        shapes[f"{p}/output/dense/bias"] = (H,)
        for norm in ("attention/output/LayerNorm", "output/LayerNorm"):
            shapes[f"{p}/{norm}/gamma"] = (H,)
            shapes[f"{p}/{norm}/beta"] = (H,)
    shapes.update({
        "bert/pooler/dense/kernel": (H, H),
        "bert/pooler/dense/bias": (H,),
        "cls/predictions/transform/dense/kernel": (H, H),
        "cls/predictions/transform/dense/bias": (H,),
        "cls/predictions/transform/LayerNorm/gamma": (H,),
        "cls/predictions/transform/LayerNorm/beta": (H,),
        "cls/predictions/output_bias": (V,),
        "cls/seq_relationship/output_weights": (2, H),
        "cls/seq_relationship/output_bias": (2,),
    })
    return shapes


def google_to_hf(name: str) -> tuple[str, bool]:
    """(Hugging Face name, whether the values are transposed) of a Google variable name."""
    special = {
        "cls/predictions/output_bias": "cls.predictions.bias",
        "cls/seq_relationship/output_weights": "cls.seq_relationship.weight",
        "cls/seq_relationship/output_bias": "cls.seq_relationship.bias",
    }
    if name in special:
        return special[name], False
    parts = name.split("/")
    last = parts[-1]
    transpose = last == "kernel"
    if parts[:2] == ["bert", "embeddings"] and last.endswith("_embeddings"):
        parts.append("weight")
    else:
        parts[-1] = {"kernel": "weight", "gamma": "weight", "beta": "bias"}.get(last, last)
    hf = ".".join(parts)
    hf = re.sub(r"\.layer_(\d+)\.", r".layer.\1.", hf)
    return hf, transpose


def hf_to_google(name: str) -> tuple[str, bool] | None:
    """(Google name, transposed) of a Hugging Face name, or None for what Google does not store
    (buffers, the tied decoder)."""
    return _HF_TO_GOOGLE.get(name)


def _build_inverse() -> dict[str, tuple[str, bool]]:
    config = dict(vocab_size=1, hidden_size=1, intermediate_size=1, max_position_embeddings=1,
                  type_vocab_size=1, num_hidden_layers=64)
    return {google_to_hf(g)[0]: (g, google_to_hf(g)[1]) for g in google_shapes(config)}


_HF_TO_GOOGLE = _build_inverse()


def google_config(config: dict) -> dict:
    """`bert_config.json` contents."""
    keys = ("attention_probs_dropout_prob", "hidden_act", "hidden_dropout_prob", "hidden_size",
            "initializer_range", "intermediate_size", "max_position_embeddings", "num_attention_heads",
            "num_hidden_layers", "type_vocab_size", "vocab_size")
    return {k: config[k] for k in keys}


def hf_config(config: dict) -> dict:
    """`config.json` contents for BertForPreTraining."""
    return {**google_config(config), "model_type": "bert", "architectures": ["BertForPreTraining"],
            "layer_norm_eps": 1e-12, "tie_word_embeddings": True, "dtype": "float32", "pad_token_id": 0}
