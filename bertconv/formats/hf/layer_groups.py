"""Stored layers named by (group, inner layer), as ALBERT's are, against a table's flat spelling.

ALBERT stores `num_hidden_groups` groups of `inner_group_num` layers, and transformers names
stored layer k = g * inner_group_num + j by both indices (TF `albert_layer_groups_._{g}/
albert_layers_._{j}`, Flax `albert_layer_groups/{g}/albert_layers/{j}`). A format's table spells
those layers flat (`albert_layers_._{i}`, a name transformers never writes) so that its rows have
one index; `LayerGroups` translates a file's names to the table's and back.
"""

from __future__ import annotations

import re
from pathlib import Path

from ...errors import bad_input
from ...records import record

#: Put before a file name that must match no row (no row starts with it).
UNMATCHABLE = "\0"


def _pattern(template: str, *names: str) -> re.Pattern:
    """`template` with each `{name}` of `names` a captured digit run, everything else literal."""
    escaped = re.escape(template)
    for name in names:
        escaped = escaped.replace(re.escape("{" + name + "}"), f"(?P<{name}>\\d+)")
    return re.compile(escaped)


@record
class LayerGroups:
    """How a format spells a grouped stored layer (`grouped`, with `{g}` and `{j}`) and how its
    table spells it (`flat`, with `{i}`); both are name parts between separators."""

    grouped: str
    flat: str

    @property
    def _grouped(self) -> re.Pattern:
        return _pattern(self.grouped, "g", "j")

    @property
    def _flat(self) -> re.Pattern:
        return _pattern(self.flat, "i")

    def inner_count(self, names: list[str]) -> int:
        """Without a config: the most inner layers any group of `names` stores."""
        inner = [int(m.group("j")) for m in map(self._grouped.search, names) if m is not None]
        return max(inner, default=0) + 1

    def flatten(self, path: Path, name: str, inner_group_num: int) -> str:
        """A file name in the table's flat spelling. Indices with a leading zero are left as they
        are (no row matches them); a name already spelled flat, which transformers never writes,
        is made unmatchable. An inner index past the config's `inner_group_num` is refused."""
        match = self._grouped.search(name)
        if match is None:
            return UNMATCHABLE + name if self._flat.search(name) else name
        group, inner = match.group("g"), match.group("j")
        if str(int(group)) != group or str(int(inner)) != inner:
            return name
        if int(inner) >= inner_group_num:
            raise bad_input(path, f"tensor {name!r} is inner layer {inner} of group {group}, but the config says "
                                  f"inner_group_num is {inner_group_num}: the config is not this checkpoint's")
        flat = self.flat.format(i=int(group) * inner_group_num + int(inner))
        return name[:match.start()] + flat + name[match.end():]

    def unflatten(self, name: str, inner_group_num: int) -> str:
        """The inverse of `flatten`: stored layer k is inner layer k % J of group k // J."""
        match = self._flat.search(name)
        if match is None:
            return name
        layer = int(match.group("i"))
        grouped = self.grouped.format(g=layer // inner_group_num, j=layer % inner_group_num)
        return name[:match.start()] + grouped + name[match.end():]
