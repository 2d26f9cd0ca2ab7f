"""transformers 4.x's TensorFlow spelling of each family: one `TfLayout` per `model_type`.

A TF model's `model.layers` are its main layer (the base model: `bert`, `roberta` (XLM-RoBERTa's and
CamemBERT's too), `albert`, `electra`, `distilbert`) and its head layers, in the order the class
assigns them. `save_weights` lists each layer's weights as Keras tracks them (a layer's own weights,
then its sublayers' in assignment order), named `<model>/<layer>/.../<weight>:0`; the rows below are
those names minus the model's, each layer's rows in that order (which differs: TFRobertaMainLayer
builds its encoder before its embeddings). A `{i}` row stands for every stored layer. Kernels are
`[in, out]`, as canonical.

The head layer that ties the decoder to the word embeddings (`holds_embeddings`) holds the whole
embeddings layer, so `save_weights` lists the embedding weights (five; DistilBERT's four) again
after its own, under the base layer's names; transformers 4.57's loader assigns the layers in
`model.layers` order, so that copy is the one the model computes with (hf_tf.py reads it).

A head may store a weight its computation never reads beside the one it does (`Copy`): TF
ALBERT's MLM head creates `bias` and `decoder/bias` and adds only the latter; transformers'
PyTorch ALBERT ties the two, and every conversion writes them equal.
"""

from __future__ import annotations

import re
from functools import cached_property, partial

from ... import families
from ...errors import bad_input
from ...records import record
from ...tree import ParameterTree
from . import classes as hf_classes
from .layer_groups import LayerGroups
from ..table import Row, Skip, Table, dense_rows, norm_rows

#: Keras names each variable with its output index, `:0`.
_norm = partial(norm_rows, gamma="gamma:0", beta="beta:0")
_dense = partial(dense_rows, kernel="kernel:0", bias="bias:0")


@record
class Copy:
    """A stored weight its model never computes with, written with `canonical`'s values."""

    canonical: str
    name: str
    reason: str


@record
class HeadLayer:
    """A head's Keras layer: its name, the canonical head it belongs to (`config.Heads`), its own
    weights in `save_weights` order, and whether it holds the embeddings layer (a tied decoder)."""

    layer: str
    head: str
    rows: tuple[Row | Copy, ...]
    holds_embeddings: bool = False


@record
class TfLayout:
    """One family's TF model: its main layer `base`, that layer's rows in `save_weights` order,
    its head layers in `model.layers` order, its stored-layer grouping (ALBERT), and the
    transformers classes 4.57 has for it in TensorFlow (the `architectures` names)."""

    model_type: str
    base: str
    base_rows: tuple[Row, ...]
    heads: tuple[HeadLayer, ...]
    classes: tuple[str, ...]
    layer_groups: LayerGroups | None = None

    @cached_property
    def table(self) -> Table:
        head_rows = tuple(row for head in self.heads for row in head.rows if isinstance(row, Row))
        return Table("hf-tf", self.base_rows + head_rows, skips=task_skips(self.model_type))

    @cached_property
    def embedding_rows(self) -> tuple[Row, ...]:
        """The embeddings layer's rows: what the holding head lists again."""
        return tuple(row for row in self.base_rows if row.name.startswith(f"{self.base}/embeddings/"))

    @cached_property
    def holder(self) -> str | None:
        """The head layer holding the embeddings layer (the prefix of its copies' names), if any."""
        return next((head.layer for head in self.heads if head.holds_embeddings), None)

    @cached_property
    def copies(self) -> dict[str, Copy]:
        return {row.name: row for head in self.heads for row in head.rows if isinstance(row, Copy)}

    @property
    def main_layers(self) -> tuple[str, ...]:
        return (self.base, *(head.layer for head in self.heads))


def task_skips(model_type: str, separator: str = "/") -> tuple[Skip, ...]:
    """transformers' task heads (sequence and token classification, question answering, multiple
    choice), which are set aside: they are no part of the pre-trained model."""
    display = families.named(model_type).display
    return tuple(Skip(f"{name}{separator}*", f"a fine-tuning head that {display} pre-training does not define")
                 for name in TASK_LAYERS)


#: The top-level names of transformers' task heads (DistilBERT's classifier sits on `pre_classifier`).
TASK_LAYERS = ("classifier", "qa_outputs", "sequence_summary", "pre_classifier")


