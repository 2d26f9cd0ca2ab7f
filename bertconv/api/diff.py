"""`diff`: two checkpoints, in any formats, compared in canonical space (and, with `outputs`, by
what they compute)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..records import record
from .report import Checkpoint, Report, tree_of

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

    from .report import JSONObject, PathArg, Source

#: `atol`'s default: values compared bit for bit (`checks.arrays.BIT_EXACT`).
BIT_EXACT = 0.0
#: `outputs_atol`'s default (`checks.outputs.OUTPUTS_ATOL`, which says why).
OUTPUTS_ATOL = 1e-4


@record
class OnlyIn:
    """A canonical parameter one side has and the other lacks, with its `source` (name in its file)."""

    name: str
    source: str


@record
class Difference:
    """A parameter whose shape (or dtype) is `a` in A and `b` in B."""

    name: str
    a: Any
    b: Any


@record
class ConfigDifference:
    """A config field that decides the computation, `a` in A and `b` in B, and where each came from."""

    field: str
    a: Any
    b: Any
    a_from: str
    b_from: str


@record
class TensorComparison:
    """One canonical parameter compared: its names in A and B (`a`, `b`), dtypes, shapes, and, if
    `compared` (same shapes), whether its bits are equal, the largest difference (a number, or
    "nan"/"inf") and where, the first differing value ({index, a, b}), and the verdict at `atol`."""

    name: str
    a: str
    b: str
    dtype_a: str
    dtype_b: str
    shape_a: tuple[int, ...]
    shape_b: tuple[int, ...]
    compared: bool
    bit_equal: bool
    max_abs_diff: float | str | None
    max_at: tuple[int, ...] | None
    first_difference: Mapping[str, Any] | None
    within_tolerance: bool

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> TensorComparison:
        max_at = obj["max_at"]
        return cls(**{**obj, "shape_a": tuple(obj["shape_a"]), "shape_b": tuple(obj["shape_b"]),
                      "max_at": None if max_at is None else tuple(max_at)})


@record
class OutputsComparison:
    """Both checkpoints run on one probe batch (`checks.outputs.compare_outputs`): what was
    `compared` ("mlm_logits", or "sequence_output" when a side has no MLM head), the largest
    difference and where ([b, s, v]), how often they agree on the top token and each reconstructs
    the shown one (None for hidden states), and whether it is within `atol`."""

    compared: str
    runtime: str
    positions: int
    atol: float
    max_abs_diff: float | str
    max_at: tuple[int, ...]
    top1_agreement: float | None
    top1_a: float | None
    top1_b: float | None
    ok: bool


@record
class DiffReport(Report):
    """`diff`'s verdict: `equal` (the same as `ok`) when both hold the same parameters and shapes,
    every value within `atol` (or, with outputs, the outputs within their tolerance) and the same
    computation fields; `identical` when dtypes and bits agree too (`checks.diff.diff`).
    `tensors_ok` is the tensors' own verdict when the outputs judged the values, else None."""

    command = "diff"

    a: Checkpoint
    b: Checkpoint
    atol: float
    identical: bool
    compared: int
    only_in_a: tuple[OnlyIn, ...]
    only_in_b: tuple[OnlyIn, ...]
    shape_differences: tuple[Difference, ...]
    dtype_differences: tuple[Difference, ...]
    tensors: tuple[TensorComparison, ...]
    config_differences: tuple[ConfigDifference, ...]
    tensors_ok: bool | None
    outputs: OutputsComparison | None

    @property
    def equal(self) -> bool:
        return self.ok

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> DiffReport:
        outputs = obj.get("outputs")
        return cls(**cls.verdict(obj), a=Checkpoint.from_json(obj["a"]), b=Checkpoint.from_json(obj["b"]),
                   atol=obj["atol"], identical=obj["identical"], compared=obj["compared"],
                   only_in_a=tuple(OnlyIn(**o) for o in obj["only_in_a"]),
                   only_in_b=tuple(OnlyIn(**o) for o in obj["only_in_b"]),
                   shape_differences=tuple(Difference(**d) for d in obj["shape_differences"]),
                   dtype_differences=tuple(Difference(**d) for d in obj["dtype_differences"]),
                   tensors=tuple(TensorComparison.from_json(t) for t in obj["tensors"]),
                   config_differences=tuple(ConfigDifference(**c) for c in obj["config_differences"]),
                   tensors_ok=obj.get("tensors_ok"),
                   outputs=None if outputs is None else OutputsComparison(**{**outputs,
                                                                            "max_at": tuple(outputs["max_at"])}))


def structural_differences(report: Mapping[str, Any]) -> list[str]:
    """The differences of a `diff --json` object no output can excuse: a tensor only one side
    has, or a shape."""
    return ([f"only in A: {o['name']} ({o['source']})" for o in report["only_in_a"]]
            + [f"only in B: {o['name']} ({o['source']})" for o in report["only_in_b"]]
            + [f"{d['name']}: shape {d['a']} in A, {d['b']} in B" for d in report["shape_differences"]])


def diff(a: Source, b: Source, *, atol: float = BIT_EXACT, outputs: bool = False, outputs_atol: float = OUTPUTS_ATOL,
         runtime: str = "numpy", accept_loss: tuple[str, ...] | list[str] = (),
         on_tensor: Callable[[int], None] | None = None) -> DiffReport:
    """Compare checkpoints `a` and `b` (any two formats) tensor by tensor in canonical space:
    `bertconv diff A B`, its options as keywords. `atol`: the largest difference allowed per
    value (0: bits). `outputs`: also run both on one batch of random tokens (`runtime` "numpy"
    or "torch"); the names and shapes must still agree, and the values are judged by the logits
    within `outputs_atol`. `on_tensor(nbytes)` is called as each pair of tensors is compared.

    >>> report = bertconv.diff(FIXTURES / "trained/tf", FIXTURES / "trained/hf")
    >>> report.equal, report.identical, report.compared
    (True, True, 42)
    """
    from ..checks.arrays import format_value
    from ..checks.contract import require_read
    from ..checks.diff import diff as diff_trees

    tree_a, tree_b = tree_of(a), tree_of(b)
    accepted = [*require_read(tree_a, accept_loss), *require_read(tree_b, accept_loss)]
    report: JSONObject = diff_trees(tree_a, tree_b, atol=atol, on_tensor=on_tensor)
    if outputs:
        from ..checks.outputs import compare_outputs  # here: it imports NumPy, which the tensors' diff may not need

        report["tensors_ok"] = report["ok"]
        compared = report["outputs"] = compare_outputs(tree_a, tree_b, runtime=runtime, atol=outputs_atol)
        report["problems"] = structural_differences(report) + (
            [] if compared["ok"] else [f"outputs: largest difference {format_value(compared['max_abs_diff'])} "
                                       f"beyond --outputs-atol {compared['atol']:g}"])
        report["ok"] = not report["problems"]
    report["notes"] = [*accepted, *report["notes"]]
    return DiffReport.from_json(report)
