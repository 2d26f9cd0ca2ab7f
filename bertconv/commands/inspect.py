"""`bertconv inspect PATH`: format, config, every tensor, and what was set aside."""

from __future__ import annotations

from pathlib import Path

from ..api.inspect import describe, inspect
from ..errors import bad_input
from .arguments import json_flag, option
from .common import BATCH_OPTIONS, CHECKPOINT_OPTIONS, CHECKPOINT_PATHS, Table, human, load, print_json, stdout


def _shape(shape: list[int]) -> str:
    return "x".join(map(str, shape)) or "scalar"


ARGUMENTS = (
    option(*CHECKPOINT_PATHS[0], **{**CHECKPOINT_PATHS[1], "nargs": "*"}),
    *CHECKPOINT_OPTIONS,
    *BATCH_OPTIONS,
    option("--cache", action="store_true",
           help="The inventory of the Hugging Face cache (each PATH a cache directory; default: HF_HUB_CACHE, "
                "HF_HOME/hub or ~/.cache/huggingface/hub): one row per repo and cached revision."),
    json_flag("Print one JSON object (several checkpoints: one per line)."),
)


def _all_caches(paths: list[Path]) -> bool:
    from ..formats.hf import cache as hub_cache  # here: inspecting a checkpoint needs no cache lookup

    return all(hub_cache.is_cache(path) for path in paths)


def command(paths: list[Path], config_path: Path | None, num_heads: int | None, model: str | None,
            revision: str | None, recursive: bool, jobs: int | None, cache: bool, as_json: bool) -> None:
    """Show a checkpoint's format, config, tensors and ignored entries (reads headers only).

    A parameter the format stores twice (a tf_model.h5's embeddings) is not read: verify
    compares the two copies' values.

    Several PATHs (or --recursive) print one row per checkpoint. --cache, or --recursive over a
    Hugging Face cache directory, prints its inventory: one row per repo and cached revision, with
    the formats its snapshot holds, its family, MLM head (present, trained) and parameters.
    """
    if cache or (recursive and paths and _all_caches(paths)):
        from . import hub  # the inventory's own machinery

        hub.inventory(hub.caches_given(paths), jobs=jobs, as_json=as_json)
        return
    if not paths:
        raise bad_input("inspect", "give a PATH (a checkpoint, or a repo id in the Hugging Face cache), or --cache")
    if len(paths) > 1 or recursive:
        from . import batch  # a run over one checkpoint does without

        batch.run("inspect", batch.expand(paths, recursive), inspect,
                  dict(config_path=config_path, num_heads=num_heads, model=model, revision=revision),
                  jobs=jobs, as_json=as_json)
        return
    tree = load(paths[0], config_path, num_heads, model, revision)
    report = describe(tree)  # the report's JSON itself: printed, never kept (no InspectReport, no copy)
    if as_json:
        print_json("inspect", report)
        return
    stdout.print(f"[bold]{report['path']}[/]  format [cyan]{report['format']}[/]"
                 + (f"  under scope [cyan]{report['scope']}[/]" if report["scope"] else "")
                 + (f"  model [cyan]{report['model']}[/]" if report["model"] else ""))
    config = tree.config
    stdout.print(
        f"config: V={config.vocab_size} H={config.hidden_size} "
        f"L={'?' if config.provenance.get('num_hidden_layers') == 'unknown' else config.num_hidden_layers} "
        f"A={config.num_attention_heads} I={config.intermediate_size} P={config.max_position_embeddings} "
        f"T={config.type_vocab_size} act={config.hidden_act}"
        + (f" C={config.conditional_size}" if config.conditional_size else "")
    )
    heads = ", ".join(name for name, present in report["heads"].items() if present) or "none"
    stdout.print(f"heads: {heads}")
    for missing in report["missing_files"]:
        stdout.print(f"[yellow]absent:[/] {missing} (named by the checkpoint; headers were read without it)")
    table = Table("name in file", "shape", "dtype", "canonical", "canonical shape")
    for t in report["tensors"]:
        canonical_shape = _shape(t["canonical_shape"]) if t["canonical_shape"] != t["shape"] else "same"
        table.add_row(t["name"], _shape(t["shape"]), t["dtype"],
                      t["canonical"] + (f" (= {t['shared_with']})" if "shared_with" in t else ""), canonical_shape)
    stdout.print(table)
    if report["ignored"]:
        stdout.print(f"ignored ({len(report['ignored'])}):")
        for i in report["ignored"]:
            stdout.print(f"  {i['name']}  {i['dtype']} {i['shape']}  {human(i['parameters'])}  - {i['reason']}")
    for note in report["notes"]:
        stdout.print(f"note: {note}")
