"""The one shape of every `--json` output: a stamp, the checkpoint's fields, ok, or an error.

Every object printed with `--json` carries `"bertconv": {"version", "schema"}`: the version of
bertconv that printed it and the id of the JSON Schema it follows (`bertconv.<command>/<n>`,
the file `bertconv/schemas/<command>.json`). A run that cannot read its input still prints one
object, `{"bertconv": ..., "ok": false, "error": {"message", "path"}}`, and exits 2.
"""

from __future__ import annotations

import json
import sys

#: Raised whenever an output changes incompatibly: a key removed, renamed or retyped.
SCHEMA_VERSION = 1


def version() -> str:
    """bertconv's version (`bertconv.version`, which the package's metadata is built from), read
    without importlib.metadata: 15-20 ms of a --json run."""
    from ..version import __version__

    return __version__


def schema_id(command: str) -> str:
    """The id the stamp names and the schema file's `title` holds, e.g. `bertconv.audit/1`."""
    return f"bertconv.{command}/{SCHEMA_VERSION}"


def schema(command: str) -> dict:
    """The JSON Schema (draft 2020-12) of `command`'s `--json` output."""
    from importlib.resources import files

    return json.loads(files("bertconv.schemas").joinpath(f"{command}.json").read_text())


def stamped(command: str, report: dict) -> dict:
    """`report` with the stamp first."""
    return {"bertconv": {"version": version(), "schema": schema_id(command)}, **report}


def error_object(message: str, about: str | None, **fields) -> dict:
    """The object printed instead of a report when the input cannot be read (exit 2).
    `about` is the file the message is about, when it names one (the error's `path`); `fields`
    (a batch row's checkpoint `path`) come before `ok`."""
    return {**fields, "ok": False, "error": {"message": message, "path": about}}


def write(command: str, report: dict, *, lines: bool = False) -> None:
    """Print `report` stamped: indented, or on one line (JSON Lines, one object per checkpoint)."""
    text = json.dumps(stamped(command, report), indent=None if lines else 2)
    sys.stdout.write(text + "\n")
