"""How a command declares its arguments: a tuple of `option(...)`s, handed to argparse as they are.

Each command module holds `ARGUMENTS` (what `argparse.ArgumentParser.add_argument` takes, one
entry per argument) and `command`, called with the parsed values as keywords. The value types
below reject a bad value while parsing, so that it is a usage error (exit 2) naming the option.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path


def option(*names: str, **settings) -> tuple[tuple[str, ...], dict]:
    """One argument, as `add_argument(*names, **settings)` takes it."""
    return names, settings


def json_flag(help: str) -> tuple[tuple[str, ...], dict]:
    """`--json`, stored as `as_json`."""
    return option("--json", dest="as_json", action="store_true", help=help)


def add_all(parser: argparse.ArgumentParser, arguments) -> None:
    for names, settings in arguments:
        parser.add_argument(*names, **settings)


def _number(text: str, kind: type, accepted: Callable[[float], bool], requirement: str):
    """`text` as an int or a float, if `accepted` by the option (else a usage error saying `requirement`)."""
    try:
        number = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
    if not accepted(number):
        raise argparse.ArgumentTypeError(f"{text!r} is not {requirement}")
    return number


def positive_int(text: str) -> int:
    """An integer of at least 1 (`--jobs`, `--heads`, `--top-k`)."""
    return _number(text, int, lambda number: number >= 1, "in the range x>=1")


def positive_float(text: str) -> float:
    """A number above 0 (`--layer-norm-eps`)."""
    return _number(text, float, lambda number: number > 0, "in the range x>0")


def tolerance(text: str) -> float:
    """A finite, non-negative number (`--atol`): NaN and infinity compare with nothing."""
    return _number(text, float, lambda number: math.isfinite(number) and number >= 0,
                   "a finite, non-negative number")


def file_path(text: str) -> Path:
    """A path that must not be a directory (`--config`, `--vocab`); whether it exists is checked
    where it is read, with the other inputs."""
    if Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a directory")
    return Path(text)


class Toggle(argparse.Action):
    """A pair of flags setting one value: the first True, the second False (`--cased/--uncased`);
    the last one given wins, neither leaves the default."""

    def __init__(self, option_strings, dest, default=None, help=None):
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, option_string == self.option_strings[0])

    def format_usage(self) -> str:
        return " | ".join(self.option_strings)
