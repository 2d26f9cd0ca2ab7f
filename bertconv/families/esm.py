"""ESM-2 (facebook/esm; transformers `EsmModel`): the protein language models. A pre-LayerNorm
encoder (each layer x + Attention(LN(x)), then x + FFN(LN(x)); `emb_layer_norm_after` after the
last) with rotary positions (no position table), no token types, exact-erf GELU whatever a config
says, an `lm_head` of its own (dense, GELU, LayerNorm, the tied decoder and a bias), and token
dropout: at inference the word vectors of <mask> are zeroed and all of them scaled by
(1 - 0.15 * 0.8) / (1 - the sequence's ratio of <mask> tokens), as `EsmEmbeddings` does.

ESM-1b and ESM-1v (learned absolute positions counted past the padding index, a LayerNorm on the
embeddings) are not held: their `position_embedding_type` "absolute" is refused on reading.
transformers also zeroes the embeddings at padding positions (`attention_mask`); only the outputs
at those positions change, which attend to the real tokens and are never read.
"""

from .family import HF, Family
from .family import EXACT_ACTIVATION_KEY

FAMILY = Family(
    model_type="esm",
    display="ESM",
    heads=("pooler", "mlm", "contact"),
    position_embedding_types=("rotary",),
    computes={HF: ("position_embedding_type", "rope_theta", "token_dropout", "mask_token_id", "emb_layer_norm_before",
                   "is_decoder", "add_cross_attention")},
    # EsmConfig's folding settings at their masked-LM values (ESMFold is another model).
    fixed={HF: {"is_folding_model": False, "esmfold_config": None, "vocab_list": None}},
    # `EsmIntermediate` and `EsmLMHead` call ESM's own erf GELU, and `EsmEmbeddings` has no
    # token types: a config's `hidden_act` (bertconv's exact one too) and `type_vocab_size`
    # change nothing.
    inert={HF: ("hidden_act", EXACT_ACTIVATION_KEY, "type_vocab_size")},
    # ESM-2's alphabet: <cls> 0, <pad> 1, <eos> 2 (EsmConfig's defaults, stated).
    stated={"pad_token_id": 1, "eos_token_id": 2},
    hf_marks=(".esm.", ".emb_layer_norm_after.", ".contact_head."),
    shares_hf_marks_with=("roberta",),
    pre_layer_norm=True,
    final_layer_norm=True,
    embedding_layer_norm="emb_layer_norm_before",
    token_types=False,
)
