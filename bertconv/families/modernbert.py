"""ModernBERT (Answer.AI and LightOn; transformers `ModernBertModel`): a pre-LayerNorm encoder with
rotary positions and no position table or token types. The word vectors are normalized
(`embeddings.norm`); each layer computes x + Attention(LN(x)) (layer 0 without that LayerNorm:
its input was just normalized) and x + GeGLU(LN(x)), where GeGLU is Wo(act(a) * g) for [a, g] =
Wi(x) split in two halves; `final_norm` follows the last layer. Its layers alternate global
attention (rotary base `rope_theta`, 160,000 by default) and sliding-window attention, each query
seeing the keys within `local_attention // 2` positions (rotary base `local_rope_theta`, 10,000),
as `layer_types` says (older configs: every `global_attn_every_n_layers`-th layer global). Its
config says which parameters have biases (none but the decoder's, by default), and its MLM head
(`head.dense`, its own `classifier_activation`, `head.norm`, then the tied `decoder`) is its own.

Keys its released configs carry that its code never reads: `layer_norm_eps` (it reads
`norm_eps`), `position_embedding_type`, and the settings of its classification heads, of flash
attention and of training (`reference_compile`, `sparse_prediction`, ...).
"""

from .family import EXACT_ACTIVATION_KEY, HF, Family

#: The keys of sliding-window attention and of the two rotary bases (read by `config/layer_kinds.py`).
LAYER_KIND_KEYS = ("layer_types", "global_attn_every_n_layers", "local_attention", "rope_parameters",
                   "global_rope_theta", "local_rope_theta", "rope_scaling")

FAMILY = Family(
    model_type="modernbert",
    display="ModernBERT",
    heads=("mlm",),
    position_embedding_types=("rotary",),
    key_names={HF: {"hidden_activation": "hidden_act", "norm_eps": "layer_norm_eps"}},
    # Not ModernBertConfig's keys: `layer_norm_eps` (stated by its released configs, inert), BERT's `hidden_act`.
    lacks={HF: ("layer_norm_eps", "hidden_act", EXACT_ACTIVATION_KEY, "type_vocab_size", "conditional_size")},
    computes={HF: (*LAYER_KIND_KEYS, "classifier_activation", "norm_bias", "attention_bias", "mlp_bias",
                   "classifier_bias", "decoder_bias")},
    inert={HF: ("layer_norm_eps", "type_vocab_size", "position_embedding_type",
                "hidden_dropout_prob", "attention_probs_dropout_prob", "embedding_dropout", "mlp_dropout",
                "classifier_pooling", "classifier_dropout", "initializer_cutoff_factor", "deterministic_flash_attn",
                "sparse_prediction", "sparse_pred_ignore_index", "reference_compile", "repad_logits_with_grad")},
    # `ModernBertConfig.sliding_window` is `local_attention // 2`; a config stating both is refused as unread.
    hf_marks=(".tok_embeddings.", ".Wqkv.", ".mlp.Wi."),
    hf_default_activation="gelu",
    pre_layer_norm=True,
    final_layer_norm=True,
    embedding_layer_norm=True,
    token_types=False,
    fused_qkv=True,
    gated_ffn=True,
    first_attention_norm=False,
    bias_keys={"norm_bias": ("norm_bias", False), "attention_bias": ("attention_bias", False),
               "mlp_bias": ("ffn_bias", False), "classifier_bias": ("mlm_transform_bias", False),
               "decoder_bias": ("output_bias", True)},
    mlm_activation_key=("classifier_activation", "gelu"),
    layer_norm_eps=1e-5,
)
