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
