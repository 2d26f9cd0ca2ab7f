"""The model families bertconv holds, one declaration each (see `family.Family`).

Generic code asks this package what a family does (`of(config)`, `named(model_type)`) and never
branches on a family's name; format tables may name the families they spell. Adding a family is
one module here, its rows in each format's table, and its tests.
"""

from __future__ import annotations


from . import (albert, bert, camembert, deberta_v2, distilbert, electra, esm, megatron_bert, modernbert, nezha,
               roberta, roformer, xlm_roberta)
from ..config import COMPUTATION_FIELDS
from .family import DIALECTS, FAIRSEQ, GOOGLE, HF, Family, Projection, Variant

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from ..config import BertConfig

#: Every family, by `model_type`, in the order messages list them.
FAMILIES: dict[str, Family] = {f.model_type: f for f in (bert.FAMILY, albert.FAMILY, electra.FAMILY,
                                                          roberta.FAMILY, xlm_roberta.FAMILY, camembert.FAMILY,
                                                          distilbert.FAMILY, megatron_bert.FAMILY, esm.FAMILY,
                                                          modernbert.FAMILY, roformer.FAMILY, roformer.FAMILY_V2,
                                                          nezha.FAMILY,
                                                          deberta_v2.FAMILY)}
#: The family of a config that names none (google-research/bert's `bert_config.json`).
DEFAULT = bert.FAMILY

__all__ = ["DEFAULT", "DIALECTS", "FAIRSEQ", "FAMILIES", "GOOGLE", "HF", "Family", "Projection", "Variant",
           "computation_fields", "display_name", "member", "named", "of"]


def named(model_type: str) -> Family | None:
    """The family whose `model_type` this is, or None."""
    return FAMILIES.get(model_type)


def of(config: "BertConfig") -> Family:
    """The family of a config (its `model_type`, which every reader has checked)."""
    return FAMILIES[config.model_type]


def computation_fields(config: "BertConfig") -> tuple[str, ...]:
    """The `COMPUTATION_FIELDS` a model of the config's family computes with (`Family.uncomputed` apart)."""
    return tuple(name for name in COMPUTATION_FIELDS if name not in of(config).uncomputed)


def member(config: "BertConfig") -> str:
    """What writers name: the config's variant ("albert_zh") when it is one, else its family."""
    family = of(config)
    return next((v.name for v in family.variants if getattr(config, v.flag)), family.model_type)


def display_name(name: str) -> str:
    """How messages write a family or variant name ("ALBERT", "brightmart albert_zh ALBERT ...")."""
    for family in FAMILIES.values():
        if family.model_type == name:
            return family.display
        for variant in family.variants:
            if variant.name == name:
                return variant.display
    return name
