"""Which of its family's head layouts a Hugging Face file holds, and which config loads it intact.

transformers builds DeBERTa-v2's masked-LM head in one of two layouts, as config.json's `legacy`
says (`cls.predictions.*` by default, `lm_predictions.lm_head.*` with `legacy` false), and loads
a file holding the other one with a newly initialized head, silently but for a warning. The
tree computes with the head the file holds; `settled` adds the notes every report carries: the
layout found, the class and setting that load it intact, and whether the file's own config.json
does. A file holding a replaced-token-detection head (DeBERTa-v3's published discriminators) is
said to be one.
"""

from __future__ import annotations

import json

from ... import json_text
from ...records import replace
from ...tree import ParameterTree
from .classes import architecture
from .tables import DEBERTA_RTD_HEAD, FAMILIES, HeadLayout

#: The canonical name whose stored name tells the head layout apart.
_HEAD_PROBE = "mlm.transform.kernel"


def held_layout(tree: ParameterTree) -> HeadLayout | None:
    """The head layout of the tree's MLM head as its file names it, or None (one layout only, or no head)."""
    family = FAMILIES.get(tree.config.model_type)
    if family is None or not family.layouts or _HEAD_PROBE not in tree:
        return None
    source = family.with_prefix(tree[_HEAD_PROBE].source)
    return next((layout for layout in family.layouts if source.startswith(layout.prefix)), None)


def stated_value(tree: ParameterTree, layout: HeadLayout) -> object:
    """The value of the layout's config key in the tree's config.json (the family's default
    layout's value when it states none or there is no config file)."""
    default = FAMILIES[tree.config.model_type].layouts[0].config_value
    source = tree.config.source
    if source is None or not source.is_file():
        return default
    try:
        data = json_text.loads(source.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return default  # the config reader has already accepted this file; nothing to add
    return data.get(layout.config_key, default) if isinstance(data, dict) else default


def layout_mismatch(tree: ParameterTree) -> str | None:
    """Why transformers would load the tree's file with a newly initialized MLM head (its
    config.json builds the other layout), or None."""
    layout = held_layout(tree)
    if layout is None:
        return None
    stated = stated_value(tree, layout)
    if bool(stated) == bool(layout.config_value):  # transformers tests the setting's truth (`if config.legacy`)
        return None
    built = next(other for other in FAMILIES[tree.config.model_type].layouts
                 if bool(other.config_value) == bool(stated))
    return (f"the MLM head is in the {layout.prefix}* layout, but config.json's {layout.config_key} is "
            f"{json.dumps(stated)}, under which transformers 5's {architecture(tree)} builds {built.prefix}* and "
            f"loads this checkpoint with its MLM head newly initialized; set \"{layout.config_key}\": "
            f"{json.dumps(layout.config_value)} to load it intact, or convert it --to hf (written in the "
            f"{built.prefix}* layout)")


def settled(tree: ParameterTree, layout: HeadLayout | None) -> ParameterTree:
    """The tree with notes on its head layout and its replaced-token-detection head, and an
    `lm_predictions` head's tying as transformers computes it (always with the word embeddings)."""
    if layout is None:
        return tree
    notes = []
    held = held_layout(tree)
    if held is not None:
        mismatch = layout_mismatch(tree)
        notes.append(mismatch or f"the MLM head is in the {held.prefix}* layout, which transformers 5's "
                                 f"{architecture(tree)} loads intact with \"{held.config_key}\": "
                                 f"{json.dumps(held.config_value)}, as config.json says")
        if not tree.config.tie_word_embeddings and held.table.spelling("mlm.decoder") is None:
            # This head has no decoder of its own: its logits are against the word embeddings
            # whatever tie_word_embeddings says.
            config = replace(tree.config, tie_word_embeddings=True,
                             provenance={**tree.config.provenance, "tie_word_embeddings": "head layout"})
            tree.config = config
    rtd = [item.name for item in tree.ignored if item.reason == DEBERTA_RTD_HEAD]
    if rtd:
        notes.append(f"a replaced-token-detection discriminator (DeBERTa-v3's ELECTRA-style pre-training): "
                     f"{', '.join(sorted(rtd)[:2])}, ... are its RTD head, which is set aside; it was trained "
                     f"to tell replaced tokens, not to predict masked ones, so its MLM head is no masked LM "
                     f"unless verify finds it trained")
    tree.notes = (*tree.notes, *notes)
    return tree