def keras_model_name(class_name: str) -> str:
    """The Keras name of a model of `class_name` (tf-keras' `to_snake_case`): the first component
    of its weights' names, `TFBertForPreTraining` -> `tf_bert_for_pre_training`."""
    intermediate = re.sub("(.)([A-Z][a-z0-9]+)", r"\1_\2", class_name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", intermediate).lower()


def layout_for_tree(tree: ParameterTree, layouts: dict, target: str):
    """The layout of the tree's family in `layouts`, and its transformers class (which `layouts`
    must have in that framework); refused otherwise, naming what there is."""
    layout = layouts.get(tree.config.model_type)
    if layout is None:
        raise bad_input(tree.path, f"a {tree.config.model_type} model cannot be written --to {target}: it writes "
                                   f"{', '.join(layouts)}")
    architecture = hf_classes.architecture(tree)
    if architecture not in layout.classes:
        raise bad_input(tree.path, f"the tree's heads make it a {architecture}, which transformers 4.57 has no "
                                   f"{target} class for; nothing was written")
    return layout, architecture


def expanded_rows(rows: tuple, tree: ParameterTree, groups: LayerGroups | None) -> list[Row]:
    """`rows` with every `{i}` row repeated for each stored layer, layer by layer (each layer's
    rows together, as `save_weights` and Flax list them), in the file's spelling."""
    expanded, block = [], []

    def flush():
        for i in range(tree.config.stored_layers):
            for row in block:
                name = row.name.format(i=i)
                if groups is not None:
                    name = groups.unflatten(name, tree.config.inner_group_num or 1)
                expanded.append(Row(row.canonical.format(i=i), name, row.layout))
        block.clear()

    for row in rows:
        if "{i}" in row.canonical:
            block.append(row)
            continue
        flush()
        expanded.append(row)
    flush()
    return expanded


def _embeddings(base: str) -> tuple[Row, ...]:
    """The embedding weights in the order TF{Bert,Roberta,Albert,Electra}Embeddings creates them."""
    return (
        Row("embeddings.word", f"{base}/embeddings/word_embeddings/weight:0"),
        Row("embeddings.token_type", f"{base}/embeddings/token_type_embeddings/embeddings:0"),
        Row("embeddings.position", f"{base}/embeddings/position_embeddings/embeddings:0"),
        *_norm("embeddings.norm", f"{base}/embeddings/LayerNorm"),
    )


def bert_layer_rows(layer: str, dense=_dense, norm=_norm) -> tuple[Row, ...]:
    """A BERT layer's weights at `layer` (with `{i}`), in creation order (RoBERTa's and ELECTRA's
    are BERT's); `dense` and `norm` spell a dense layer's and a LayerNorm's (TF's by default)."""
    return (
        *dense("layers.{i}.attention.query", f"{layer}/attention/self/query"),
        *dense("layers.{i}.attention.key", f"{layer}/attention/self/key"),
        *dense("layers.{i}.attention.value", f"{layer}/attention/self/value"),
        *dense("layers.{i}.attention.output", f"{layer}/attention/output/dense"),
        *norm("layers.{i}.attention_norm", f"{layer}/attention/output/LayerNorm"),
        *dense("layers.{i}.ffn.intermediate", f"{layer}/intermediate/dense"),
        *dense("layers.{i}.ffn.output", f"{layer}/output/dense"),
        *norm("layers.{i}.ffn_norm", f"{layer}/output/LayerNorm"),
    )


def _bert_layer(base: str) -> tuple[Row, ...]:
    return bert_layer_rows(f"{base}/encoder/layer_._{{i}}")


def distilbert_rows(base: str, layer: str, dense=_dense, norm=_norm, embedding: str = "embeddings:0",
                    word: str = "weight:0") -> tuple[Row, ...]:
    """DistilBERT's base model in creation order: word and position embeddings (no token types),
    their LayerNorm, then each layer at `layer` (with `{i}`); no pooler."""
    return (
        Row("embeddings.word", f"{base}/embeddings/word_embeddings/{word}"),
        Row("embeddings.position", f"{base}/embeddings/position_embeddings/{embedding}"),
        *norm("embeddings.norm", f"{base}/embeddings/LayerNorm"),
        *dense("layers.{i}.attention.query", f"{layer}/attention/q_lin"),
        *dense("layers.{i}.attention.key", f"{layer}/attention/k_lin"),
        *dense("layers.{i}.attention.value", f"{layer}/attention/v_lin"),
        *dense("layers.{i}.attention.output", f"{layer}/attention/out_lin"),
        *norm("layers.{i}.attention_norm", f"{layer}/sa_layer_norm"),
        *dense("layers.{i}.ffn.intermediate", f"{layer}/ffn/lin1"),
        *dense("layers.{i}.ffn.output", f"{layer}/ffn/lin2"),
        *norm("layers.{i}.ffn_norm", f"{layer}/output_layer_norm"),
    )


#: ALBERT's stored layer, spelled flat (`LayerGroups` translates the file's group and inner index).
_ALBERT_LAYER = "albert/encoder/albert_layers_._{i}"

LAYOUTS: dict[str, TfLayout] = {layout.model_type: layout for layout in (
    TfLayout(
        "bert", "bert",
        base_rows=(*_embeddings("bert"), *_bert_layer("bert"), *_dense("pooler", "bert/pooler/dense")),
        heads=(HeadLayer("nsp___cls", "nsp", _dense("nsp", "nsp___cls/seq_relationship")),  # kernel [H, 2]
               HeadLayer("mlm___cls", "mlm", (
                   Row("mlm.output_bias", "mlm___cls/predictions/bias:0"),
                   *_dense("mlm.transform", "mlm___cls/predictions/transform/dense"),
                   *_norm("mlm.norm", "mlm___cls/predictions/transform/LayerNorm"),
               ), holds_embeddings=True)),
        classes=("BertForPreTraining", "BertForMaskedLM", "BertLMHeadModel", "BertForNextSentencePrediction",
                 "BertModel"),
    ),
    # TFRobertaMainLayer assigns its encoder and pooler before its embeddings; XLM-RoBERTa's and
    # CamemBERT's TF models are RoBERTa's classes under their own names.
    *(TfLayout(
        model_type, "roberta",
        base_rows=(*_bert_layer("roberta"), *_dense("pooler", "roberta/pooler/dense"), *_embeddings("roberta")),
        heads=(HeadLayer("lm_head", "mlm", (
            Row("mlm.output_bias", "lm_head/bias:0"),
            *_dense("mlm.transform", "lm_head/dense"),
            *_norm("mlm.norm", "lm_head/layer_norm"),
        ), holds_embeddings=True),),
        classes=(f"{prefix}ForMaskedLM", f"{prefix}ForCausalLM", f"{prefix}Model"),
    ) for model_type, prefix in (("roberta", "Roberta"), ("xlm-roberta", "XLMRoberta"), ("camembert", "Camembert"))),
    TfLayout(
        "albert", "albert",
        base_rows=(
            *_embeddings("albert"),
            *_dense("embeddings.projection", "albert/encoder/embedding_hidden_mapping_in"),
            *_dense("layers.{i}.attention.query", f"{_ALBERT_LAYER}/attention/query"),
            *_dense("layers.{i}.attention.key", f"{_ALBERT_LAYER}/attention/key"),
            *_dense("layers.{i}.attention.value", f"{_ALBERT_LAYER}/attention/value"),
            *_dense("layers.{i}.attention.output", f"{_ALBERT_LAYER}/attention/dense"),
            *_norm("layers.{i}.attention_norm", f"{_ALBERT_LAYER}/attention/LayerNorm"),
            *_dense("layers.{i}.ffn.intermediate", f"{_ALBERT_LAYER}/ffn"),
            *_dense("layers.{i}.ffn.output", f"{_ALBERT_LAYER}/ffn_output"),
            *_norm("layers.{i}.ffn_norm", f"{_ALBERT_LAYER}/full_layer_layer_norm"),
            *_dense("pooler", "albert/pooler"),
        ),
        heads=(HeadLayer("predictions", "mlm", (
            Copy("mlm.output_bias", "predictions/bias:0",
                 "TF ALBERT's MLM head adds predictions/decoder/bias:0, never this bias (transformers' PyTorch "
                 "ALBERT ties the two)"),
            Row("mlm.output_bias", "predictions/decoder/bias:0"),
            *_dense("mlm.transform", "predictions/dense"),
            *_norm("mlm.norm", "predictions/LayerNorm"),
        ), holds_embeddings=True),
            HeadLayer("sop_classifier", "sop", _dense("sop", "sop_classifier/classifier"))),  # kernel [H, 2]
        classes=("AlbertForPreTraining", "AlbertForMaskedLM", "AlbertModel"),
        layer_groups=LayerGroups("albert_layer_groups_._{g}/albert_layers_._{j}/", "albert_layers_._{i}/"),
    ),
    TfLayout(
        "electra", "electra",
        base_rows=(*_embeddings("electra"), *_dense("embeddings.projection", "electra/embeddings_project"),
                   *_bert_layer("electra")),
        heads=(HeadLayer("generator_predictions", "mlm", (
            *_norm("mlm.norm", "generator_predictions/LayerNorm"),
            *_dense("mlm.transform", "generator_predictions/dense"),
        )),
            HeadLayer("generator_lm_head", "mlm", (Row("mlm.output_bias", "generator_lm_head/bias:0"),),
                      holds_embeddings=True),
            HeadLayer("discriminator_predictions", "rtd", (
                *_dense("rtd.dense", "discriminator_predictions/dense"),
                *_dense("rtd.output", "discriminator_predictions/dense_prediction"),  # kernel [H, 1]
            ))),
        classes=("ElectraForPreTraining", "ElectraForMaskedLM", "ElectraModel"),
    ),
    # The MLM head is three layers; the last (the tied decoder's bias) holds the embeddings.
    TfLayout(
        "distilbert", "distilbert",
        base_rows=distilbert_rows("distilbert", "distilbert/transformer/layer_._{i}"),
        heads=(HeadLayer("vocab_transform", "mlm", _dense("mlm.transform", "vocab_transform")),
               HeadLayer("vocab_layer_norm", "mlm", _norm("mlm.norm", "vocab_layer_norm")),
               HeadLayer("vocab_projector", "mlm", (Row("mlm.output_bias", "vocab_projector/bias:0"),),
                         holds_embeddings=True)),
        classes=("DistilBertForMaskedLM", "DistilBertModel"),
    ),
)}

#: Every main layer name a family's TF model has (for sniffing).
MAIN_LAYERS = frozenset(name for layout in LAYOUTS.values() for name in layout.main_layers)
