"""Options and helpers every checkpoint-reading command shares."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable

import click
from rich.console import Console

from .. import formats
from ..errors import EXIT_CHECK_FAILED
from ..tree import ParameterTree

stdout = Console(highlight=False, soft_wrap=True)
stderr = Console(stderr=True, highlight=False)


def checkpoint_options(function):
    """`--config FILE` and `--heads N`, for what a checkpoint and its neighbours do not tell."""
    function = click.option(
        "--heads", "num_heads", type=click.IntRange(min=1), default=None,
        help="Number of attention heads, when no config file says it (default: hidden_size / 64).",
    )(function)
    function = click.option(
        "--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
        help="A bert_config.json or Hugging Face config.json to use instead of the one beside the checkpoint.",
    )(function)
    return function


def load(path: Path, config_path: Path | None, num_heads: int | None) -> ParameterTree:
    return formats.read(Path(path), config_path=config_path, num_heads=num_heads)


def print_json(data) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


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
