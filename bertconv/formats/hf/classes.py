"""The transformers class that holds a tree's heads: the name `config.json`'s `architectures`
records (the PyTorch class; transformers' TF and Flax saves record that name too).
"""

from __future__ import annotations

from ...config import layer_kinds
from ...errors import bad_input
from ...tree import ParameterTree

#: Per `model_type`: (heads the class holds, transformers class), most specific first; a tree is
#: named by the first whose heads it has all of (the last, the base model, has none).
CLASSES: dict[str, tuple[tuple[tuple[str, ...], str], ...]] = {
    "bert": ((("mlm", "nsp"), "BertForPreTraining"), (("mlm",), "BertForMaskedLM"),
             (("nsp",), "BertForNextSentencePrediction"), ((), "BertModel")),
    "albert": ((("mlm", "sop"), "AlbertForPreTraining"), (("mlm",), "AlbertForMaskedLM"), ((), "AlbertModel")),
    "electra": ((("rtd",), "ElectraForPreTraining"), (("mlm",), "ElectraForMaskedLM"), ((), "ElectraModel")),
    "roberta": ((("mlm",), "RobertaForMaskedLM"), ((), "RobertaModel")),
    "xlm-roberta": ((("mlm",), "XLMRobertaForMaskedLM"), ((), "XLMRobertaModel")),
    "camembert": ((("mlm",), "CamembertForMaskedLM"), ((), "CamembertModel")),
    "distilbert": ((("mlm",), "DistilBertForMaskedLM"), ((), "DistilBertModel")),
    "megatron-bert": ((("mlm", "nsp"), "MegatronBertForPreTraining"), (("mlm",), "MegatronBertForMaskedLM"),
                      (("nsp",), "MegatronBertForNextSentencePrediction"), ((), "MegatronBertModel")),
    "esm": ((("mlm",), "EsmForMaskedLM"), ((), "EsmModel")),
    "modernbert": ((("mlm",), "ModernBertForMaskedLM"), ((), "ModernBertModel")),
    "roformer": ((("mlm",), "RoFormerForMaskedLM"), ((), "RoFormerModel")),
    "nezha": ((("mlm", "nsp"), "NezhaForPreTraining"), (("mlm",), "NezhaForMaskedLM"),
              (("nsp",), "NezhaForNextSentencePrediction"), ((), "NezhaModel")),
    "deberta-v2": ((("mlm",), "DebertaV2ForMaskedLM"), ((), "DebertaV2Model")),
}
#: Per `model_type`: the class of a causal model (`is_decoder`) with its LM head, which is the
#: masked LM's head predicting the next token.
CAUSAL_CLASSES = {"bert": "BertLMHeadModel", "electra": "ElectraForCausalLM", "roberta": "RobertaForCausalLM",
                  "xlm-roberta": "XLMRobertaForCausalLM", "camembert": "CamembertForCausalLM",
                  "megatron-bert": "MegatronBertForCausalLM", "roformer": "RoFormerForCausalLM"}


def architecture(tree: ParameterTree) -> str:
    """The transformers class of the tree's family that holds the heads the tree has."""
    classes = CLASSES.get(tree.config.model_type)
    if classes is None:
        raise bad_input(tree.path, f"a {tree.config.model_type} model has no transformers class here; "
                                   f"known: {', '.join(CLASSES)}")
    present = tree.heads.as_dict()
    if tree.config.is_decoder and present["mlm"] and tree.config.model_type in CAUSAL_CLASSES:
        return CAUSAL_CLASSES[tree.config.model_type]
    return next(cls for needed, cls in classes if all(present[h] for h in needed))


#: Per `model_type`: the families transformers 5 removed, and the last version that computes them.
REMOVED_IN_5 = {"nezha": "4.57"}


def transformers_5_caveats(tree: ParameterTree) -> list[str]:
    """What transformers 5 (or 4) computes differently from the model a Hugging Face output holds."""
    removed = REMOVED_IN_5.get(tree.config.model_type)
    if removed is not None:
        return [f"transformers 5 removed {tree.config.model_type} models: transformers {removed} loads this output "
                f"({architecture(tree)}) and computes it"]
    if tree.config.local_attention_layers and layer_kinds.period(tree.config) is None:
        return [f"layer_types: sliding-window attention in layers {list(tree.config.local_attention_layers)}, which no "
                f"global_attn_every_n_layers gives: transformers 5 computes it; transformers 4 (4.57 checked) reads "
                f"global_attn_every_n_layers alone (default 3) and would compute another model"]
    if not tree.config.relative_positions:
        return []
    return [f"position_embedding_type is {tree.config.position_embedding_type!r}: transformers 4 computes it "
            f"(4.57 checked); transformers 5 removed relative positions from BERT and would load this output as "
            f"an absolute-position model, setting the distance_embedding tables aside, and compute another model"]


def is_base_model(tree: ParameterTree) -> bool:
    """Whether the tree's class is its family's base model (`BertModel`, ...): no head at all."""
    return architecture(tree) == CLASSES[tree.config.model_type][-1][1]
