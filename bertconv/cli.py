"""The `bertconv` command line: parsing and printing only; the work lives in the library.

Exit status: 0 fine, 1 a check failed, 2 bad input or usage, 128 + N killed by signal N (130
for Ctrl-C). Errors bertconv expects are printed as one message naming the file and the
tensor, never as a traceback. SIGTERM and SIGHUP unwind like Ctrl-C, so an output being written
is removed on the way out.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import re
import signal
import sys
from collections.abc import Callable

from .commands import COMMANDS, output
from .commands.arguments import add_all
from .errors import EXIT_BAD_INPUT, EXIT_OK, BertconvError
from .launch import Terminated, install_signal_handlers, json_requested, stopped

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import NoReturn


class UsageError(Exception):
    """A command line argparse cannot parse (exit 2), with the parser whose usage to show."""

    def __init__(self, parser: argparse.ArgumentParser, message: str):
        super().__init__(message)
        self.parser = parser


#: What reads as a negative number, not an option, after an option that takes a value: argparse's
#: own pattern knows only -10000 and -0.5, so `--mask-adder -1e9` or `-inf` would read as options.
NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-inf(inity)?$", re.IGNORECASE)


class _Parser(argparse.ArgumentParser):
    """Raises a usage error instead of printing it, so that `main` can also answer it in JSON, and
    takes every spelling of a negative number as a value (see `NEGATIVE_NUMBER`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = NEGATIVE_NUMBER  # argparse's hook for this, private but stable

    def error(self, message: str) -> NoReturn:
        raise UsageError(self, message)


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's help, descriptions printed as written. argparse makes a formatter for every
    argument added and sizes it with `shutil`, which imports the compression modules: the width is
    read here from `COLUMNS` or the terminal, as `shutil` would."""

    def __init__(self, prog: str):
        super().__init__(prog, width=_terminal_columns() - 2)


def _terminal_columns() -> int:
    """The width `shutil.get_terminal_size` gives: `COLUMNS`, else stdout's terminal, else 80."""
    try:
        if int(os.environ["COLUMNS"]) > 0:
            return int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        pass
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 80


class _Version(argparse.Action):
    """`--version`: reads the installed package's metadata only when asked."""

    def __init__(self, option_strings, dest, help=None):
        super().__init__(option_strings, argparse.SUPPRESS, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser, namespace, values, option_string=None) -> NoReturn:
        sys.stdout.write(f"bertconv, version {output.version()}\n")
        parser.exit()


def _main_parser() -> argparse.ArgumentParser:
    """`bertconv [--version] COMMAND ARGS...`: the command's own parser reads ARGS."""
    listing = "\n".join(f"  {name:<11}{summary}" for name, (_, summary) in COMMANDS.items())
    parser = _Parser(prog="bertconv", formatter_class=_HelpFormatter,
                     description="Convert BERT checkpoints between Google TF, bert4keras and Hugging Face, and check "
                                 "them.",
                     epilog=f"commands:\n{listing}\n\n`bertconv COMMAND --help` describes a command's arguments.")
    parser.add_argument("--version", action=_Version, help="Show the version and exit.")
    parser.add_argument("command", metavar="COMMAND", choices=COMMANDS, help="One of the commands below.")
    parser.add_argument("arguments", nargs=argparse.REMAINDER, metavar="ARGS", help="The command's arguments.")
    return parser


def _docstring_text(doc: str) -> str:
    """`doc` as `inspect.cleandoc` gives it, without importing `inspect` (with `ast`, `dis` and
    `tokenize`, some 5 ms of every command's start-up)."""
    lines = doc.expandtabs().split("\n")
    indent = min((len(line) - len(line.lstrip()) for line in lines[1:] if line.strip()), default=0)
    return "\n".join([lines[0].lstrip(), *(line[indent:] for line in lines[1:])]).strip("\n")


def command_parser(name: str) -> tuple[argparse.ArgumentParser, Callable[..., None]]:
    """The parser of command `name` (its module imported), and the function it runs."""
    module = importlib.import_module(f"{__package__}.commands.{COMMANDS[name][0]}")
    parser = _Parser(prog=f"bertconv {name}", description=_docstring_text(module.command.__doc__),
                     formatter_class=_HelpFormatter)
    add_all(parser, module.ARGUMENTS)
    return parser, module.command


def main(args: list[str] | None = None) -> NoReturn:
    """Run `bertconv ARGS` (default: the process's arguments) and exit with its status."""
    args = sys.argv[1:] if args is None else [str(a) for a in args]
    raise SystemExit(_run(args))


def _run(args: list[str]) -> int:
    """Parse `args`, run the command, and return its exit status; what went wrong goes to stderr.
    Options may come before, between or after the positional arguments (`parse_intermixed_args`)."""
    if not args:
        _main_parser().print_help(sys.stderr)
        return EXIT_BAD_INPUT
    try:
        if args[0] not in COMMANDS:  # --help, --version or a mistake: the main parser answers
            chosen = _main_parser().parse_args(args)
            args = [chosen.command, *chosen.arguments]
        parser, command = command_parser(args[0])
        command(**vars(parser.parse_intermixed_args(args[1:])))
    except UsageError as exc:
        sys.stderr.write(f"{exc.parser.format_usage()}{exc.parser.prog}: error: {exc}\n")
        _print_error_object(args, str(exc), None)
        return EXIT_BAD_INPUT
    except BertconvError as exc:
        sys.stderr.write(f"bertconv: error: {exc}\n")
        _print_error_object(args, str(exc), exc.path)
        return exc.exit_status
    except KeyboardInterrupt:
        return stopped(args, signal.SIGINT)
    except Terminated as exc:
        return stopped(args, exc.signum)
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_OK
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EIO, errno.EBADF) or not _is_output_error(exc):
            raise
        sys.stderr.write(f"bertconv: error: cannot write the output: {exc.strerror}\n")
        _silence_stdout()
        return EXIT_BAD_INPUT
    return EXIT_OK


