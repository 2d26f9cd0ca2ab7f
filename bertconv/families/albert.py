"""ALBERT (google-research/albert; transformers `AlbertModel`): embeddings E wide, always projected
to H (`embedding_hidden_mapping_in`), and `num_hidden_groups` x `inner_group_num` stored layers
applied `num_hidden_layers` times; a sentence-order head (SOP) where BERT has NSP.

brightmart's albert_zh is a variant: its word vectors alone are projected E -> H by a bias-free
matrix (`word_embeddings_2`) before H-wide position and token-type vectors are added, and its MLM
head maps back through the same matrix (`BertConfig.word_projection`).
"""

from .family import GOOGLE, HF, Family, Projection, Variant

ALBERT_ZH = Variant("albert_zh", "brightmart albert_zh ALBERT (word vectors projected alone, E -> H, by "
                                 "word_embeddings_2)", "word_projection",
                    # brightmart's modeling.py reads `config.ln_type` and fails without it.
                    stated={"ln_type": "postln"})

FAMILY = Family(
    model_type="albert",
    display="ALBERT",
    heads=("pooler", "mlm", "sop"),
    projection=Projection.ALWAYS,
    states_embedding_size=True,
    shares_layers=True,
    hf_default_activation="gelu_new",
    position_embedding_types=("absolute", "relative_key", "relative_key_query"),
    relative_terms_scaled=False,
    # brightmart's `ln_type` ("postln"; its pre-LayerNorm xxlarge is refused on reading), also in
    # the configs bertconv writes for albert_zh, which name their model type.
    computes={HF: ("embedding_size", "num_hidden_groups", "inner_group_num", "ln_type", "position_embedding_type"),
              GOOGLE: ("embedding_size", "num_hidden_groups", "inner_group_num", "ln_type")},
    # google-research/albert's modeling.py reads these at their defaults in every released model
    # (transformers 2's AlbertConfig saved them too).
    fixed={dialect: {"down_scale_factor": 1, "gap_size": 0, "net_structure_type": 0, "num_memory_blocks": 0,
                     "layers_to_keep": []} for dialect in (HF, GOOGLE)},
    # transformers' ALBERT attends both ways and has no cross-attention whatever its config's
    # decoder flags say (`AlbertModel` never reads them).
    inert={HF: ("classifier_dropout_prob", "is_decoder", "add_cross_attention")},
    hf_marks=(".albert.", ".albert_layer_groups.", ".embedding_hidden_mapping_in.", ".sop_classifier."),
    variants=(ALBERT_ZH,),
    shapes_give_layer_count=False,
)
