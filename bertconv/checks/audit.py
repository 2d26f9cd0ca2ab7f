"""Parameter counts per component, against the closed form from the config.

Reads shapes only: an audit never touches tensor data. A tied decoder is counted once (as the
word embeddings); buffers, optimizer slots and other entries in `ignored` are not counted.
"""

from __future__ import annotations

from ..config import expected_components
from .contract import unread_notes
from .report import checkpoint
from .shapes import shape_problems
from .vocab import vocab_padding
from ..tree import ParameterTree, component_of

#: How many names of one kind of ignored entry a summary lists before "and N more".
NAMES_SHOWN = 5


def audit(tree: ParameterTree) -> dict:
    """The audit report of `tree` as a JSON-ready dict (the `audit --json` object).

    Keys: the checkpoint's (path, format, family, config, heads, ignored: see `report.checkpoint`),
    then those of `counts`, and notes (one sentence per kind of ignored entry).
    """
    return {**checkpoint(tree), **counts(tree),
            "notes": [*unread_notes(tree), *ignored_summary([i.as_dict() for i in tree.ignored]),
                      *filter(None, [vocab_padding(tree)])]}


def counts(tree: ParameterTree) -> dict:
    """The counts of an audit (`verify` reports them under `audit`).

    Keys: parameters, expected_parameters, components [{name, parameters, expected}],
    ignored_parameters, tied_copies [{name, canonical, parameters, shared_storage}], problems, ok.
    """
    expected = expected_components(tree.config, tree.heads)
    present: dict[str, int] = {}
    tied_copies = []
    for param in tree:
        if tree.is_counted(param.name):
            component = component_of(param.name)
            present[component] = present.get(component, 0) + param.numel
        else:
            tied_copies.append({"name": param.source, "canonical": param.name, "parameters": param.numel,
                                "shared_storage": param.shared_with is not None})
    components = [{"name": name, "parameters": present.get(name, 0), "expected": count}
                  for name, count in expected.items()]
    components += [{"name": name, "parameters": count, "expected": 0}
                   for name, count in present.items() if name not in expected]
    problems = shape_problems(tree)
    problems += [f"component {c['name']}: {c['parameters']:,} parameters, closed form gives {c['expected']:,}"
                 for c in components if c["parameters"] != c["expected"]]
    parameters = sum(present.values())
    expected_total = sum(expected.values())
    return {
        "parameters": parameters,
        "expected_parameters": expected_total,
        "components": components,
        "ignored_parameters": sum(i.parameters for i in tree.ignored),
        "tied_copies": tied_copies,
        "problems": problems,
        "ok": not problems and parameters == expected_total,
    }


def ignored_summary(ignored: list[dict]) -> list[str]:
    """One sentence per reason entries were set aside (from `audit`'s `ignored` list), naming the
    first few: a pre-training checkpoint holds hundreds of optimizer slots."""
    by_reason: dict[str, list[dict]] = {}
    for entry in ignored:
        by_reason.setdefault(entry["reason"], []).append(entry)
    sentences = []
    for reason, entries in by_reason.items():
        names = [e["name"] for e in entries]
        shown = ", ".join(names[:NAMES_SHOWN])
        more = f" and {len(names) - NAMES_SHOWN} more" if len(names) > NAMES_SHOWN else ""
        values = sum(e["parameters"] for e in entries)
        sentences.append(f"ignored {len(names)} entr{'y' if len(names) == 1 else 'ies'} "
                         f"({values:,} value{'' if values == 1 else 's'}; {reason}): {shown}{more}")
    return sentences
