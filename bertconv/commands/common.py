"""Options and helpers every checkpoint-reading command shares."""

from __future__ import annotations

import os
import re
import sys
from contextlib import contextmanager

from collections.abc import Callable, Iterator
from pathlib import Path

from .. import formats
from ..api.report import Report, load as load_checkpoint
from ..errors import EXIT_CHECK_FAILED
from ..tree import ParameterTree
from . import collector, output
from .arguments import file_path, option, positive_int

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from rich.console import Console

#: Progress bars appear for work of at least this many bytes, on a terminal, without --quiet.
PROGRESS_MIN_BYTES = 100 * 2**20


#: rich's markup: a tag in brackets, after any backslashes (an odd number escapes the tag).
MARKUP_TAG = re.compile(r"(\\*)\[([a-z#/@][^[]*?)]")


def plain(markup: str) -> str:
    """`markup` without rich's style tags, as rich prints it where it draws no styles."""
    if "[" not in markup:  # most of a table's cells (BERT-large's inspect: 2,000)
        return markup

    def untag(match: re.Match) -> str:
        backslashes, escaped = divmod(len(match.group(1)), 2)
        return "\\" * backslashes + (f"[{match.group(2)}]" if escaped else "")
    return MARKUP_TAG.sub(untag, markup)


def escape(text: str) -> str:
    """`text` as rich markup that prints as itself (`rich.markup.escape`, without importing rich:
    a report printed to a pipe never needs it)."""
    def escape_tag(match: re.Match) -> str:
        backslashes = match.group(1)
        return f"{backslashes}{backslashes}\\[{match.group(2)}]"
    escaped = MARKUP_TAG.sub(escape_tag, text)
    return escaped + "\\" if escaped.endswith("\\") and not escaped.endswith("\\\\") else escaped


class Table:
    """Columns of text (cells may hold rich markup): printed as rich's `Table(box=None,
    pad_edge=False)` on a terminal, as the same columns in plain text elsewhere."""

    def __init__(self, *headers: str):
        self.headers: tuple[str, ...] = headers
        self.rows: list[tuple[str, ...]] = []

    def add_row(self, *cells: str) -> None:
        self.rows.append(cells)

    def lines(self) -> list[str]:
        """The plain rendering: every cell padded to its column's width, columns two spaces apart."""
        rows = [tuple(plain(cell) for cell in row) for row in (self.headers, *self.rows)]
        widths = [max(len(row[i]) for row in rows) for i in range(len(self.headers))]
        return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) for row in rows]

    def rich(self):
        from rich.table import Table as RichTable

        table = RichTable(*self.headers, box=None, pad_edge=False)
        for row in self.rows:
            table.add_row(*row)
        return table


class _LazyConsole:
    """Prints rich markup: through a rich `Console` on a terminal (made, and rich imported, when
    first printed to), as plain text elsewhere (a pipe or a file shows no styles, so rich is not
    needed to strip them); `--json` and `--quiet` runs never pay for rich."""

    def __init__(self, *, stderr: bool = False, **options):
        self._options = {"stderr": stderr, **options}
        self._console: Console | None = None

    def _stream(self):
        return sys.stderr if self._options["stderr"] else sys.stdout

    def _styled(self) -> bool:
        """Whether rich would draw styles or wrap text here: a terminal, or colour forced."""
        if self._console is not None or os.environ.get("FORCE_COLOR") or os.environ.get("TTY_COMPATIBLE") == "1":
            return True
        isatty = getattr(self._stream(), "isatty", None)
        return bool(isatty and isatty())

    def get(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def print(self, *objects, **options) -> None:
        if self._styled() or not all(isinstance(o, (str, Table)) for o in objects):  # a rich renderable
            self.get().print(*(o.rich() if isinstance(o, Table) else o for o in objects), **options)
            return
        text = " ".join("\n".join(o.lines()) if isinstance(o, Table) else plain(str(o)) for o in objects)
        self._stream().write(text + "\n")

    def __getattr__(self, name: str):  # called for what is not set in __init__: the Console's own
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.get(), name)


