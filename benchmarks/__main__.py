"""`python -m benchmarks` (or `make bench`): build the inputs, run every benchmark, print the table
and write it to benchmarks/RESULTS.md (the README links it; a quick run or a selection of sizes
or families is only printed).

  --quick      bert-base and one family (DistilBERT) only, 1 repetition; the table is printed, not
               written (unless --output says where), so a quick look leaves nothing in the working tree
  --reps N     repetitions per row (default 3); the median is reported
  --sizes ...  model sizes to run (default: base large xlmr xlm-roberta; xlmr is the large-vocabulary
               scale row, xlm-roberta an XLM-RoBERTa of that size read from tf_model.h5 and flax_model.msgpack)
  --families ... families whose HF -> HF conversion and fill-mask run against transformers
               (default: all of benchmarks/families.py's); given alone (without --sizes), only
               they run, and --sizes alone runs no family
  --output F   where to write the Markdown
  --idle-wait S  before each measured run, wait up to S seconds for the CPUs to be idle
               (default 15, 0 with --quick); medians with runs that started busy are marked †

Inputs are cached under $BERTCONV_BENCH_DIR (default .cache/bench, about 8 GB when every
format of both sizes is there); outputs are written under it and removed after each run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import conversions, families, inputs, onnx_export
from .report import render

HERE = Path(__file__).resolve().parent


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="bert-base and DistilBERT only, 1 repetition")
    parser.add_argument("--reps", type=int, default=None, help="repetitions per row (default 3; 1 with --quick)")
    parser.add_argument("--sizes", nargs="+", choices=["base", "large", "xlmr", "xlm-roberta"], default=None)
    parser.add_argument("--families", nargs="+", choices=list(families.FAMILIES), default=None)
    parser.add_argument("--output", type=Path, default=None, help="Markdown file to write")
    parser.add_argument("--idle-wait", type=float, default=None, metavar="SECONDS",
                        help="before each run, wait up to this long for the CPUs to be idle (default 15; 0 with --quick)")
    args = parser.parse_args(argv)
    reps = args.reps or (1 if args.quick else 3)
    sizes, family_keys = selection(args.sizes, args.families, args.quick)
    output = results_file(args.output, partial=args.quick or args.sizes is not None or args.families is not None)
    command = "python -m benchmarks" + (" --quick" if args.quick else "") + \
              (f" --reps {args.reps}" if args.reps else "") + (f" --sizes {' '.join(args.sizes)}" if args.sizes else "") + \
              (f" --families {' '.join(args.families)}" if args.families else "")

    started = time.perf_counter()
    log(f"inputs in {inputs.bench_dir()}")
    idle_wait = args.idle_wait if args.idle_wait is not None else (0 if args.quick else 15)
    sections = conversions.run(sizes, reps, log, idle_wait=idle_wait) if sizes else []
    sections += families.run(family_keys, reps, log, idle_wait=idle_wait)
    extra = conversions.runtime_section(reps, args.quick, log) + onnx_export.section(reps, log) if sizes else []
    text = render(sections, command=command, reps=reps, extra=extra)
    print(text)
    if output is not None:
        output.write_text(text)
    log(f"{f'written to {output}' if output else 'printed'} ({time.perf_counter() - started:.0f} s)")
    return 0


def selection(sizes: list[str] | None, family_keys: list[str] | None, quick: bool) -> tuple[list[str], list[str]]:
    """The sizes and families to run: as given; when neither is given, all (a quick run: bert-base
    and `families.QUICK`); when one is given, none of the other."""
    if sizes is None and family_keys is None:
        return (["base"], list(families.QUICK)) if quick else (["base", "large", "xlmr", "xlm-roberta"],
                                                               list(families.FAMILIES))
    return sizes or [], family_keys or []


def results_file(given: Path | None, *, partial: bool) -> Path | None:
    """Where the table is written: --output, else RESULTS.md for a full run; the table of a quick
    run or of a selection (--sizes, --families) is only printed, so it never replaces the full
    table with part of it."""
    if given is not None:
        return given
    return None if partial else HERE / "RESULTS.md"


if __name__ == "__main__":
    raise SystemExit(main())
