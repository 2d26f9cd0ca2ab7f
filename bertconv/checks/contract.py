"""The computation contract: what a checkpoint holds that bertconv would not compute with.

A family declares the config keys its computation reads and those that never matter
(`bertconv.families`), and a format's table names every tensor of a model and the known kinds of
non-model entry (optimizer state, steps, buffers, task heads). What neither names is *unread*: a
config key outside the declaration, or fixed at another value than bertconv computes
(`BertConfig.unread`), and a tensor no row or skip names (`Ignored.unread`). A command that
computes or converts (`convert`, `diff`, `verify`, `fill-mask`) refuses each (exit 2, naming it)
unless the user accepts the loss by name (`--accept-loss NAME`), and then says what was accepted;
`inspect` and `audit`, which compute nothing, note it.

The notes of both (`require_read`, `unread_notes`) begin with the tree's own (`ParameterTree.notes`:
which file of a directory was read, the cache snapshot a repo id led to), so that every report says
what was read.
"""

from __future__ import annotations


from .. import families
from ..config import UNKNOWN
from ..errors import bad_input
from ..records import record
from ..tree import ParameterTree


@record
class Unread:
    """One thing a checkpoint holds that bertconv would not compute with."""

    name: str
    what: str

    def sentence(self, tree: ParameterTree) -> str:
        return f"{self.what}, which bertconv's {families.of(tree.config).display} model does not compute with"


def unread(tree: ParameterTree) -> list[Unread]:
    """The unread config keys (with their values) and tensors of `tree`, in that order."""
    where = tree.config.source or tree.path
    keys = [Unread(key, f"{where} states {key} = {value}") for key, value in tree.config.unread]
    tensors = [Unread(entry.name, f"{tree.path.name} holds {entry.name} {list(entry.shape)}, which no row of its "
                                  f"format's table names") for entry in tree.ignored if entry.unread]
    return keys + tensors


def unknown_fields(tree: ParameterTree) -> list[str]:
    """Config fields neither a config nor the shapes give (provenance "unknown"): their values are
    placeholders (an ALBERT's applied layer count and grouping without its config)."""
    return [name for name, source in tree.config.provenance.items() if source == UNKNOWN]


def _unknown_sentence(tree: ParameterTree, fields: list[str]) -> str:
    return (f"no config states {', '.join(fields)}, and {tree.path}'s shapes do not say "
            f"{'it' if len(fields) == 1 else 'them'} ({families.of(tree.config).display} models apply their stored "
            f"layers a number of times only their config gives)")


def require_read(tree: ParameterTree, accept_loss: tuple[str, ...] | list[str] = ()) -> list[str]:
    """Refuse `tree` if a field its computation needs is unknown, or if it holds something its
    computation in bertconv would not honour that is not named in `accept_loss`; the notes that
    say which accepted ones were left out."""
    unknown = unknown_fields(tree)
    if unknown:
        raise bad_input(tree.path, f"{_unknown_sentence(tree, unknown)}; nothing was computed or written: pass "
                                   f"--config with the model's config file")
    found = unread(tree)
    refused = [item for item in found if item.name not in accept_loss]
    if refused:
        stated = "; ".join(item.what for item in refused)
        flags = " ".join(f"--accept-loss {item.name}" for item in refused)
        them = "it" if len(refused) == 1 else "them"
        raise bad_input(tree.config.source if tree.config.unread else tree.path,
                        f"{stated}: bertconv's {families.of(tree.config).display} model does not compute with {them} "
                        f"(neither something it reads nor known not to change the results); computed or converted "
                        f"without {them}, the model could compute otherwise. Nothing was computed or written; pass "
                        f"{flags} to go on without {them}")
    return [*tree.notes, *(f"accepted loss: {item.sentence(tree)}" for item in found)]


def unread_notes(tree: ParameterTree) -> list[str]:
    """What `inspect` and `audit` say of what is unread or unknown (they compute nothing, so they
    go on)."""
    unknown = unknown_fields(tree)
    notes = [f"{_unknown_sentence(tree, unknown)}: the counts do not depend on {'it' if len(unknown) == 1 else 'them'}; "
             f"convert, diff, verify and fill-mask need --config"] if unknown else []
    return [*tree.notes, *notes, *(f"{item.sentence(tree)}: convert, diff, verify and fill-mask refuse it unless "
                                   f"--accept-loss {item.name}" for item in unread(tree))]
