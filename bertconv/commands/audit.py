"""`bertconv audit PATH`: parameter counts per component against the closed form."""

from __future__ import annotations

from pathlib import Path

from ..api.audit import audit
from ..checks.audit import ignored_summary
from .arguments import json_flag
from .common import BATCH_OPTIONS, CHECKPOINT_OPTIONS, CHECKPOINT_PATHS, Table, finish, human, load, stdout


#: The config fields the human report shows (`--json` has them all, with their provenance).
SHOWN_CONFIG = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "max_position_embeddings", "type_vocab_size", "hidden_act", "layer_norm_eps", "tie_word_embeddings")


def print_report(report: dict) -> None:
    stdout.print(f"[bold]{report['path']}[/]  format [cyan]{report['format']}[/]"
                 + (f"  model [cyan]{report['model']}[/]" if report["model"] else ""))
    config = report["config"]
    shown = [key for key in SHOWN_CONFIG if key in config] + (["conditional_size"] if config.get("conditional_size") else [])
    unknown = {key for key, source in config["provenance"].items() if source == "unknown"}
    stdout.print("config: " + " ".join(f"{key}={'?' if key in unknown else config[key]}" for key in shown))
    heads = ", ".join(name for name, present in report["heads"].items() if present) or "none"
    stdout.print(f"heads: {heads}")
    table = Table("component", "parameters", "closed form", "")
    for c in report["components"]:
        mark = "[green]ok[/]" if c["parameters"] == c["expected"] else "[red]MISMATCH[/]"
        table.add_row(c["name"], human(c["parameters"]), human(c["expected"]), mark)
    table.add_row("[bold]total[/]", f"[bold]{human(report['parameters'])}[/]",
                  f"[bold]{human(report['expected_parameters'])}[/]", "")
    stdout.print(table)
    for copy in report["tied_copies"]:
        how = "shares storage with" if copy["shared_storage"] else "is a stored copy of"
        stdout.print(f"tied: {copy['name']} ({copy['canonical']}) {how} its tied parameter; counted once")
    ignored = ignored_summary(report["ignored"])
    for sentence in ignored:
        stdout.print(f"{sentence} (not counted)")
    for note in report["notes"]:
        if note not in ignored:
            stdout.print(f"note: {note}")
    for problem in report["problems"]:
        stdout.print(f"[red]problem:[/] {problem}")
    stdout.print("[green]audit ok[/]" if report["ok"] else "[red]audit FAILED[/]")


ARGUMENTS = (
    CHECKPOINT_PATHS,
    *CHECKPOINT_OPTIONS,
    *BATCH_OPTIONS,
    json_flag("Print one JSON object (several checkpoints: one per line)."),
)


def command(paths: list[Path], config_path: Path | None, num_heads: int | None, model: str | None,
            revision: str | None, recursive: bool, jobs: int | None, as_json: bool) -> None:
    """Count parameters per component against the closed form from the config (reads no tensor data).

    Several PATHs (or --recursive) print one row per checkpoint; the exit status is the worst.
    """
    if len(paths) > 1 or recursive:
        from . import batch  # a run over one checkpoint does without

        batch.run("audit", batch.expand(paths, recursive), audit,
                  dict(config_path=config_path, num_heads=num_heads, model=model, revision=revision),
                  jobs=jobs, as_json=as_json)
        return
    finish(audit(load(paths[0], config_path, num_heads, model, revision)), as_json, print_report)
