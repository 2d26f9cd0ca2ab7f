"""XLM-RoBERTa (fairseq's XLM-R; transformers `XLMRobertaModel`): RoBERTa's computation and file
layout (`roberta.` and `lm_head.` names, positions counted past the padding index, one token type)
under its own model type, with a SentencePiece BPE vocabulary laid out as fairseq's dictionary.
"""

from .family import HF, Family

FAMILY = Family(
    model_type="xlm-roberta",
    display="XLM-RoBERTa",
    heads=("pooler", "mlm"),
    position_offset_key=("pad_token_id", 1),
    # transformers 4's XLMRobertaSelfAttention is RobertaSelfAttention, relative positions included.
    position_embedding_types=("absolute", "relative_key", "relative_key_query"),
    computes={HF: ("pad_token_id", "position_embedding_type", "is_decoder", "add_cross_attention")},
    stated={"bos_token_id": 0, "eos_token_id": 2},
    # RoBERTa's names: only config.json's model_type tells the two apart.
    hf_marks=(".roberta.", ".lm_head."),
    tokenizer_class="XLMRobertaTokenizer",
)
