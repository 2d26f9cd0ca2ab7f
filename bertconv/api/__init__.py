"""The public Python API, one module per command: a function that does the command's work and the
frozen report it returns (`audit` -> `AuditReport`, ...). `bertconv` itself exports them all;
docs/api.md describes them.

Each report's `to_json()` is the command's `--json` object (without the stamp `commands.output`
adds); the command line calls these functions and prints their reports. The modules import the
library inside their functions, so that importing one costs its dataclasses alone.
"""
