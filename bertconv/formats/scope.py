"""Finding a BERT whose names sit under a scope: `module/bert/...` in a TF-Hub fine-tune,
`model/encoder_network/...` in a TF2 checkpoint of a model wrapped in another object.

The scope is found, not assumed: it is the `/`-ended prefix whose removal makes the most names
match the format's table ("" when the names are the table's own).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ..errors import bad_input
from .table import Table

#: The canonical parameter every BERT has exactly once: two scopes holding it are two models.
ANCHOR = "embeddings.word"


def find_scope(path: Path, names: Iterable[str], table: Table) -> str:
    """The scope under which `names` match `table` best; "" if none match at all.

    Raises `BadInput` naming `path` when two scopes each hold a word-embedding table: two BERTs
    (a teacher and a student, say), and which one is meant is not guessed.
    """
    matches: dict[str, int] = {}
    anchors: list[str] = []
    starts = _name_starts(table)
    for name in names:
        cut = 0  # the name's start, then the start of each component after a "/"
        while cut >= 0:
            if name.startswith(starts, cut):  # cheap: most cuts start no name of the table
                match = table.match(name[cut:])
                if match is not None:
                    matches[name[:cut]] = matches.get(name[:cut], 0) + 1
                    if match.canonical == ANCHOR:
                        anchors.append(name[:cut])
            slash = name.find("/", cut)
            cut = slash + 1 if slash >= 0 else -1
    if len(anchors) > 1:
        shown = ", ".join(repr(scope) for scope in anchors)
        raise bad_input(path, f"holds {len(anchors)} BERTs, under the scopes {shown}; bertconv reads one "
                              f"BERT per checkpoint and will not guess which is meant")
    if not matches:
        return ""
    return max(sorted(matches), key=lambda scope: matches[scope])


def _name_starts(table: Table) -> tuple[str, ...]:
    """What every name of `table` starts with: its rows' text before the first `/` or `{i}`."""
    return tuple({row.name.split("/")[0].split("{")[0] for row in table.rows})


def unscoped(scope: str):
    """name -> the name without `scope` (names outside it are returned unchanged)."""
    return lambda name: name[len(scope):] if name.startswith(scope) else name


def find_scopes(path: Path, names: Iterable[str], table: Table) -> list[str]:
    """The scopes under which `names` match `table`, best first: for files whose parts were
    named under different scopes (a TF-Hub SavedModel's encoder variables are unscoped, its
    masked-LM head's sit under the pre-training model's name). Each name belongs to the first
    scope under which it matches; two word-embedding tables are refused as in `find_scope`."""
    remaining = list(names)
    scopes: list[str] = []
    find_scope(path, remaining, table)  # refuses two BERTs
    while remaining:
        scope = find_scope(path, remaining, table)
        matched = [n for n in remaining if n.startswith(scope) and table.match(n[len(scope):]) is not None]
        if not matched:
            break
        scopes.append(scope)
        remaining = [n for n in remaining if n not in set(matched)]
    return scopes or [""]
