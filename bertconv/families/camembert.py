"""CamemBERT (fairseq; transformers `CamembertModel`): RoBERTa's computation, config keys and file
layout (`roberta.` and `lm_head.` names, positions counted past the padding index, one token type;
transformers 4's relative positions and decoders too) under its own model type, which alone tells
its files from RoBERTa's; its vocabulary is a SentencePiece model in fairseq's dictionary order
(`CamembertTokenizer`), where <s> and </s> are ids 5 and 6, not RoBERTa's 0 and 2 (so its configs
are not written with RoBERTa's).
"""


from ..records import replace
from . import roberta

FAMILY = replace(roberta.FAMILY, model_type="camembert", display="CamemBERT", stated={},
                 tokenizer_class="CamembertTokenizer")
