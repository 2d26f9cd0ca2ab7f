"""RoFormer (ZhuiyiTechnology/roformer; transformers `RoFormerModel`, bert4keras `model='roformer'`):
BERT's layers and heads with rotary positions in place of a position table. Each head's query and
key (and value, with `rotary_value`) are rotated pair by pair, dimensions (2j, 2j + 1) by the angle
p / 10000^(2j / D) (`runtime/sinusoids.py`); nothing about positions is a parameter. Embeddings
E wide are projected E -> H when E differs (`embeddings_project`), and the MLM head maps back
H -> E, as ELECTRA's generator does.

transformers stores the sinusoids it rotates by as `encoder.embed_positions.weight` [P, D], a
frozen table computed from the config: read, it is checked equal to the computed one and set
aside; written, it is computed again. Its `RoFormerTokenizer` splits Chinese text into words with
jieba (rjieba's dictionary) before WordPiece: `runtime/tokenization/jieba.py`, with rjieba an extra.
"""

from .family import GOOGLE, HF, Family, Projection

FAMILY = Family(
    model_type="roformer",
    display="RoFormer",
    # transformers' classes hold the MLM head alone; bert4keras' models may carry a pooler and NSP.
    heads=("pooler", "mlm", "nsp"),
    projection=Projection.WHEN_NARROWER,
    position_embedding_types=("rotary_interleaved",),
    # bert4keras' configs (Google's keys) state the embedding size too.
    computes={HF: ("embedding_size", "rotary_value", "is_decoder", "add_cross_attention"),
              GOOGLE: ("embedding_size",)},
    hf_marks=(".roformer.",),
    # Its MLM head is BERT's `cls.predictions`, its projection ELECTRA's `embeddings_project`.
    shares_hf_marks_with=("bert", "electra"),
    # Its vocab.txt is BERT's file; transformers splits text into jieba's words before WordPiece.
    tokenizer_class="RoFormerTokenizer",
)


#: The epsilon of RoFormer-v2's norms: Keras' `K.epsilon()` in bert4keras (`LayerNormalization`'s
#: default) and keras-hub (`keras.backend.epsilon()`); neither reads one from a config.
ROFORMER_V2_EPSILON = 1e-7


def _roformer_v2_fields(data: dict) -> dict:
    """Refuses what bertconv does not compute of a RoFormer-v2 config: embeddings narrower than the
    hidden size (bert4keras then maps them by `Embedding-Mapping` and the MLM input back by
    `Output-Mapping`, two bias-free matrices keras-hub's RoFormer-v2 does not have), and an untied
    decoder (neither library has one)."""
    embedding_size = data.get("embedding_size", data["hidden_size"])
    if embedding_size != data["hidden_size"]:
        raise ValueError(f"embedding_size is {embedding_size} and hidden_size {data['hidden_size']}: RoFormer-v2 then "
                         f"maps its embeddings by Embedding-Mapping and its MLM input back by Output-Mapping, which "
                         f"bertconv does not compute")
    if data.get("tie_word_embeddings", True) is not True:
        raise ValueError(f"tie_word_embeddings is {data['tie_word_embeddings']!r}: RoFormer-v2's MLM decoder is its "
                         f"token embedding (bert4keras and keras-hub alike), tied by construction")
    return {}


#: RoFormer-v2 (ZhuiyiTechnology/roformer-v2; bert4keras `model='roformer_v2'`, keras-hub
#: `RoformerV2Backbone`): RoFormer's rotary positions and post-norm layers without any bias, each
#: norm x / sqrt(mean(x^2) + 1e-7), neither centred nor shifted (bert4keras: `zero_mean=False`, no
#: scale; keras-hub's `RoformerNorm` multiplies by a stored `scale`, ones unless trained otherwise).
#: Embeddings are word + token type, normalized; layer i computes x = N(x + Attention(x)),
#: x = N(x + FFN(x)); the MLM logits are x @ word^T, with no transform and no output bias.
#: transformers has no RoFormer-v2: its `RoFormerModel` computes biases, centred LayerNorms and a
#: transform, another function.
FAMILY_V2 = Family(
    model_type="roformer_v2",
    display="RoFormer-v2",
    heads=("mlm",),
    position_embedding_types=("rotary_interleaved",),
    computes={HF: ("embedding_size",), GOOGLE: ("embedding_size",)},
    # Its libraries take the epsilon from Keras, whatever a config says (bertconv's configs state it).
    inert={HF: ("layer_norm_eps",), GOOGLE: ("layer_norm_eps",)},
    layer_norm_eps=ROFORMER_V2_EPSILON,
    # Its tokenizer is BERT's WordPiece (keras-hub's RoformerV2Tokenizer is a BertTokenizer; the
    # released char models split Chinese into characters, as BERT does): not RoFormer's jieba.
    config_fields=_roformer_v2_fields,
    # Both its libraries compute the sinusoids at any position: the config's bound caps bertconv's inputs only.
    uncomputed=("max_position_embeddings",),
    fields={"rms_norm": True, "norm_scale": False, "norm_bias": False, "attention_bias": False, "ffn_bias": False,
            "mlm_transform": False, "mlm_transform_bias": False, "output_bias": False,
            "layer_norm_eps": ROFORMER_V2_EPSILON},
)
