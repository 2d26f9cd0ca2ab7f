"""`bertconv verify PATH`: is the MLM head there, is the decoder tied, is the file sound?"""

from __future__ import annotations

from pathlib import Path

import click

from ..checks.verify import verify
from .common import byte_progress, checkpoint_options, finish, human, load, stdout

#: Colours of the head and tying verdicts in the human report.
VERDICT_STYLE = {"complete": "green", "tied": "green", "partial": "red", "missing": "red",
                 "untied": "yellow", "n/a": "dim"}


def _styled(word: str) -> str:
    return f"[{VERDICT_STYLE.get(word, 'default')}]{word}[/]"


def _head_line(report: dict) -> str:
    line = f"MLM head:     {_styled(report['mlm_head'])}"
    if report["missing"]:
        line += f" (missing {', '.join(report['missing'])})"
    return line


def _consistency_line(report: dict) -> str:
    audit = report["audit"]
    if report["consistency"]:
        return f"consistency:  [red]{len(report['consistency'])} problem(s)[/]"
    return (f"consistency:  [green]ok[/] (shapes agree with the config; {human(audit['parameters'])} "
            f"parameters, as the closed form gives)")


def _deep_line(report: dict) -> str:
    if report["deep"] is None:
        return "deep checks:  not run (--deep reads every tensor: finite values, checksums, zeroed heads)"
    deep = report["deep"]
    return f"deep checks:  read {deep['tensors']} tensors, {human(deep['values'])} values"


def print_report(report: dict) -> None:
    """The short human report: head, tying, consistency, deep, notes, problems, verdict."""
    stdout.print(f"[bold]{report['path']}[/]  format [cyan]{report['format']}[/]")
    stdout.print(_head_line(report))
    stdout.print(f"tying:        {_styled(report['tying'])} ({report['tying_detail']})")
    stdout.print(_consistency_line(report))
    stdout.print(_deep_line(report))
    for note in report["notes"]:
        stdout.print(f"note: {note}")
    for problem in report["problems"]:
        stdout.print(f"[red]problem:[/] {problem}")
    if report["ok"]:
        stdout.print("[green]verify ok[/]")
    else:
        stdout.print(f"[red]verify FAILED[/] ({len(report['problems'])} problem(s))")


@click.command("verify")
@click.argument("path", type=click.Path(path_type=Path))
@checkpoint_options
@click.option("--deep", is_flag=True,
              help="Read every tensor once (streaming): finite values, checksums, LayerNorm gammas and "
                   "heads not all zero.")
@click.option("--allow-missing-mlm", is_flag=True,
              help="Accept a checkpoint without an MLM head (an encoder-only file verified on purpose).")
@click.option("--headers-only", is_flag=True,
              help="Verify the headers alone: absent or short data files (an index published without its "
                   "data) are noted, not failed.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar for --deep.")
def command(path: Path, config_path, num_heads, deep: bool, allow_missing_mlm: bool, headers_only: bool,
            as_json: bool, quiet: bool) -> None:
    """Check that the MLM head is present and its decoder tied, and that shapes agree with the config.

    Exit status: 0 ok, 1 a check failed, 2 the input cannot be read.
    """
    tree = load(path, config_path, num_heads)
    work = sum(p.tensor.nbytes for p in tree) if deep else 0
    with byte_progress(f"reading {tree.path.name}", work, quiet) as advance:
        report = verify(tree, deep=deep, allow_missing_mlm=allow_missing_mlm, headers_only=headers_only,
                        on_tensor=advance)
    finish(report, as_json, print_report)
