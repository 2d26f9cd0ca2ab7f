"""A DistilBERT written as the BERT that computes the same, for a target whose library builds BERT
and not DistilBERT (Google's TF checkpoints, bert4keras).

DistilBERT computes what BERT computes (families/distilbert.py): the same post-LayerNorm layers
(`sa_layer_norm`, `output_layer_norm` are BERT's attention and output LayerNorms), attention
scaled by the head size, the FFN with the config's activation, every LayerNorm's epsilon 1e-12,
positions counted from 0 in a stored table (also when the config says `sinusoidal_pos_embds`,
which only fills that table when a model is made), and its MLM head `vocab_transform` ->
activation -> `vocab_layer_norm` -> `vocab_projector` tied to the word embeddings is BERT's
`cls/predictions` transform, LayerNorm and output bias. It lacks token types and a pooler. Its
BERT is the same tensors under BERT's names, with `type_vocab_size` 2 (BERT's) and a token-type
table of two all-zero rows, so that whatever token types a caller passes add nothing, as
DistilBERT takes none; no pooler. The read-back of the output is checked against this BERT.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from . import families
from .lazy import lazy_module
from .tensor import ArrayTensor
from .tree import Parameter, ParameterTree, model_order_key, role_of

if TYPE_CHECKING:
    import numpy as np
else:  # imported on first use
    np = lazy_module("numpy")

#: The targets that build BERT and not the families whose declaration says `computes_as_bert`.
TARGETS = ("tf", "bert4keras")
#: BERT's token types, as Google's and bert4keras' configs state them.
TOKEN_TYPES = 2

NOTE = ("the source is a {family}; the {target} output is the BERT that computes the same (model_type bert): "
        "its tensors under BERT's names, the MLM head as BERT's cls/predictions, no pooler, and type_vocab_size "
        "2 with both token-type rows all zero, so token types add nothing, as the {family} takes none")


def targets_for(family: str) -> tuple[str, ...]:
    """The targets that write `family` (a model type or variant) as its BERT."""
    declared = families.named(family)
    return TARGETS if declared is not None and declared.computes_as_bert else ()


def written_as_bert(tree: ParameterTree, target: str) -> tuple[ParameterTree, list[str]]:
    """The tree to write --to `target`, and a note: `tree` as its BERT where the target builds BERT
    and not the tree's family; else `tree` itself and no note."""
    if target not in targets_for(tree.config.model_type):
        return tree, []
    bert = replace(tree, config=replace(tree.config, model_type="bert",
                                        provenance={**tree.config.provenance, "model_type": "format"}))
    note = NOTE.format(family=families.of(tree.config).display, target=target)
    return with_zero_token_types(bert, TOKEN_TYPES), [note]


def with_zero_token_types(tree: ParameterTree, rows: int) -> ParameterTree:
    """`tree`, a model with no token types, with `type_vocab_size` `rows` and a token-type table
    of that many all-zero rows [rows, W] (in the word embeddings' dtype): every token type adds
    zero to each embedding."""
    config = replace(tree.config, type_vocab_size=rows,
                     provenance={**tree.config.provenance, "type_vocab_size": "format"})
    name = "embeddings.token_type"
    dtype = tree["embeddings.word"].tensor.dtype
    zeros = ArrayTensor(np.zeros(role_of(name).expected_shape(config), dtype=dtype.numpy), dtype)
    rows_text = "one all-zero row" if rows == 1 else f"{rows} all-zero rows"
    params = {**tree.params, name: Parameter(name, zeros, source=f"(no token types: {rows_text})", file=tree.path)}
    return replace(tree, config=config, params={n: params[n] for n in sorted(params, key=model_order_key)})
