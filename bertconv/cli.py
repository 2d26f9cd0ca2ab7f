"""The `bertconv` command line: parsing and printing only; the work lives in the library.

Exit status: 0 fine, 1 a check failed, 2 bad input or usage. Errors bertconv expects are printed
as one message naming the file and the tensor, never as a traceback.
"""

from __future__ import annotations

import sys

import click

from .errors import BertconvError
from .commands import audit, convert, diff, fill_mask, inspect, verify

COMMANDS = (inspect.command, audit.command, convert.command, verify.command, diff.command, fill_mask.command)


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BertconvError as exc:
            click.echo(f"bertconv: error: {exc}", err=True)
            ctx.exit(exc.exit_status)
        except BrokenPipeError:
            sys.stderr.close()
            ctx.exit(0)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="bertconv")
def main() -> None:
    """Convert BERT checkpoints between Google TF, bert4keras and Hugging Face, and check them."""


for _command in COMMANDS:
    main.add_command(_command)


if __name__ == "__main__":
    main()
