"""Many checkpoints in one run: `audit`, `verify` and `inspect` given several paths or `--recursive`.

Each checkpoint is read and checked in a worker process of its own (`--jobs`), and becomes one
row of a summary table, or with `--json` one line of JSON (JSON Lines: the command's object for
that checkpoint, or its error object). A checkpoint that cannot be read is a row with its error;
the run goes on. The exit status is the worst of the rows': 2 an error, 1 a check failed, 0.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from .. import formats
from ..api.report import Report
from ..errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_OK, BertconvError, bad_input
from ..records import record
from ..tree import ParameterTree
from . import output
from .common import escape, human, load, stdout

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from rich.table import Table


#: Width of the summary table when stdout is not a terminal: wide enough for any row.
UNWRAPPED_WIDTH = 10_000


def checkpoints_below(root: Path) -> list[Path]:
    """Every checkpoint in the tree under `root`, in walk order: a directory holding one checkpoint
    (as `formats.resolve` finds it, one model in several of transformers' formats included) is
    that checkpoint; a directory holding several gives each of them. A checkpoint directory's own subdirectories are its files (a SavedModel's `variables/`),
    not further checkpoints; a directory holding none is passed over."""
    found = []
    for directory, subdirectories, _ in os.walk(root):
        subdirectories.sort()
        directory = Path(directory)
        try:
            candidates = sorted({c for fmt in formats.SNIFF_ORDER for c in fmt.candidates(directory)})
        except BertconvError:  # a checkpoint that cannot be listed: its row will say why
            candidates = [directory]
        if candidates:
            one = len(candidates) == 1 or formats.preferred(candidates) is not None
            found.extend([directory] if one else candidates)
            subdirectories.clear()
    return found


def expand(paths: Iterable[Path], recursive: bool) -> list[Path]:
    """The checkpoints a command line names: each path as given, or with `recursive` each
    directory's checkpoints (`checkpoints_below`)."""
    out = []
    for path in paths:
        found = checkpoints_below(path) if recursive and path.is_dir() else [path]
        if not found:
            raise bad_input(path, f"no checkpoint in this directory tree; expected {formats.expected_checkpoints()}")
        out.extend(found)
    return out


@record
class Job:
    """One command's work on one checkpoint; sent to a worker process, so it holds module-level
    functions and plain values only."""

    report_of: Callable[[ParameterTree], Report | dict]
    load_options: dict

    def __call__(self, path: Path) -> tuple[int, dict]:
        """(exit status, report or error object) of the checkpoint at `path`: `report_of` returns
        the API's report, or its JSON object (the cache inventory's rows)."""
        try:
            made = self.report_of(load(path, **self.load_options))
            report = made if isinstance(made, dict) else made.to_json()
        except BertconvError as exc:
            return exc.exit_status, output.error_object(str(exc), exc.path, path=str(path))
        except Exception as exc:  # a bug in bertconv: one row says so, the others still run
            message = f"internal error ({type(exc).__name__}: {exc}); please report it"
            return EXIT_BAD_INPUT, output.error_object(message, None, path=str(path))
        return (EXIT_OK if report["ok"] else EXIT_CHECK_FAILED), report


def results(job: Job, paths: list[Path], jobs: int) -> Iterator[tuple[int, dict]]:
    """(status, object) per path, in the order of `paths`, computed `jobs` at a time."""
    if jobs == 1 or len(paths) == 1:
        yield from map(job, paths)
        return
    from concurrent.futures import ProcessPoolExecutor  # imported by the runs that start one
    from concurrent.futures.process import BrokenProcessPool

    executor = ProcessPoolExecutor(max_workers=min(jobs, len(paths)))
    try:
        futures = [executor.submit(job, path) for path in paths]
        for path, future in zip(paths, futures):
            try:
                yield future.result()
            except BrokenProcessPool as exc:  # a worker died (killed, or a crash in a C library)
                yield EXIT_BAD_INPUT, output.error_object(f"the process reading it died: {exc}", None,
                                                          path=str(path))
    finally:
        executor.shutdown(cancel_futures=True)


def _mlm(report: dict) -> str:
    """The MLM column: verify's verdicts, or whether the head is there (a discriminator's: RTD's)."""
    if report.get("rtd") is not None:
        return f"RTD {report['rtd']['head']}, {report['rtd']['trained']['verdict']}"
    if "mlm_head" in report:
        return f"{report['mlm_head']}, {report['mlm_trained']['verdict']}"
    return "present" if report["heads"].get("mlm") else "absent"


def _parameters(report: dict) -> str:
    count = report.get("parameters", report.get("audit", {}).get("parameters"))
    return "" if count is None else human(count)


def _verdict(status: int, report: dict) -> str:
    if "error" in report:
        return f"[red]error:[/] {escape(report['error']['message'])}"
    if status == EXIT_OK:
        return "[green]ok[/]"
    problems = report["problems"]
    more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"[red]FAILED:[/] {escape(problems[0]) if problems else ''}{more}"


def summary_table(rows: list[tuple[int, dict]]) -> Table:
    """One row per checkpoint: path, format, family, parameters, heads, MLM head, verdict."""
    from rich.table import Table  # rich is imported where a table is drawn

    table = Table(box=None, pad_edge=False)
    table.add_column("path", no_wrap=True)
    for name in ("format", "family"):
        table.add_column(name, no_wrap=True)
    table.add_column("parameters", justify="right", no_wrap=True)
    table.add_column("heads")
    table.add_column("MLM head", no_wrap=True)
    table.add_column("")
    for status, report in rows:
        if "error" in report:
            table.add_row(escape(report["path"]), "", "", "", "", "", _verdict(status, report))
            continue
        heads = ", ".join(name for name, present in report["heads"].items() if present) or "none"
        table.add_row(escape(report["path"]), report["format"], report["family"], _parameters(report), heads,
                      _mlm(report), _verdict(status, report))
    return table


def print_table(table: Table) -> None:
    """A terminal wraps the last columns; a pipe or a file gets whole lines (paths never cut),
    without the padding after the last column."""
    if stdout.is_terminal:
        stdout.print(table)
        return
    from rich.console import Console

    console = Console(highlight=False, width=UNWRAPPED_WIDTH)
    with console.capture() as captured:
        console.print(table)
    sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))


def run(command: str, paths: list[Path], report_of: Callable[[ParameterTree], Report], load_options: dict, *,
        jobs: int | None, as_json: bool) -> None:
    """Check every checkpoint of `paths` for `command`, print a table (or JSON Lines) and exit with
    the worst status."""
    rows = []
    for status, report in results(Job(report_of, load_options), paths, jobs or os.cpu_count() or 1):
        rows.append((status, report))
        if as_json:
            output.write(command, report, lines=True)
    if not as_json:
        print_table(summary_table(rows))
        failed = sum(1 for status, _ in rows if status != EXIT_OK)
        stdout.print(f"{len(rows)} checkpoint(s), " + (f"[red]{failed} not ok[/]" if failed else "[green]all ok[/]"))
    worst = max((status for status, _ in rows), default=EXIT_OK)
    if worst != EXIT_OK:
        raise SystemExit(worst)
