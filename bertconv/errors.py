"""The two ways a command can fail, and the exit status each one maps to.

`BadInput` is the user's file or arguments being wrong (exit 2): unreadable, truncated,
inconsistent, or not a BERT checkpoint at all. `CheckFailed` is a readable checkpoint that fails
a check the user asked for (exit 1). Messages name the file, the tensor, what was expected and
what was found, because the person reading them has only the message.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2


class BertconvError(Exception):
    """Base class of every error bertconv reports without a traceback."""

    exit_status = EXIT_BAD_INPUT
    #: The file the message is about, when it names one (`bad_input` sets it).
    path: str | None = None


class BadInput(BertconvError):
    """The input cannot be read as what it claims to be (exit status 2)."""

    exit_status = EXIT_BAD_INPUT


class CheckFailed(BertconvError):
    """The input was read, and a check on it failed (exit status 1)."""

    exit_status = EXIT_CHECK_FAILED


def bad_input(path, what: str) -> BadInput:
    """A `BadInput` whose message starts with the offending file."""
    error = BadInput(f"{path}: {what}")
    error.path = str(path)
    return error


def ended_early(path, end: int) -> BadInput:
    """A `BadInput` for a file that ends before byte `end`, which its reader found there: it
    changed while being read."""
    return bad_input(path, f"ends before byte {end}: the file changed or was truncated while being read")
