"""Paste benchmarks/RESULTS.md (the last `python -m benchmarks` output) into README.md.

    python -m benchmarks.readme

The README shows the table between `<!-- benchmarks:start -->` and `<!-- benchmarks:end -->`
exactly as the benchmark printed it, so no figure there is ever typed by hand.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
README = ROOT / "README.md"
START, END = "<!-- benchmarks:start -->", "<!-- benchmarks:end -->"


def paste(readme: str, results: str) -> str:
    """`readme` with the text between the markers replaced by `results` (headings demoted one
    level, so the results sit under the README's own Benchmarks section)."""
    if readme.count(START) != 1 or readme.count(END) != 1 or readme.index(START) > readme.index(END):
        raise ValueError(f"README needs exactly one {START} ... {END} block")
    body = "\n".join("#" + line if line.startswith("#") else line for line in results.strip().splitlines())
    head, rest = readme.split(START)
    _, tail = rest.split(END)
    return f"{head}{START}\n{body}\n{END}{tail}"


def main() -> int:
    if not RESULTS.exists():
        print(f"{RESULTS} does not exist: run `python -m benchmarks` first", file=sys.stderr)
        return 1
    README.write_text(paste(README.read_text(), RESULTS.read_text()))
    print(f"pasted {RESULTS.name} into {README.name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
