"""`bertconv convert SRC DST --to FORMAT`."""

from __future__ import annotations

import re
from pathlib import Path

import click
from rich.markup import escape

from .. import formats
from ..convert import WriteOptions, convert, warnings_for
from .common import byte_progress, checkpoint_options, load, stderr

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
@click.option("--force", is_flag=True, help="Replace DST if it exists.")
@click.option("--max-shard-size", default="5GB", show_default=True, help="Hugging Face shard size limit.")
@click.option("--drop-untied-decoder", is_flag=True,
              help="Write a format that has no decoder matrix even if the source's decoder differs from the embeddings.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary.")
def command(src: Path, dst: Path, target: str, config_path, num_heads, force: bool, max_shard_size: str,
            drop_untied_decoder: bool, quiet: bool) -> None:
    """Convert SRC to DST in another (or the same) format, through the canonical tree.

    DST is a directory for hf and tf, a file for bert4keras. It is written atomically and
    never replaces an existing path without --force.
    """
    tree = load(src, config_path, num_heads)
    for warning in warnings_for(tree):
        stderr.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
    options = dict(max_shard_bytes=parse_size(max_shard_size), drop_untied_decoder=drop_untied_decoder)
    with byte_progress(f"writing {dst.name}", sum(p.tensor.nbytes for p in tree), quiet) as advance:
        written = convert(tree, dst, target, force=force, options=WriteOptions(**options, on_tensor=advance))
    if not quiet:
        stderr.print(f"{tree.format} -> {target}: {len(tree.params)} tensors written to {dst}")
        for path in written:
            stderr.print(f"  {path}")
