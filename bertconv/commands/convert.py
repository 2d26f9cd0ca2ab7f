"""`bertconv convert SRC DST --to FORMAT`."""

from __future__ import annotations

import re
from pathlib import Path

import click
from rich.markup import escape

from .. import formats
from ..checks.audit import ignored_summary
from ..config import COMPUTATION_FIELDS
from ..convert import WriteOptions, convert, warnings_for
from .common import byte_progress, checkpoint_options, load, print_json, stderr

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMG]i?B|B)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_size(text: str) -> int:
    match = _SIZE.match(text)
    if not match:
        raise click.BadParameter(f"{text!r} is not a size such as 5GB, 500MB or 2GiB")
    return int(float(match.group(1)) * _UNITS[(match.group(2) or "b").lower()])


@click.command("convert")
@click.argument("src", type=click.Path(path_type=Path))
@click.argument("dst", type=click.Path(path_type=Path))
@click.option("--to", "target", required=True, type=click.Choice(sorted(formats.TARGETS)),
              help="Format to write: " + ", ".join(f"{name} (a {fmt.output.value})"
                                                   for name, fmt in sorted(formats.TARGETS.items())) + ".")
@checkpoint_options
@click.option("--force", is_flag=True,
              help="Replace DST if it is a checkpoint of the kind being written (its tokenizer files are kept).")
@click.option("--max-shard-size", default="5GB", show_default=True, help="Hugging Face shard size limit.")
@click.option("--drop-untied-decoder", is_flag=True,
              help="Write a format that has no decoder matrix even if the source's decoder differs from the embeddings.")
@click.option("--accept-loss", "accept_loss", multiple=True, type=click.Choice(COMPUTATION_FIELDS),
              help="Convert even though the output cannot keep this config field (repeatable); the loss is printed.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: files written, tensors, ignored entries.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary.")
def command(src: Path, dst: Path, target: str, config_path, num_heads, force: bool, max_shard_size: str,
            drop_untied_decoder: bool, accept_loss: tuple[str, ...], as_json: bool, quiet: bool) -> None:
    """Convert SRC to DST in another (or the same) format, through the canonical tree.

    DST is written atomically, never replaces an existing path without --force, and never
    replaces anything the conversion reads.
    """
    tree = load(src, config_path, num_heads)
    for warning in warnings_for(tree):
        stderr.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
    options = dict(max_shard_bytes=parse_size(max_shard_size), drop_untied_decoder=drop_untied_decoder)
    with byte_progress(f"writing {dst.name}", sum(p.tensor.nbytes for p in tree), quiet or as_json) as advance:
        result = convert(tree, dst, target, force=force, accept_loss=accept_loss, given=src,
                         options=WriteOptions(**options, on_tensor=advance))
    if as_json:
        print_json(result.as_dict())
        return
    if quiet:
        return
    stderr.print(f"{tree.format} -> {target}: {len(result.tensors)} tensors written to {dst}")
    for path in result.files:
        stderr.print(f"  {path}")
    for sentence in ignored_summary([entry.as_dict() for entry in result.ignored]):
        stderr.print(f"not written: {escape(sentence)}", soft_wrap=True)
    for note in result.notes:
        stderr.print(f"note: {escape(note)}", soft_wrap=True)
