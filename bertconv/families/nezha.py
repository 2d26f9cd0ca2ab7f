"""NEZHA (huawei-noah/Pretrained-Language-Model; transformers 4's `NezhaModel`, removed in
transformers 5; bert4keras `model='nezha'`): BERT's layers and heads with functional relative
positions in place of a position table. Attention adds, for query l and key r, q_l . R[d] to the
scores before their 1 / sqrt(D) scaling and p_lr R[d] to the context, R a fixed sinusoid table
[2K + 1, D] and d = clip(r - l, -K, K) + K, K the config's `max_relative_position`
(`runtime/sinusoids.py`); nothing about positions is a parameter.

transformers 4.57 computes R as a buffer it does not save; bert4keras stores it as the weights of
`Embedding-Relative-Position` (trainable=False), with K fixed at 64, as Huawei's own TF code
(google-research/bert's, its "gelu" the tanh form) fixes it.
"""

from .family import GOOGLE, HF, Family

FAMILY = Family(
    model_type="nezha",
    display="NEZHA",
    heads=("pooler", "mlm", "nsp"),
    position_embedding_types=("sinusoidal_relative",),
    computes={HF: ("max_relative_position", "is_decoder", "add_cross_attention")},
    # Huawei's code (Google's configs) builds a position table unless `use_relative_position`, and
    # clips distances at 64 whatever its config says; bert4keras clips at 64 too. bertconv's own
    # Google-style configs name the model type (transformers' dialect) and state the flag.
    fixed={GOOGLE: {"use_relative_position": True, "max_relative_position": 64}, HF: {"use_relative_position": True}},
    hf_marks=(".nezha.",),
    shares_hf_marks_with=("bert",),  # its heads are BERT's `cls.`
)
