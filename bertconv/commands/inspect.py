"""`bertconv inspect PATH`: format, config, every tensor, and what was set aside."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from .common import checkpoint_options, human, load, print_json, stdout


def describe(tree) -> dict:
    return {
        "format": tree.format,
        "scope": tree.scope,
        "path": str(tree.path),
        "files": [str(f) for f in tree.files],
        "config": tree.config.summary(),
        "heads": tree.heads.as_dict(),
        "tensors": [
            {"name": p.source, "canonical": p.name, "dtype": str(p.tensor.dtype), "shape": list(p.tensor.shape),
             **({"shared_with": p.shared_with} if p.shared_with else {})}
            for p in tree
        ],
        "ignored": [i.as_dict() for i in tree.ignored],
    }


@click.command("inspect")
@click.argument("path", type=click.Path(path_type=Path))
@checkpoint_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def command(path: Path, config_path, num_heads, as_json: bool) -> None:
    """Show a checkpoint's format, config, tensors and ignored entries (reads headers only)."""
    tree = load(path, config_path, num_heads)
    report = describe(tree)
    if as_json:
        print_json(report)
        return
    stdout.print(f"[bold]{report['path']}[/]  format [cyan]{report['format']}[/]"
                 + (f"  under scope [cyan]{report['scope']}[/]" if report["scope"] else ""))
    config = tree.config
    stdout.print(
        f"config: V={config.vocab_size} H={config.hidden_size} L={config.num_hidden_layers} "
        f"A={config.num_attention_heads} I={config.intermediate_size} P={config.max_position_embeddings} "
        f"T={config.type_vocab_size} act={config.hidden_act}"
        + (f" C={config.conditional_size}" if config.conditional_size else "")
    )
    heads = ", ".join(name for name, present in report["heads"].items() if present) or "none"
    stdout.print(f"heads: {heads}")
    table = Table("name in file", "canonical", "dtype", "shape", box=None, pad_edge=False)
    for t in report["tensors"]:
        table.add_row(t["name"], t["canonical"] + (f" (= {t['shared_with']})" if "shared_with" in t else ""),
                      t["dtype"], "x".join(map(str, t["shape"])) or "scalar")
    stdout.print(table)
    if report["ignored"]:
        stdout.print(f"ignored ({len(report['ignored'])}):")
        for i in report["ignored"]:
            stdout.print(f"  {i['name']}  {i['dtype']} {i['shape']}  {human(i['parameters'])}  - {i['reason']}")
