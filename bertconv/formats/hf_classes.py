"""The transformers class that holds a tree's heads: the name `config.json`'s `architectures`
records (the PyTorch class; transformers' TF and Flax saves record that name too).
"""

from __future__ import annotations

from ..errors import bad_input
from ..tree import ParameterTree

#: Per `model_type`: (heads the class holds, transformers class), most specific first; a tree is
#: named by the first whose heads it has all of (the last, the base model, has none).
CLASSES: dict[str, tuple[tuple[tuple[str, ...], str], ...]] = {
    "bert": ((("mlm", "nsp"), "BertForPreTraining"), (("mlm",), "BertForMaskedLM"),
             (("nsp",), "BertForNextSentencePrediction"), ((), "BertModel")),
    "albert": ((("mlm", "sop"), "AlbertForPreTraining"), (("mlm",), "AlbertForMaskedLM"), ((), "AlbertModel")),
    "electra": ((("rtd",), "ElectraForPreTraining"), (("mlm",), "ElectraForMaskedLM"), ((), "ElectraModel")),
    "roberta": ((("mlm",), "RobertaForMaskedLM"), ((), "RobertaModel")),
}


def architecture(tree: ParameterTree) -> str:
    """The transformers class of the tree's family that holds the heads the tree has."""
    classes = CLASSES.get(tree.config.model_type)
    if classes is None:
        raise bad_input(tree.path, f"a {tree.config.model_type} model has no transformers class here; "
                                   f"known: {', '.join(CLASSES)}")
    present = tree.heads.as_dict()
    return next(cls for needed, cls in classes if all(present[h] for h in needed))


def is_base_model(tree: ParameterTree) -> bool:
    """Whether the tree's class is its family's base model (`BertModel`, ...): no head at all."""
    return architecture(tree) == CLASSES[tree.config.model_type][-1][1]
