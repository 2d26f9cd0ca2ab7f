"""ELECTRA (google-research/electra; transformers `ElectraModel`): BERT's encoder with embeddings
E wide, projected to H only when E differs (`embeddings_project`); a generator (masked LM) and a
discriminator (replaced-token detection) that share the embeddings in pre-training.
"""

from .family import GOOGLE, HF, Family, Projection

#: transformers' `SequenceSummary` settings: the classification heads' pooling, not the encoder's.
_SUMMARY = ("summary_type", "summary_use_proj", "summary_activation", "summary_last_dropout")

FAMILY = Family(
    model_type="electra",
    display="ELECTRA",
    heads=("mlm", "rtd"),
    projection=Projection.WHEN_NARROWER,
    states_embedding_size=True,
    position_embedding_types=("absolute", "relative_key", "relative_key_query"),
    computes={HF: ("embedding_size", "position_embedding_type", "is_decoder", "add_cross_attention"),
              GOOGLE: ("embedding_size",)},
    inert={HF: _SUMMARY, GOOGLE: _SUMMARY},
    hf_marks=(".electra.", ".embeddings_project.", ".generator_predictions.", ".generator_lm_head.",
              ".discriminator_predictions."),
)