def _print_error_object(args: list[str], message: str, path: str | None) -> None:
    """With --json, the error as the command's JSON object on stdout (see `commands.output`)."""
    if json_requested(args):
        output.write(args[0], output.error_object(message, path))


def _is_output_error(exc: OSError) -> bool:
    """An error writing stdout carries no file name; one writing a checkpoint names its file."""
    return exc.filename is None


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def run() -> None:
    """The console entry point: signal handlers, a usable stdout, then the commands."""
    install_signal_handlers()
    if sys.stdout is None:  # started with stdout closed (`>&-`)
        sys.stderr.write("bertconv: error: standard output is closed; nowhere to print the result\n")
        raise SystemExit(EXIT_BAD_INPUT)
    try:
        main()
    except SystemExit as finished:
        status = finished.code
    finally:
        try:
            sys.stdout.flush()  # a full disk behind stdout shows here, not at interpreter exit
        except OSError as exc:
            sys.stderr.write(f"bertconv: error: cannot write the output: {exc.strerror}\n")
            _silence_stdout()
            raise SystemExit(EXIT_BAD_INPUT) from None
    _end_now(status)


def _end_now(status: int | str | None) -> NoReturn:
    """End the process with `status` (as SystemExit would), skipping the interpreter's teardown.

    Everything the command wrote is complete by now: outputs fsynced and renamed into place,
    files closed, stdout flushed. The teardown would only free every module and join idle worker
    threads: 15 to 40 ms after a bert-base conversion (with h5py loaded, the most), which is 5 to
    15% of the time `cp` + `sync` takes to write the same bytes.
    """
    if status is None:
        status = EXIT_OK
    elif not isinstance(status, int):
        sys.stderr.write(f"{status}\n")
        status = 1
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    run()
