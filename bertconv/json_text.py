"""JSON text as every reader of bertconv parses it: a config.json, a safetensors header, a shard
index, a tokenizer file.

Python's parser fails on two kinds of hostile file with exceptions that are not a decoding error:
arrays or objects nested deeper than its recursion limit (RecursionError) and integers of more
digits than `sys.get_int_max_str_digits()` (4,300; a ValueError that advises changing the
limit). `loads` turns both into `json.JSONDecodeError`, which each reader already reports as a
file it cannot read (exit 2, naming the file).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import Any


def loads(text: str, *, object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None) -> Any:
    """`json.loads(text)`, every failure a `json.JSONDecodeError` (a ValueError) saying what is
    wrong: too deeply nested, an integer of too many digits, or not JSON."""
    try:
        return json.loads(text, parse_int=_integer, object_pairs_hook=object_pairs_hook)
    except RecursionError:
        raise json.JSONDecodeError(f"arrays or objects nested too deeply to parse (beyond Python's recursion "
                                   f"limit, {sys.getrecursionlimit()}); no checkpoint file nests so", text, 0) from None
    except _LongInteger as exc:
        digits = exc.args[0]
        position = max(text.find(digits), 0)
        raise json.JSONDecodeError(f"an integer of {len(digits.lstrip('-'))} digits, more than Python converts "
                                   f"({sys.get_int_max_str_digits()}); no checkpoint file needs one", text,
                                   position) from None


class _LongInteger(ValueError):
    """An integer literal of more digits than `int` converts (args[0]: its text)."""


def _integer(digits: str) -> int:
    try:
        return int(digits)
    except ValueError:
        raise _LongInteger(digits) from None
