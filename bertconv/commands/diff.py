"""`bertconv diff A B`: two checkpoints, in any formats, compared in canonical space."""

from __future__ import annotations

from pathlib import Path

from .. import formats
from ..api.diff import BIT_EXACT, OUTPUTS_ATOL, diff, structural_differences
from ..checks.arrays import format_value
from ..checks.contract import require_read
from ..checks.report import checkpoint
from ..checks.trained import RUNTIMES
from ..errors import EXIT_CHECK_FAILED, bad_input
from .arguments import json_flag, option, tolerance
from .common import ACCEPT_LOSS, byte_progress, finish, load, print_json, stdout

#: How many tensor names a line about differing dtypes shows.
DTYPE_NAMES_SHOWN = 3
#: With --outputs, how many tensors whose values differ are named (the outputs judge them).
VALUE_DIFFERENCES_SHOWN = 3


def _tolerance(atol: float) -> str:
    return "bit-exact" if atol == BIT_EXACT else f"atol {atol}"


def _largest(report: dict) -> str:
    """The largest difference among tensors that pass, as a short phrase (or "")."""
    passing = [t for t in report["tensors"] if t["compared"] and not t["bit_equal"] and t["within_tolerance"]]
    if not passing:
        return ""
    worst = max(passing, key=lambda t: float(t["max_abs_diff"]))
    return (f"; {len(passing)} tensor(s) differ within tolerance, at most {worst['max_abs_diff']} "
            f"({worst['name']})")


