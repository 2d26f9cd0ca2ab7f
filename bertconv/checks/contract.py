"""The computation contract: what a config says that bertconv would not compute with.

A family declares the config keys its computation reads and those that never matter
(`bertconv.families`); any other key a config states, or a key fixed at another value than
bertconv computes, is *unread* (`BertConfig.unread`). A command that computes or converts
(`convert`, `diff`, `verify`, `fill-mask`) refuses such a key (exit 2, naming it) unless the user
accepts the loss by name (`--accept-loss KEY`), and then says what was accepted; `inspect` and
`audit`, which compute nothing, note it.

Both also carry the tree's own notes (`ParameterTree.notes`: which file of a directory was read,
the cache snapshot a repo id led to), so that every report says what was read.
"""

from __future__ import annotations

from .. import families
from ..errors import bad_input
from ..tree import ParameterTree


def _unread(tree: ParameterTree) -> list[tuple[str, str]]:
    return list(tree.config.unread)


def _where(tree: ParameterTree) -> str:
    return str(tree.config.source or tree.path)


def require_read(tree: ParameterTree, accept_loss: tuple[str, ...] | list[str] = ()) -> list[str]:
    """Refuse `tree` if its config states a key its computation in bertconv would not honour and
    that is not in `accept_loss`; the notes that say which accepted keys were left out."""
    refused = [(key, value) for key, value in _unread(tree) if key not in accept_loss]
    if refused:
        stated = "; ".join(f"{key} = {value}" for key, value in refused)
        keys = " ".join(f"--accept-loss {key}" for key, _ in refused)
        raise bad_input(tree.config.source or tree.path,
                        f"the config states {stated}, which bertconv's {families.of(tree.config).display} model "
                        f"does not compute with (neither a setting it reads nor one known not to change the "
                        f"results); computed or converted without it, the model could compute otherwise. Nothing "
                        f"was computed or written; pass {keys} to go on without it")
    return [*tree.notes, *(f"accepted loss: {_where(tree)} states {key} = {value}, which bertconv does not compute "
                           f"with" for key, value in _unread(tree) if key in accept_loss)]


def unread_notes(tree: ParameterTree) -> list[str]:
    """What `inspect` and `audit` say of the unread keys (they compute nothing, so they go on)."""
    return [*tree.notes, *(f"{_where(tree)} states {key} = {value}, which bertconv's "
                           f"{families.of(tree.config).display} model does not compute with: convert, diff, verify "
                           f"and fill-mask refuse it unless --accept-loss {key}" for key, value in _unread(tree))]
