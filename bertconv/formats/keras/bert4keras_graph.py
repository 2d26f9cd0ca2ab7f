"""The model bert4keras builds, as a graph of layer calls: its layers in `model.layers` order
(hence the order of an HDF5 file's `layer_names`, and of the Keras 3 layout's groups).
"""

from __future__ import annotations


from ...config import Heads
from ...records import field, record
from .bert4keras_table import (
    ALBERT,
    ATTENTION_LAYER,
    BERT,
    FEED_FORWARD_LAYER,
    ROFORMER_V2,
    SHARED_ATTENTION_LAYER,
    SHARED_FEED_FORWARD_LAYER,
    Family,
)
from .model import Node, functional_layer_order

#: The name the writer gives the condition input of a conditional-LayerNorm model.
CONDITION_INPUT = "Input-Condition"


@record(frozen=False)
class _Graph:
    nodes: list[Node] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)

    def call(self, layer: str, *parents: int) -> int:
        self.nodes.append(Node(layer, parents))
        return len(self.nodes) - 1

    def input(self, layer: str) -> int:
        self.inputs.append(self.call(layer))
        return self.inputs[-1]


def model_layers(num_layers: int, heads: Heads, *, segments: bool = True, conditional: bool = False,
                 dropout: bool = True, family: Family = BERT, projection: bool = False) -> list[str]:
    """The `model.layers` names of `build_transformer_model(config, model=, with_pool=, with_nsp=,
    with_mlm=)` (ELECTRA: `with_discriminator=`), in order: the calls of bert4keras'
    `apply_embeddings`, `apply_main_layers` and `apply_final_layers` as a graph, ordered as Keras
    orders a functional model.

    `dropout`: the config has a non-zero hidden_dropout_prob (bert4keras adds Dropout layers only
    then; they hold no weights). `segments`: type_vocab_size > 0. `projection`: embedding_size
    differs from hidden_size (Embedding-Mapping). ALBERT calls one set of layers L times.
    """
    g = _Graph()
    x = g.call("Embedding-Token", g.input("Input-Token"))
    if segments:
        segment = g.call("Embedding-Segment", g.input("Input-Segment"))
        x = g.call("Embedding-Token-Segment", x, segment)
    if family.position_layer is None:  # RoFormer computes its positions in the layers instead
        x = g.call("Embedding-Position", x)
    condition = (g.input(CONDITION_INPUT),) if conditional else ()

    def maybe_dropout(name: str, x: int) -> int:
        return g.call(name, x) if dropout else x

    def add_and_norm(block: str, y: int, residual: int) -> int:
        y = g.call(f"{block}-Add", residual, maybe_dropout(f"{block}-Dropout", y))
        return g.call(f"{block}-Norm", y, *condition)

    if family is ROFORMER_V2:  # RoFormerV2.apply_embeddings: dropout, then its norm
        x = g.call("Embedding-Norm", maybe_dropout("Embedding-Dropout", x))
    else:
        x = maybe_dropout("Embedding-Dropout", g.call("Embedding-Norm", x, *condition))
    if projection:
        x = g.call("Embedding-Mapping", x)
    shared = family is ALBERT
    # The first layer's input gives the positions every attention layer reads (RoFormer's sinusoids).
    positions = (g.call(family.position_layer, x),) if family.position_layer and num_layers else ()
    for i in range(num_layers):
        attention = SHARED_ATTENTION_LAYER if shared else ATTENTION_LAYER.format(i=i)
        feed_forward = SHARED_FEED_FORWARD_LAYER if shared else FEED_FORWARD_LAYER.format(i=i)
        x = add_and_norm(attention, g.call(attention, x, x, x, *positions), x)  # query, key, value
        x = add_and_norm(feed_forward, g.call(feed_forward, x), x)
    if family is ROFORMER_V2:  # its MLM head: the token embedding in "dense" mode on the last hidden states
        if not heads.mlm:
            return functional_layer_order(g.nodes, [x], g.inputs)
        y = g.call("Embedding-Token", maybe_dropout("Output-MLM-Dropout", x))
        return functional_layer_order(g.nodes, [g.call("Output-MLM-Activation", y)], g.inputs)
    outputs = [x]
    if heads.rtd:  # ELECTRA's discriminator: its head alone (model='electra' builds no other)
        y = g.call("Discriminator-Prediction", g.call("Discriminator-Dense", x))
        return functional_layer_order(g.nodes, [y], g.inputs)
    sentence_head = heads.sop if shared else heads.nsp
    if heads.pooler:
        y = g.call("Pooler-Dense", g.call("Pooler", x))
        outputs.append(g.call("NSP-Proba", y) if sentence_head else y)
    if heads.mlm:
        y = g.call("MLM-Norm", g.call("MLM-Dense", x), *condition)
        y = g.call("Embedding-Token", y)  # the tied decoder: the token embedding in "dense" mode
        outputs.append(g.call("MLM-Activation", g.call("MLM-Bias", y)))
    # apply_final_layers returns the encoder output alone only when there is no head.
    return functional_layer_order(g.nodes, outputs[1:] or outputs, g.inputs)