def _dtype_groups(report: dict) -> dict[tuple[str, str], list[str]]:
    """Canonical names of tensors whose dtype differs, by (dtype in A, dtype in B)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for d in report["dtype_differences"]:
        groups.setdefault((d["a"], d["b"]), []).append(d["name"])
    return groups


def print_report(report: dict) -> None:
    """Both inputs, what was compared, each difference, and the verdict."""
    stdout.print(f"A  [bold]{report['a']['path']}[/]  ({report['a']['format']})")
    stdout.print(f"B  [bold]{report['b']['path']}[/]  ({report['b']['format']})")
    stdout.print(f"compared {report['compared']} tensors in canonical space, {_tolerance(report['atol'])}"
                 f"{_largest(report)}")
    for (a, b), names in _dtype_groups(report).items():
        shown = ", ".join(names[:DTYPE_NAMES_SHOWN]) + (" ..." if len(names) > DTYPE_NAMES_SHOWN else "")
        stdout.print(f"dtype: {len(names)} tensor(s) are {a} in A, {b} in B ({shown}); values compared as float32")
    outputs = report.get("outputs")
    differences = report["problems"]
    if outputs is not None:
        differences = structural_differences(report)
        _print_value_differences(report)
    for difference in differences:
        stdout.print(f"[red]differs:[/] {difference}")
    if outputs is not None:
        _print_outputs(report, outputs)
    elif report["identical"]:
        stdout.print("[green]identical[/]")
    elif report["ok"] and report["atol"] == BIT_EXACT:
        stdout.print("[green]equal[/]: every value bit-equal once widened to float32 (the dtypes differ)")
    elif report["ok"]:
        stdout.print(f"[green]equal within {_tolerance(report['atol'])}[/]")
    else:
        stdout.print(f"[red]DIFFERENT[/] ({len(differences)} difference(s))")


def _print_value_differences(report: dict) -> None:
    """With --outputs: the tensors whose values differ beyond --atol, named briefly."""
    differing = [t for t in report["tensors"] if t["compared"] and t["shape_a"] == t["shape_b"]
                 and not t["within_tolerance"]]
    if not differing:
        return
    worst = max(differing, key=lambda t: float(t["max_abs_diff"]))
    shown = ", ".join(t["name"] for t in differing[:VALUE_DIFFERENCES_SHOWN])
    more = f" and {len(differing) - VALUE_DIFFERENCES_SHOWN} more" if len(differing) > VALUE_DIFFERENCES_SHOWN else ""
    stdout.print(f"values: {len(differing)} tensor(s) differ beyond {_tolerance(report['atol'])} ({shown}{more}), "
                 f"at most {format_value(worst['max_abs_diff'])} ({worst['name']}); judged by the outputs below")


def _print_outputs(report: dict, outputs: dict) -> None:
    """The outputs line and the verdict."""
    what = "MLM logits" if outputs["compared"] == "mlm_logits" else "last hidden states (no MLM head on both sides)"
    line = (f"outputs: {what} on {outputs['positions']} random tokens ({outputs['runtime']} runtime): largest "
            f"difference {format_value(outputs['max_abs_diff'])} at {outputs['max_at']}")
    if outputs["top1_agreement"] is not None:
        line += (f"; top-1 agreement {outputs['top1_agreement']:.1%}; reconstructs the shown token "
                 f"{outputs['top1_a']:.1%} (A), {outputs['top1_b']:.1%} (B)")
    stdout.print(line)
    if report["ok"]:
        stdout.print(f"[green]equal outputs[/] within --outputs-atol {outputs['atol']:g}")
    elif not outputs["ok"]:
        stdout.print(f"[red]DIFFERENT outputs[/]: largest difference {format_value(outputs['max_abs_diff'])} beyond "
                     f"--outputs-atol {outputs['atol']:g} (a lossy conversion, such as float16, is accepted by "
                     f"naming its budget there)")
    else:
        stdout.print("[red]DIFFERENT[/]: the checkpoints do not hold the same tensors")


ARGUMENTS = (
    option("a", type=Path, metavar="A", help="A checkpoint: a file, or a directory holding one."),
    option("b", type=Path, metavar="B", help="The checkpoint to compare it with, in any format."),
    option("--atol", type=tolerance, default=BIT_EXACT,
           help="Largest absolute difference allowed per value; 0 compares bits exactly (default: %(default)s)."),
    option("--outputs", dest="with_outputs", action="store_true",
           help="Also run both on the same batch of random tokens and compare their MLM logits; the outputs, not "
                "the bits, then decide whether values agree."),
    option("--outputs-atol", type=tolerance, default=OUTPUTS_ATOL,
           help="Largest absolute logit difference allowed with --outputs (default: %(default)s)."),
    option("--runtime", choices=RUNTIMES, default="numpy",
           help="Runtime that computes the outputs: NumPy, or torch (an optional extra) (default: %(default)s)."),
    ACCEPT_LOSS,
    json_flag("Print one JSON object."),
)


def command(a: Path, b: Path, atol: float, with_outputs: bool, outputs_atol: float, runtime: str,
            accept_loss: list[str], as_json: bool) -> None:
    """Compare two checkpoints tensor by tensor in canonical space (any two formats).

    With --outputs, the tensors must still be the same names and shapes, and their values are
    judged by the logits they compute (within --outputs-atol) instead of bit for bit.

    B may be an ONNX export (`convert --to onnx`): with --outputs, onnxruntime runs it and its
    logits are compared with A's in the NumPy runtime; it has no tensors to compare.

    Exit status: 0 equal (within --atol, or by the outputs), 1 they differ, 2 an input cannot be read.
    """
    export = _export_at(b)
    if export is not None:
        _diff_export(a, *export, with_outputs, outputs_atol, accept_loss, as_json)
        return
    tree_a, tree_b = load(a, None, None), load(b, None, None)
    work = sum(p.tensor.nbytes for p in tree_a) + sum(p.tensor.nbytes for p in tree_b)
    with byte_progress(f"comparing {tree_a.path.name} and {tree_b.path.name}", work, as_json) as advance:
        report = diff(tree_a, tree_b, atol=atol, outputs=with_outputs, outputs_atol=outputs_atol, runtime=runtime,
                      accept_loss=accept_loss, on_tensor=advance)
    finish(report, as_json, print_report)


# --- B an export (ONNX): its outputs are all there is to compare -------------------------------


def _export_at(path: Path):
    """(the export's path, its format's `compare_outputs`) when `path` is an export bertconv runs
    but does not read (ONNX), else None (a checkpoint, or nothing `load` will not explain)."""
    try:
        fmt, exact = formats.resolve(path)
    except Exception:  # not a checkpoint at all: `load` says why
        return None
    return (exact, fmt.compare_outputs) if fmt.compare_outputs is not None else None


def _diff_export(a: Path, export: Path, compare, with_outputs: bool, outputs_atol: float,
                 accept_loss: list[str], as_json: bool) -> None:
    """A's logits against the export's, run by its own runtime, on the export check's batches."""
    if not with_outputs:
        raise bad_input(export, "is an ONNX export, which holds a computation rather than a checkpoint's tensors: "
                                "pass --outputs to compare its logits with A's")
    tree_a = load(a, None, None)
    accepted = require_read(tree_a, accept_loss)
    outputs = compare(tree_a, export, atol=outputs_atol)
    problems = [] if outputs["ok"] else [
        f"outputs: {outputs['nonfinite']} logits of the export are inf or NaN where A's are finite"
        if outputs["nonfinite"] else
        f"outputs: largest difference {format_value(outputs['max_abs_diff'])} beyond --outputs-atol {outputs['atol']:g}"]
    report = {"a": checkpoint(tree_a), "b": {"path": str(export), "format": "onnx", "export": True},
              "outputs": outputs, "ok": outputs["ok"], "problems": problems, "notes": list(accepted)}
    if as_json:
        print_json("diff", report)
    else:
        _print_export_report(report)
    if not report["ok"]:
        raise SystemExit(EXIT_CHECK_FAILED)


def _print_export_report(report: dict) -> None:
    stdout.print(f"A  [bold]{report['a']['path']}[/]  ({report['a']['format']})")
    stdout.print(f"B  [bold]{report['b']['path']}[/]  (an ONNX export, run by onnxruntime)")
    _print_outputs(report, report["outputs"])
