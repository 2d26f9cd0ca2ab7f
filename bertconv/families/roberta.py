"""RoBERTa (fairseq; transformers `RobertaModel`): BERT's computation with positions counted past
the padding index (`pad_token_id` + 1 is the first position row), no next-sentence head, and
commonly no token types (fairseq's have none; transformers' have one all-zero row).
"""

from .family import FAIRSEQ, HF, Family

FAMILY = Family(
    model_type="roberta",
    display="RoBERTa",
    heads=("pooler", "mlm"),
    position_offset_key=("pad_token_id", 1),
    position_embedding_types=("absolute", "relative_key", "relative_key_query"),
    computes={HF: ("pad_token_id", "position_embedding_type", "is_decoder", "add_cross_attention")},
    # fairseq's saved options are the whole training run's; of its model's, these change what
    # RoBERTa computes and are read at the value fairseq's `roberta` architectures give them
    # (`base_architecture`: learned positions, an embedding LayerNorm, unscaled embeddings).
    fixed={FAIRSEQ: {"encoder_learned_pos": True, "no_token_positional_embeddings": False,
                     "layernorm_embedding": True, "no_scale_embedding": True, "encoder_layers_to_keep": None,
                     "adaptive_input": False}},
    # fairseq's dictionary: <s> 0, <pad> 1, </s> 2 (RobertaConfig's defaults, stated).
    stated={"bos_token_id": 0, "eos_token_id": 2},
    hf_marks=(".roberta.", ".lm_head."),
)