stdout = _LazyConsole(highlight=False, soft_wrap=True)
stderr = _LazyConsole(stderr=True, highlight=False)


#: The checkpoints of a command that takes one or several (`inspect`, `audit`, `verify`).
CHECKPOINT_PATHS = option("paths", nargs="+", type=Path, metavar="PATH",
                          help="A checkpoint: a file, a directory holding one, or a repo id (org/name) in the Hugging "
                               "Face cache (an existing path always wins).")

#: `--recursive` and `--jobs N`, for the commands that take several checkpoints (see `batch`).
BATCH_OPTIONS = (
    option("--recursive", "-r", action="store_true",
           help="Every checkpoint in the directory trees given, one row each (a directory without one is skipped)."),
    option("--jobs", "-j", type=positive_int, metavar="N",
           help="Checkpoints read at once, each in a process of its own (default: the number of cores)."),
)

#: `--config FILE`, `--heads N` and `--model NAME`, for what a checkpoint and its neighbours do not tell.
CHECKPOINT_OPTIONS = (
    option("--config", dest="config_path", type=file_path, metavar="FILE",
           help="A bert_config.json or Hugging Face config.json to use instead of the one beside the checkpoint."),
    option("--heads", dest="num_heads", type=positive_int, metavar="N",
           help="Number of attention heads, when no config file says it (default: hidden_size / 64)."),
    option("--model", choices=formats.MODELS,
           help="Which model of an ELECTRA pre-training checkpoint to read: the generator (the masked LM, the "
                "default) or the discriminator."),
    option("--revision", metavar="REV",
           help="With a repo id: the branch, tag or commit (full, or 7 or more leading hex digits) of its snapshot "
                "in the Hugging Face cache (default: main)."),
)


#: `--accept-loss KEY`, for the commands that compute or convert (see `checks.contract`).
ACCEPT_LOSS = option("--accept-loss", action="append", default=[], metavar="FIELD",
                     help="Go on although FIELD would not be kept: a config key bertconv does not compute with, or "
                          "(convert) a config field the output cannot hold; the loss is printed (repeatable).")


def load(path: Path, config_path: Path | None, num_heads: int | None, model: str | None = None,
         revision: str | None = None) -> ParameterTree:
    """Read the checkpoint at `path`, or of the repo id `path` in the Hugging Face cache at
    `revision`; `model`: which model of an ELECTRA pre-training checkpoint (`api.load`). The
    cycle collector, paused while the command started, is back on once it returns or raises."""
    try:
        return load_checkpoint(path, config=config_path, heads=num_heads, model=model, revision=revision)
    finally:
        collector.resume()


def print_json(command: str, data: dict) -> None:
    """Print a report as `command`'s `--json` object (stamped: see `output`)."""
    output.write(command, data)


def finish(report: Report, as_json: bool, print_report: Callable[[dict], None]) -> None:
    """Print a check's report (its JSON object, or `print_report` of it for people) and exit 1
    when it says not ok."""
    if as_json:
        print_json(report.command, report.to_json())
    else:
        print_report(report.to_json())
    if not report.ok:
        raise SystemExit(EXIT_CHECK_FAILED)


def human(n: int) -> str:
    return f"{n:,}"


@contextmanager
def byte_progress(description: str, total_bytes: int | Callable[[], int],
                  quiet: bool) -> Iterator[Callable[[int], None] | None]:
    """A progress bar on stderr for `total_bytes` of work (or a function that counts them, called
    only where a bar could show): yields the callback that advances it by n bytes, or None when no
    bar is shown (quiet, small work, or stderr not a terminal)."""
    if quiet or not sys.stderr.isatty():
        yield None
        return
    if callable(total_bytes):
        total_bytes = total_bytes()
    if total_bytes < PROGRESS_MIN_BYTES:
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), TimeRemainingColumn(), console=stderr.get(), transient=True) as bar:
        task = bar.add_task(description, total=total_bytes)
        yield lambda nbytes: bar.advance(task, nbytes)
