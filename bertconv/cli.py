"""The `bertconv` command line: parsing and printing only; the work lives in the library.

Exit status: 0 fine, 1 a check failed, 2 bad input or usage, 128 + N killed by signal N (130
for Ctrl-C). Errors bertconv expects are printed as one message naming the file and the
tensor, never as a traceback. SIGTERM and SIGHUP unwind like Ctrl-C, so an output being written
is removed on the way out.
"""

from __future__ import annotations

import errno
import importlib
import os
import signal
import sys

import click

from .commands import output
from .errors import EXIT_BAD_INPUT, BertconvError

#: Command name -> its module in bertconv.commands (which defines `command`). A module is imported
#: when its command runs, so that `audit` does not wait for what `fill-mask` or `diff` import.
COMMANDS = {"inspect": "inspect", "audit": "audit", "convert": "convert", "verify": "verify", "diff": "diff",
            "fill-mask": "fill_mask"}

#: Where the group keeps its raw arguments (ctx.meta is shared with the command's context).
ARGUMENTS = "bertconv.arguments"
#: Signals that end a run the way Ctrl-C does: unwinding, so that temporaries are removed.
UNWINDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
#: Shells report death by signal N as 128 + N.
SIGNAL_EXIT_BASE = 128


class Terminated(BaseException):
    """Raised by the handler of an unwinding signal; like KeyboardInterrupt, not an error."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _terminate(signum, _frame):
    raise Terminated(signum)


class _Group(click.Group):
    def parse_args(self, ctx, args):
        ctx.meta[ARGUMENTS] = list(args)
        return super().parse_args(ctx, args)

    def list_commands(self, ctx) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        return importlib.import_module(f"{__package__}.commands.{COMMANDS[name]}").command

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BertconvError as exc:
            click.echo(f"bertconv: error: {exc}", err=True)
            _print_error_object(ctx, str(exc), exc.path)
            ctx.exit(exc.exit_status)
        except click.ClickException as exc:  # usage: click prints it on stderr and exits 2
            _print_error_object(ctx, exc.format_message(), None)
            raise
        except KeyboardInterrupt:
            click.echo("bertconv: interrupted", err=True)
            ctx.exit(SIGNAL_EXIT_BASE + signal.SIGINT)
        except Terminated as exc:
            click.echo(f"bertconv: stopped by {signal.Signals(exc.signum).name}", err=True)
            ctx.exit(SIGNAL_EXIT_BASE + exc.signum)
        except BrokenPipeError:
            _silence_stdout()
            ctx.exit(0)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EIO, errno.EBADF) or not _is_output_error(exc):
                raise
            click.echo(f"bertconv: error: cannot write the output: {exc.strerror}", err=True)
            _silence_stdout()
            ctx.exit(EXIT_BAD_INPUT)


def _json_requested(ctx) -> bool:
    """Whether the command line asks for `--json` (read from the arguments themselves, so that
    an error while parsing the others is still answered in JSON)."""
    arguments = ctx.meta.get(ARGUMENTS, [])
    if "--" in arguments:
        arguments = arguments[:arguments.index("--")]
    return "--json" in arguments


def _print_error_object(ctx, message: str, path: str | None) -> None:
    """With --json, the error as the command's JSON object on stdout (see `commands.output`)."""
    command = ctx.invoked_subcommand
    if command in COMMANDS and _json_requested(ctx):
        output.write(command, output.error_object(message, path))


def _is_output_error(exc: OSError) -> bool:
    """An error writing stdout carries no file name; one writing a checkpoint names its file."""
    return exc.filename is None


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="bertconv")
def main() -> None:
    """Convert BERT checkpoints between Google TF, bert4keras and Hugging Face, and check them."""


def run() -> None:
    """The console entry point: signal handlers, a usable stdout, then the commands."""
    for signum in UNWINDING_SIGNALS:
        signal.signal(signum, _terminate)
    if sys.stdout is None:  # started with stdout closed (`>&-`)
        sys.stderr.write("bertconv: error: standard output is closed; nowhere to print the result\n")
        raise SystemExit(EXIT_BAD_INPUT)
    try:
        main()
    finally:
        try:
            sys.stdout.flush()  # a full disk behind stdout shows here, not at interpreter exit
        except OSError as exc:
            sys.stderr.write(f"bertconv: error: cannot write the output: {exc.strerror}\n")
            _silence_stdout()
            raise SystemExit(EXIT_BAD_INPUT) from None


if __name__ == "__main__":
    run()
