"""`bertconv migrate-cache OUT`: every stranded repo of a Hugging Face cache to safetensors.

A repo is stranded when the snapshot its `main` points to (else its only snapshot) holds weights
in transformers' TF or Flax formats alone (`tf_model.h5`, `flax_model.msgpack`), which
transformers 5 no longer reads. Each is converted as `convert SNAPSHOT OUT/<repo id> --to hf`
does (the same checks, atomic output, tokenizer files carried), never into the cache; an output
that exists is left as it is (a rerun goes on where the last one stopped).
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

from ..formats.hf import cache as hub_cache
from ..conversion import convert
from ..errors import EXIT_OK, bad_input
from ..tree import ParameterTree
from . import batch, hub, output
from .arguments import json_flag, option, positive_int
from .common import ACCEPT_LOSS, byte_progress, escape, stdout

ARGUMENTS = (
    option("out", type=Path, metavar="OUT",
           help="The directory to write into: one folder per repo id (OUT/org/name), never inside a cache."),
    option("--cache", type=Path, metavar="DIR",
           help="The Hugging Face cache to migrate (default: HF_HUB_CACHE, HF_HOME/hub or ~/.cache/huggingface/hub)."),
    option("--jobs", "-j", type=positive_int, metavar="N",
           help="Repos converted at once, each in a process of its own (default: the number of cores)."),
    ACCEPT_LOSS,
    json_flag("Print one JSON object per stranded repo (JSON Lines): convert's object, with repo_id, commit "
              "and status."),
    option("--quiet", "-q", action="store_true", help="No progress bar."),
)


def stranded(cache: Path) -> list[hub_cache.Snapshot]:
    """Each repo's snapshot at `main` (else its only one) when it is stranded (`hub.is_stranded`)."""
    found = []
    for repo in hub_cache.cached_repos(cache):
        at_main = [s for s in repo.snapshots if hub_cache.DEFAULT_REVISION in s.refs]
        chosen = at_main or (list(repo.snapshots) if len(repo.snapshots) == 1 else [])
        if chosen and hub.is_stranded(chosen[0].path):
            found.append(chosen[0])
    return found


def migrate_one(tree: ParameterTree, *, out: Path, accept_loss: tuple[str, ...]) -> dict:
    """Convert one stranded snapshot to `out/<repo id>` (left as it is if it exists)."""
    snapshot = tree.path.parent
    repo_id = hub_cache.repo_id_of(snapshot.parent.parent.name)
    destination = out / repo_id
    if os.path.lexists(destination):
        from ..checks.report import checkpoint

        return {**checkpoint(tree), "ok": True, "status": "exists", "output": {"path": str(destination)},
                "problems": [], "notes": [f"{destination} exists: left as it is"]}
    destination.parent.mkdir(parents=True, exist_ok=True)
    result = convert(tree, destination, "hf", accept_loss=accept_loss, given=snapshot)
    return {**result.as_dict(), "status": "converted"}


def command(out: Path, cache: Path | None, jobs: int | None, accept_loss: list[str], as_json: bool,
            quiet: bool) -> None:
    """Convert every cached repo whose weights are only tf_model.h5 or flax_model.msgpack to safetensors in OUT.

    One folder per repo id (OUT/org/name) with model.safetensors, config.json and the snapshot's
    tokenizer files; the cache is only read. An output that exists is left as it is. A summary
    table (or JSON Lines) follows; the exit status is the worst of the repos'.
    """
    cache = cache or hub_cache.cache_dir()[0]
    if not cache.is_dir():
        raise bad_input(cache, "is not a directory: no Hugging Face cache here (pass --cache DIR)")
    inside = hub_cache.cache_holding(out) or (
        cache if Path(os.path.realpath(out)).is_relative_to(os.path.realpath(cache)) else None)
    if inside is not None:
        raise bad_input(out, f"lies inside the Hugging Face cache {inside}, which only huggingface_hub writes; "
                             f"choose an output directory outside it")
    snapshots = stranded(cache)
    job = batch.Job(partial(migrate_one, out=Path(os.path.abspath(out)), accept_loss=tuple(accept_loss)),
                    dict(config_path=None, num_heads=None))
    work = sum(sum(p.stat().st_size for p in hub.checkpoint_files(s.path)) for s in snapshots)
    rows = []
    with byte_progress(f"migrating {len(snapshots)} repo(s)", work, quiet or as_json) as advance:
        results = batch.results(job, [s.path for s in snapshots], jobs or os.cpu_count() or 1)
        for snapshot, (status, report) in zip(snapshots, results):
            report = {**report, "repo_id": snapshot.repo_id, "commit": snapshot.commit,
                      "status": report.get("status", "error")}
            rows.append((status, report))
            if advance:
                advance(sum(p.stat().st_size for p in hub.checkpoint_files(snapshot.path)))
            if as_json:
                output.write("migrate-cache", report, lines=True)
    if not as_json:
        _print_summary(rows, cache)
    worst = max((status for status, _ in rows), default=EXIT_OK)
    if worst != EXIT_OK:
        raise SystemExit(worst)


def _print_summary(rows: list[tuple[int, dict]], cache: Path) -> None:
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for name in ("repo", "commit", "from", "status", "output"):
        table.add_column(name, no_wrap=True)
    for _, report in rows:
        if "error" in report:
            table.add_row(escape(report["repo_id"]), report["commit"][:hub_cache.MIN_SHORT_HASH], "",
                          "[red]error[/]", escape(report["error"]["message"]))
            continue
        style = "green" if report["status"] == "converted" else "yellow"
        table.add_row(escape(report["repo_id"]), report["commit"][:hub_cache.MIN_SHORT_HASH], report["format"],
                      f"[{style}]{report['status']}[/]", escape(report["output"]["path"]))
    if rows:
        batch.print_table(table)
    counts = {status: sum(1 for _, r in rows if r["status"] == status) for status in ("converted", "exists", "error")}
    stdout.print(f"{len(rows)} stranded repo(s) in {cache}: {counts['converted']} converted, {counts['exists']} "
                 f"already there, {counts['error']} failed")
