"""`bertconv diff A B`: two checkpoints, in any formats, compared in canonical space."""

from __future__ import annotations

from pathlib import Path

import click

from ..checks.diff import BIT_EXACT, diff
from .common import Tolerance, finish, load, stdout

#: How many tensor names a line about differing dtypes shows.
DTYPE_NAMES_SHOWN = 3


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
    for difference in report["differences"]:
        stdout.print(f"[red]differs:[/] {difference}")
    if report["identical"]:
        stdout.print("[green]identical[/]")
    elif report["ok"] and report["atol"] == BIT_EXACT:
        stdout.print("[green]equal[/]: every value bit-equal once widened to float32 (the dtypes differ)")
    elif report["ok"]:
        stdout.print(f"[green]equal within {_tolerance(report['atol'])}[/]")
    else:
        stdout.print(f"[red]DIFFERENT[/] ({len(report['differences'])} difference(s))")


@click.command("diff")
@click.argument("a", type=click.Path(path_type=Path))
@click.argument("b", type=click.Path(path_type=Path))
@click.option("--atol", type=Tolerance(), default=BIT_EXACT, show_default=True,
              help="Largest absolute difference allowed per value; 0 compares bits exactly.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def command(a: Path, b: Path, atol: float, as_json: bool) -> None:
    """Compare two checkpoints tensor by tensor in canonical space (any two formats).

    Exit status: 0 equal (within --atol), 1 they differ, 2 an input cannot be read.
    """
    report = diff(load(a, None, None), load(b, None, None), atol=atol)
    finish(report, as_json, print_report)
