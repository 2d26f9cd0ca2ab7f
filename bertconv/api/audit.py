"""`audit`: a checkpoint's parameter counts per component against the closed form of its config."""

from __future__ import annotations

from collections.abc import Mapping

from ..records import record
from .report import Checkpoint, Report, tree_of

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

    from .report import PathArg, Source


@record
class Component:
    """One component's parameters (embeddings, a layer, a head) as stored and as the closed form gives."""

    name: str
    parameters: int
    expected: int


@record
class TiedCopy:
    """A stored copy of a tied parameter (a tied decoder), counted once: as what it copies."""

    name: str
    canonical: str
    parameters: int
    shared_storage: bool


@record
class Counts:
    """An audit's counts (`checks.audit.counts`); `verify` reports them too, as its `audit`.

    Attributes:
      parameters / expected_parameters: the total stored (each tied copy once) / the closed form's.
      components: per component, both counts. ignored_parameters: values in entries set aside.
      tied_copies: the copies counted once. problems: shapes or counts that disagree; ok: none.
    """

    parameters: int
    expected_parameters: int
    components: tuple[Component, ...]
    ignored_parameters: int
    tied_copies: tuple[TiedCopy, ...]
    problems: tuple[str, ...]
    ok: bool

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Counts:
        return cls(obj["parameters"], obj["expected_parameters"], tuple(Component(**c) for c in obj["components"]),
                   obj["ignored_parameters"], tuple(TiedCopy(**t) for t in obj["tied_copies"]),
                   tuple(obj["problems"]), obj["ok"])


@record
class AuditReport(Report):
    """`audit`'s verdict: ok when every component holds the parameters the closed form gives."""

    command = "audit"

    checkpoint: Checkpoint
    counts: Counts

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> AuditReport:
        return cls(**cls.verdict(obj), checkpoint=Checkpoint.from_json(obj), counts=Counts.from_json(obj))


def audit(checkpoint: Source, *, config: PathArg | None = None, heads: int | None = None,
          model: str | None = None) -> AuditReport:
    """Count `checkpoint`'s parameters per component against the closed form of its config
    (reads no tensor data): `bertconv audit PATH`. Options as `load`'s.

    >>> report = bertconv.audit(FIXTURES / "hf/pretraining")
    >>> report.ok, report.counts.parameters == report.counts.expected_parameters
    (True, True)
    >>> report.counts.components[0]
    Component(name='embeddings.word', parameters=3168, expected=3168)
    """
    from ..checks.audit import audit as audit_tree

    return AuditReport.from_json(audit_tree(tree_of(checkpoint, config=config, heads=heads, model=model)))
