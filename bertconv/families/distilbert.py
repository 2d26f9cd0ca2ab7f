"""DistilBERT (Hugging Face; transformers `DistilBertModel`): BERT's computation without token types
or pooler, under names of its own (`distilbert.transformer.layer.{i}.attention.q_lin`,
`sa_layer_norm`, `ffn.lin1`, `output_layer_norm`; the MLM head `vocab_transform`,
`vocab_layer_norm` and `vocab_projector`, tied to the word embeddings) and config keys of its own.

Its code fixes what BERT's config states: every LayerNorm's epsilon is 1e-12, and positions run
from 0 as BERT's. `sinusoidal_pos_embds` fills the position table with fixed sinusoids when a model
is made; the table is a parameter every file stores, and the model computes with the table it
loads (transformers 5 initializes only what a file lacks): the key never changes what a stored
model computes.
"""

from .family import HF, Family
from .family import EXACT_ACTIVATION_KEY

FAMILY = Family(
    model_type="distilbert",
    display="DistilBERT",
    heads=("mlm",),
    token_types=False,
    # DistilBertConfig's own names; its `attribute_map` also reads BERT's `hidden_size`,
    # `num_attention_heads` and `num_hidden_layers` as the first three.
    key_names={HF: {"dim": "hidden_size", "n_heads": "num_attention_heads", "n_layers": "num_hidden_layers",
                    "hidden_dim": "intermediate_size", "activation": "hidden_act"}},
    # Read by BERT, never by DistilBERT's code (transformers ignores them in its config).
    lacks={HF: ("intermediate_size", "hidden_act", "type_vocab_size", "layer_norm_eps", EXACT_ACTIVATION_KEY,
                "conditional_size")},
    inert={HF: ("sinusoidal_pos_embds", "qa_dropout", "seq_classif_dropout")},
    hf_marks=(".distilbert.", ".vocab_transform.", ".vocab_projector.", ".q_lin.", ".sa_layer_norm."),
    computes_as_bert=True,
)
