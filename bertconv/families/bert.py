"""BERT (google-research/bert; transformers `BertModel`): the family the others are told apart from.

transformers 4 also gives BERT learned relative positions (`position_embedding_type`
relative_key / relative_key_query: per-layer distance tables) and decoders (`is_decoder`: causal
self-attention, `BertLMHeadModel`).
"""

from .family import HF, Family

FAMILY = Family(
    model_type="bert",
    display="BERT",
    heads=("pooler", "mlm", "nsp"),
    position_embedding_types=("absolute", "relative_key", "relative_key_query"),
    computes={HF: ("position_embedding_type", "is_decoder", "add_cross_attention")},
    hf_marks=(".bert.", ".cls."),
)
