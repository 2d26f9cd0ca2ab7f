"""Megatron-BERT (NVIDIA Megatron-LM; transformers `MegatronBertModel`): BERT's names and heads on a
pre-LayerNorm encoder. The summed embeddings are not normalized; each layer computes
x + Attention(LN(x)) then x + FFN(LN(x)) (its `attention.ln` and `ln`), and a final LayerNorm
(`encoder.ln`) follows the last layer.

NVIDIA's released checkpoints pad the word embeddings past the vocabulary to a multiple of 128
times the tensor-parallel size (30,592 rows for BERT's 30,522 WordPiece tokens): those rows are
the model's, no token reaches them.
"""

from .family import HF, Family

FAMILY = Family(
    model_type="megatron-bert",
    display="Megatron-BERT",
    heads=("pooler", "mlm", "nsp"),
    computes={HF: ("is_decoder", "add_cross_attention")},
    hf_marks=(".attention.ln.", ".encoder.ln."),
    shares_hf_marks_with=("bert",),
    pre_layer_norm=True,
    final_layer_norm=True,
    embedding_layer_norm=False,
    vocab_pad_multiple=128,
)
