"""The console entry point (`bertconv`): the signal handlers go in before anything else is
imported, so that a signal at any moment after the interpreter has started ends the run with one
line (and, with --json, the command's JSON error object), then `cli` takes over.

SIGTERM and SIGHUP unwind as Ctrl-C does (an output being written is removed on the way out);
the exit status is the one shells give death by the signal, 128 + N. Before the interpreter runs
this module's first line, nothing of bertconv can answer a signal.
"""

from __future__ import annotations

import os
import signal
import sys

#: Signals that end a run the way Ctrl-C does: unwinding, so that temporaries are removed.
UNWINDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
#: Shells report death by signal N as 128 + N.
SIGNAL_EXIT_BASE = 128
#: OpenBLAS (NumPy's BLAS) starts a server thread per core when NumPy is imported, and each spins
#: for 2**28 cycles (about 0.1 s of a core) waiting for work before it sleeps. A conversion never
#: calls BLAS, and on a 2-core machine that spin takes CPU the writes need (`perf` showed
#: `blas_thread_server`: bert-base bert4keras -> TF took 0.55 s of CPU, 0.46 s without it). At
#: 2**4 cycles they sleep at once; the model runtime's matrix products still get every core, each
#: waking them (microseconds, against a product's milliseconds). A value the user set is kept.
OPENBLAS_THREAD_TIMEOUT = "4"


class Terminated(BaseException):
    """Raised by the handler of an unwinding signal; like KeyboardInterrupt, not an error."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _terminate(signum, _frame):
    raise Terminated(signum)


def install_signal_handlers() -> None:
    for signum in UNWINDING_SIGNALS:
        signal.signal(signum, _terminate)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def json_requested(args: list[str]) -> bool:
    """Whether the command line names a command and asks for its `--json` (read from the arguments
    themselves, so that an error while parsing the others is still answered in JSON)."""
    from .commands import COMMANDS

    if "--" in args:
        args = args[:args.index("--")]
    return bool(args) and args[0] in COMMANDS and "--json" in args


def stopped(args: list[str], signum: int) -> int:
    """A run ended by signal `signum`: one line on stderr, and the command's JSON error object on
    stdout with --json; returns the exit status."""
    message = "interrupted (SIGINT)" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    sys.stderr.write(f"bertconv: {message}\n")
    if json_requested(args):
        from .commands import output

        output.write(args[0], output.error_object(message, None))
    return SIGNAL_EXIT_BASE + signum


def _untranslated_argparse() -> None:
    """argparse looks each of its messages up in the gettext catalogs of the user's languages, of
    which Python ships none; the first lookup imports `locale` for it (3.5-7 ms, 2-4% of an
    `audit`'s start-up, in turns of 41 runs). In the `bertconv` process its messages are taken as
    written."""
    import argparse

    argparse._ = str
    argparse.ngettext = lambda singular, plural, count: singular if count == 1 else plural


def run() -> None:
    """`bertconv ARGS`: handlers first, then the command line (`cli.run`), the cycle collector
    paused until the command has read its checkpoint (`commands.collector`)."""
    install_signal_handlers()
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", OPENBLAS_THREAD_TIMEOUT)  # before NumPy is imported
    try:
        _untranslated_argparse()
        from .commands import collector

        collector.pause()
        from . import cli
    except KeyboardInterrupt:
        raise SystemExit(stopped(sys.argv[1:], signal.SIGINT)) from None
    except Terminated as exc:
        raise SystemExit(stopped(sys.argv[1:], exc.signum)) from None
    cli.run()
