"""The Hugging Face cache as a whole: its inventory (`inspect --cache`, or `inspect --recursive`
over a cache directory) and which of its repos are stranded (`migrate-cache`).

A row is one repo at one cached revision (`hub_cache.cached_repos`): its snapshot read as any
directory is (`formats.resolve`: the file transformers loads first), with the checkpoint files
the snapshot holds, the family, the MLM head (present, and trained by the signs `verify` reads:
a few kilobytes of the head) and the parameters. Rows are computed by `batch.results`, in worker
processes (`--jobs`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .. import formats
from ..formats.hf import cache as hub_cache
from ..checks.verify import verify
from ..errors import EXIT_OK, BertconvError
from ..tree import ParameterTree
from . import batch, output
from .common import escape, human, stdout

#: The formats of a snapshot that transformers 5 no longer reads: a repo holding only these is stranded.
STRANDED_FORMATS = ("hf-tf", "hf-flax")


def checkpoint_files(snapshot: Path) -> dict[Path, str]:
    """Every checkpoint a snapshot holds -> its format name (what `formats.resolve` may read)."""
    found: dict[Path, str] = {}
    try:
        for fmt in formats.SNIFF_ORDER:
            for candidate in fmt.candidates(snapshot):
                found.setdefault(candidate, fmt.target)
    except BertconvError:
        pass
    return found


def inventory_row(tree: ParameterTree) -> dict:
    """A cached snapshot's row: `inspect`'s object with the tensors left out (`tensors: []`), the MLM
    head's verdict and whether it is trained (by its signs; no probe)."""
    from ..api.inspect import describe

    report = describe(tree)
    judged = verify(tree, allow_missing_mlm=True, allow_untrained_mlm=True,
                    accept_loss=tuple(key for key, _ in tree.config.unread))
    return {**report, "tensors": [], "mlm_head": judged["mlm_head"], "mlm_trained": judged["mlm_trained"]}


def snapshots_of(caches: list[Path]) -> list[hub_cache.Snapshot]:
    """Every cached snapshot of every model repo in `caches`."""
    return [snapshot for cache in caches for repo in hub_cache.cached_repos(cache) for snapshot in repo.snapshots]


def inventory(caches: list[Path], *, jobs: int | None, as_json: bool) -> None:
    """Print the inventory of `caches` (a table, or JSON Lines) and exit with the worst status."""
    snapshots = snapshots_of(caches)
    rows = []
    job = batch.Job(inventory_row, dict(config_path=None, num_heads=None))
    for snapshot, (status, report) in zip(snapshots, batch.results(job, [s.path for s in snapshots],
                                                                   jobs or os.cpu_count() or 1)):
        files = checkpoint_files(snapshot.path)
        if not files:  # a repo cached for its tokenizer or config alone: a row, not an error
            status = EXIT_OK
        report = {**report, "repo_id": snapshot.repo_id, "commit": snapshot.commit, "refs": list(snapshot.refs),
                  "checkpoints": {path.name: fmt for path, fmt in files.items()}}
        rows.append((status, report))
        if as_json:
            output.write("inspect", report, lines=True)
    if not as_json:
        batch.print_table(_table(rows))
        repos = len({report["repo_id"] for _, report in rows})
        stdout.print(f"{repos} repo(s), {len(rows)} cached revision(s) in {', '.join(map(str, caches))}")
    worst = max((status for status, _ in rows), default=EXIT_OK)
    if worst != EXIT_OK:
        raise SystemExit(worst)


def _table(rows: list[tuple[int, dict]]):
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for name in ("repo", "revision", "family", "formats", "MLM head"):
        table.add_column(name, no_wrap=True)
    table.add_column("parameters", justify="right", no_wrap=True)
    table.add_column("")
    for status, report in rows:
        revision = ",".join(report["refs"]) + f" ({report['commit'][:hub_cache.MIN_SHORT_HASH]})" if report["refs"] \
            else report["commit"][:hub_cache.MIN_SHORT_HASH]
        formats_held = ", ".join(report["checkpoints"]) or "no weights cached"
        if "error" in report:
            verdict = "" if not report["checkpoints"] else f"[red]error:[/] {escape(report['error']['message'])}"
            table.add_row(escape(report["repo_id"]), revision, "", formats_held, "", "", verdict)
            continue
        head = f"{report['mlm_head']}, {report['mlm_trained']['verdict']}"
        table.add_row(escape(report["repo_id"]), revision, report["family"], formats_held, head,
                      human(report["parameters"]), "[green]ok[/]")
    return table


def caches_given(paths: list[Path]) -> list[Path]:
    """The caches `inspect --cache` inventories: those given, else the active one."""
    if paths:
        return [Path(p) for p in paths]
    cache, _ = hub_cache.cache_dir()
    if not cache.is_dir():
        from ..errors import bad_input

        raise bad_input(cache, "is not a directory: no Hugging Face cache here (set HF_HUB_CACHE or HF_HOME, or "
                               "give the cache directory)")
    return [cache]


def is_stranded(snapshot: Path) -> bool:
    """Whether a snapshot holds weights, all of them in formats transformers 5 no longer reads."""
    held = set(checkpoint_files(snapshot).values())
    return bool(held) and held <= set(STRANDED_FORMATS)


def stderr_is_terminal() -> bool:
    return bool(getattr(sys.stderr, "isatty", None) and sys.stderr.isatty())
