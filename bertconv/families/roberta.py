"""RoBERTa (fairseq; transformers `RobertaModel`): BERT's computation with positions counted past
the padding index (`pad_token_id` + 1 is the first position row), no next-sentence head, and
commonly no token types (fairseq's have none; transformers' have one all-zero row).
"""

from .family import HF, Family

FAMILY = Family(
    model_type="roberta",
    display="RoBERTa",
    heads=("pooler", "mlm"),
    position_offset_key=("pad_token_id", 1),
    position_embedding_types=("absolute", "relative_key", "relative_key_query"),
    computes={HF: ("pad_token_id", "position_embedding_type", "is_decoder", "add_cross_attention")},
    # fairseq's dictionary: <s> 0, <pad> 1, </s> 2 (RobertaConfig's defaults, stated).
    stated={"bos_token_id": 0, "eos_token_id": 2},
    hf_marks=(".roberta.", ".lm_head."),
)
