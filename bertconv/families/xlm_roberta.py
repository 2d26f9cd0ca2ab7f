"""XLM-RoBERTa (fairseq's XLM-R; transformers `XLMRobertaModel`): RoBERTa's computation, config keys
and file layout (`roberta.` and `lm_head.` names, positions counted past the padding index, one
token type; transformers 4's relative positions and decoders too) under its own model type, which
alone tells its files from RoBERTa's; its vocabulary is a SentencePiece model in fairseq's
dictionary order (`XLMRobertaTokenizer`).
"""


from ..records import replace
from . import roberta

FAMILY = replace(roberta.FAMILY, model_type="xlm-roberta", display="XLM-RoBERTa",
                 tokenizer_class="XLMRobertaTokenizer")
