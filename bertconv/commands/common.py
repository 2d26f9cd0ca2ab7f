"""Options and helpers every checkpoint-reading command shares."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator

import click

from .. import formats
from ..errors import EXIT_CHECK_FAILED
from ..paths import require_file_or_directory
from ..tree import ParameterTree
from . import output

if TYPE_CHECKING:
    from rich.console import Console

#: Progress bars appear for work of at least this many bytes, on a terminal, without --quiet.
PROGRESS_MIN_BYTES = 100 * 2**20


class _LazyConsole:
    """A rich `Console`, made (and rich imported) when first printed to: `--json` and `--quiet`
    runs never pay for it."""

    def __init__(self, **options):
        self._options = options
        self._console: Console | None = None

    def get(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def __getattr__(self, name: str):  # called for what is not set in __init__: the Console's own
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.get(), name)


stdout = _LazyConsole(highlight=False, soft_wrap=True)
stderr = _LazyConsole(stderr=True, highlight=False)


#: Where `--model` leaves its value for `load` (click's per-invocation store), so that the
#: commands' signatures do not all grow a parameter only ELECTRA checkpoints use.
MODEL_KEY = "bertconv.model"


def _remember_model(ctx: click.Context, _param, value: str | None) -> str | None:
    ctx.meta[MODEL_KEY] = value
    return value


def checkpoint_options(function):
    """`--config FILE`, `--heads N` and `--model NAME`, for what a checkpoint and its neighbours
    do not tell."""
    function = click.option(
        "--model", type=click.Choice(formats.MODELS), default=None, expose_value=False,
        callback=_remember_model,
        help="Which model of an ELECTRA pre-training checkpoint to read: the generator (the masked LM, the "
             "default) or the discriminator.",
    )(function)
    function = click.option(
        "--heads", "num_heads", type=click.IntRange(min=1), default=None,
        help="Number of attention heads, when no config file says it (default: hidden_size / 64).",
    )(function)
    function = click.option(
        "--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
        help="A bert_config.json or Hugging Face config.json to use instead of the one beside the checkpoint.",
    )(function)
    return function


class Tolerance(click.ParamType):
    """A finite, non-negative number (`--atol`): NaN and infinity compare with nothing."""

    name = "tolerance"

    def convert(self, value, param, ctx) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number) or number < 0:
            self.fail(f"{value!r} is not a finite, non-negative number", param, ctx)
        return number


def selected_model() -> str | None:
    """The `--model` of the running command, or None."""
    context = click.get_current_context(silent=True)
    return context.meta.get(MODEL_KEY) if context is not None else None


def load(path: Path, config_path: Path | None, num_heads: int | None, model: str | None = None) -> ParameterTree:
    """Read the checkpoint at `path`, with `model` or else the `--model` of the running command
    (a worker process of a batch has no command running: it is given `model`)."""
    require_file_or_directory(Path(path), "checkpoint")
    if config_path is not None:
        require_file_or_directory(Path(config_path), "config")
    return formats.read(Path(path), config_path=config_path, num_heads=num_heads,
                        model=model or selected_model())


def print_json(data: dict) -> None:
    """Print a report as the running command's `--json` object (stamped: see `output`)."""
    output.write(click.get_current_context().command.name, data)


def finish(report: dict, as_json: bool, print_report: Callable[[dict], None]) -> None:
    """Print a check's report (JSON or for people) and exit 1 when it says not ok."""
    if as_json:
        print_json(report)
    else:
        print_report(report)
    if not report["ok"]:
        raise SystemExit(EXIT_CHECK_FAILED)


def human(n: int) -> str:
    return f"{n:,}"


@contextmanager
def byte_progress(description: str, total_bytes: int, quiet: bool) -> Iterator[Callable[[int], None] | None]:
    """A progress bar on stderr for `total_bytes` of work: yields the callback that advances it by
    n bytes, or None when no bar is shown (quiet, small work, or stderr not a terminal)."""
    if quiet or total_bytes < PROGRESS_MIN_BYTES or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), TimeRemainingColumn(), console=stderr.get(), transient=True) as bar:
        task = bar.add_task(description, total=total_bytes)
        yield lambda nbytes: bar.advance(task, nbytes)
