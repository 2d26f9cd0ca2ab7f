"""Declarative name tables: one per format, read in both directions.

A table is a tuple of `Row(canonical, name, layout)`. `{i}` in both names stands for the layer
index. Reading looks a file's name up in the table and applies the row's layout to get the
canonical tensor; writing looks the canonical name up and applies the inverse. A name the table
does not know is matched against the format's `Skip` rules, which state why an entry is set
aside (buffer, optimizer slot, a head BERT does not define); anything else is reported, never
dropped silently.
"""

from __future__ import annotations

import fnmatch
import re
from enum import Enum

from ..errors import bad_input
from ..records import record
from ..tensor import LazyTensor, TransposedTensor
from ..tree import ParameterTree, fields_behind, role_of


class Layout(Enum):
    """How a format stores a tensor relative to the canonical layout."""

    IDENTITY = "identity"
    TRANSPOSE = "transpose"  # a 2-D transpose; its own inverse

    def to_canonical(self, tensor: LazyTensor) -> LazyTensor:
        return TransposedTensor(tensor) if self is Layout.TRANSPOSE else tensor

    def to_format(self, tensor: LazyTensor) -> LazyTensor:
        return TransposedTensor(tensor) if self is Layout.TRANSPOSE else tensor

    def format_shape(self, canonical_shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(reversed(canonical_shape)) if self is Layout.TRANSPOSE else tuple(canonical_shape)


IDENTITY = Layout.IDENTITY
TRANSPOSE = Layout.TRANSPOSE


@record
class Row:
    """One canonical parameter and its spelling in a format.

    `legacy` lists older spellings that are read but never written (e.g. LayerNorm `gamma`).
    """

    canonical: str
    name: str
    layout: Layout = IDENTITY
    legacy: tuple[str, ...] = ()


@record
class Skip:
    """Entries matching `pattern` (fnmatch syntax) are not parameters, for `reason`."""

    pattern: str
    reason: str

    def matches(self, name: str) -> bool:
        return fnmatch.fnmatchcase(name, self.pattern)


@record
class Match:
    canonical: str
    layout: Layout


_DIGIT_RUN = re.compile(r"\d+")
#: How many answers of `Table.match` a table keeps: a BERT-large's names several times over.
MATCHES_KEPT = 4096
_NOT_ASKED = object()
_TEMPLATES: dict[str, list[tuple[str, int]]] = {}  # name -> its layer templates, for every table


class Table:
    """A format's rows and skip rules, indexed for lookups both ways."""

    def __init__(self, format_name: str, rows: tuple[Row, ...], skips: tuple[Skip, ...] = ()):
        self.format_name = format_name
        self.rows = rows
        self.skips = skips
        self._index: tuple[dict[str, Row], dict[str, Row]] | None = None
        self._matches: dict[str, Match | None] = {}

    def _indexed(self) -> tuple[dict[str, Row], dict[str, Row]]:
        """(format name -> row, canonical name -> row), built and checked on first use: a module
        declares every family's tables, and a command reads one file (tests/test_tree.py indexes
        them all)."""
        if self._index is None:
            by_name: dict[str, Row] = {}
            by_canonical: dict[str, Row] = {}
            for row in self.rows:
                role_of(row.canonical.replace("{i}", "0"))  # every row names a real role
                if row.canonical in by_canonical:
                    raise ValueError(f"{self.format_name}: {row.canonical} appears in two rows")
                by_canonical[row.canonical] = row
                for spelling in (row.name, *row.legacy):
                    if spelling in by_name:
                        raise ValueError(f"{self.format_name}: {spelling} appears in two rows")
                    by_name[spelling] = row
            self._index = by_name, by_canonical
        return self._index

    def match(self, name: str) -> Match | None:
        """The canonical name and layout of a format name, or None if the table lacks it.

        Answers are kept (at most MATCHES_KEPT): telling which table and scope a file's names
        are read with asks each name several times (`scope.find_scope`, then the reader)."""
        found = self._matches.get(name, _NOT_ASKED)
        if found is _NOT_ASKED:
            if len(self._matches) >= MATCHES_KEPT:
                self._matches.clear()
            found = self._matches[name] = self._match(name)
        return found

    def _match(self, name: str) -> Match | None:
        by_name = self._indexed()[0]
        row = by_name.get(name)
        if row is not None and "{i}" not in row.name:
            return Match(row.canonical, row.layout)
        for template, layer in _layer_templates(name):
            row = by_name.get(template)
            if row is not None:
                return Match(row.canonical.format(i=layer), row.layout)
        return None

    def spelling(self, canonical: str) -> tuple[str, Layout] | None:
        """The format name and layout of a canonical name, or None if the format cannot hold it."""
        by_canonical = self._indexed()[1]
        row = by_canonical.get(canonical)
        if row is not None:
            return row.name, row.layout
        match = re.match(r"^layers\.(\d+)\.", canonical)
        if match:
            template = canonical.replace(match.group(0), "layers.{i}.", 1)
            row = by_canonical.get(template)
            if row is not None:
                return row.name.format(i=int(match.group(1))), row.layout
        return None

    def skip_reason(self, name: str) -> str | None:
        for skip in self.skips:
            if skip.matches(name):
                return skip.reason
        return None


def norm_rows(canonical: str, name: str, *, gamma: str = "gamma", beta: str = "beta") -> tuple[Row, ...]:
    """The rows of a LayerNorm at `name` (`<name>/gamma`, `<name>/beta`)."""
    return (Row(f"{canonical}.gamma", f"{name}/{gamma}"), Row(f"{canonical}.beta", f"{name}/{beta}"))


def torch_linear_rows(canonical: str, name: str) -> tuple[Row, ...]:
    """The rows of a torch `nn.Linear` at `name`: `<name>.weight` [out, in], the canonical kernel
    transposed, and `<name>.bias`."""
    return (Row(f"{canonical}.kernel", f"{name}.weight", TRANSPOSE), Row(f"{canonical}.bias", f"{name}.bias"))


def dense_rows(canonical: str, name: str, *, kernel: str = "kernel", bias: str = "bias") -> tuple[Row, ...]:
    """The rows of a dense layer at `name` (`<name>/kernel`, `<name>/bias`), kernel [in, out]."""
    return (Row(f"{canonical}.kernel", f"{name}/{kernel}"), Row(f"{canonical}.bias", f"{name}/{bias}"))


#: What `--drop-untied-decoder` drops: the untied decoder and its own bias.
UNTIED_DECODER = frozenset({"mlm.decoder", "mlm.decoder_bias"})


def refuse_untied_decoder(tree: ParameterTree, drop: bool, why: str) -> None:
    """Refuse a tree whose MLM decoder is a matrix of its own, which the target cannot hold (`why`
    says so), unless the user chose to `drop` it (--drop-untied-decoder)."""
    if tree.has_untied_decoder and not drop:
        raise bad_input(tree.path, f"{tree['mlm.decoder'].source} is an MLM decoder of its own (not tied to the "
                                   f"word embeddings); {why}. Pass --drop-untied-decoder to write without it (the "
                                   f"word embeddings then serve as the decoder; its values are lost)")


def refuse_sentence_head_without_pooler(tree: ParameterTree, heads: tuple[str, ...], why: str) -> None:
    """Refuse a tree with one of the sentence `heads` ("nsp", "sop") but no pooler, where the
    target's sentence head sits on the pooler (`why`)."""
    if any(getattr(tree.heads, head) for head in heads) and not tree.heads.pooler:
        raise bad_input(tree.path, f"has an NSP head but no pooler; {why}")


def refuse_unwritten(tree: ParameterTree, written: set[str], target: str, *, dropped: frozenset[str] = frozenset()) -> None:
    """Refuse to write a tree holding a counted parameter that the writer placed nowhere: neither
    `written` nor knowingly `dropped`. `target` names what has no place for it."""
    unwritten = sorted(n for n in tree.params if tree.is_counted(n) and n not in written and n not in dropped)
    if unwritten:
        raise bad_input(tree.path, no_place_for(tree, target, unwritten))


def no_place_for(tree: ParameterTree, target: str, unwritten: list[str]) -> str:
    """The refusal of parameters `target` cannot hold, naming the config field behind them (a
    relative-position table is there because of `position_embedding_type`)."""
    fields = fields_behind(unwritten)
    behind = "".join(f"; {name} is {getattr(tree.config, name)!r}, which {target} does not compute"
                     for name in fields)
    return f"{target} has no place for {', '.join(unwritten)}{behind}; nothing was written"


def _layer_templates(name: str) -> list[tuple[str, int]]:
    """(template, layer) for each digit run of `name` that can be a layer index ("01" cannot be
    layer 1): the name with that run as "{i}". The same for every table, so worked out once per
    name (`_TEMPLATES`): finding a TF checkpoint's model asks six tables about each name."""
    found = _TEMPLATES.get(name)
    if found is None:
        if len(_TEMPLATES) >= MATCHES_KEPT:
            _TEMPLATES.clear()
        found = _TEMPLATES[name] = [(name[:run.start()] + "{i}" + name[run.end():], int(run.group()))
                                    for run in _DIGIT_RUN.finditer(name) if str(int(run.group())) == run.group()]
    return found


def unit_norm_scales(tree: ParameterTree, target: str) -> frozenset[str]:
    """The norm scales (`.gamma`) of a RoFormer-v2 tree whose `target` stores none (bert4keras'
    norms have no weights): each must be all ones, computing what no scale computes, and is then
    dropped; refuses the first that is not, naming it."""
    scales = sorted(n for n in tree.params if tree.config.rms_norm and n.endswith(".gamma"))
    if not scales:
        return frozenset()
    import numpy as np  # noqa: PLC0415 (here: for the other trees it would hold up the output's first byte)

    for name in scales:
        values = np.asarray(tree[name].tensor.read())
        if not np.all(values == 1):
            raise bad_input(tree[name].file, f"tensor {name} ({tree[name].source}) is a trained norm scale (not all "
                                             f"ones); {target} has norms without a scale, so it would compute "
                                             f"another model; nothing was written")
    return frozenset(scales)
