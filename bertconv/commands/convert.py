"""`bertconv convert SRC DST --to FORMAT`."""

from __future__ import annotations

from argparse import ArgumentTypeError
from pathlib import Path

from .. import formats
from ..api.convert import MAX_SHARD_SIZE, save, size_in_bytes
from ..checks.audit import ignored_summary
from .arguments import json_flag, option
from .common import ACCEPT_LOSS, CHECKPOINT_OPTIONS, byte_progress, escape, load, print_json, stderr


def parse_size(text: str) -> int:
    """`--max-shard-size`: bytes, from a number with an optional unit (5GB, 500MB, 2GiB)."""
    try:
        return size_in_bytes(text)
    except ValueError as exc:
        raise ArgumentTypeError(str(exc)) from None


ARGUMENTS = (
    option("src", type=Path, metavar="SRC", help="The checkpoint to convert: a file, or a directory holding one."),
    option("dst", type=Path, metavar="DST", help="Where to write the converted checkpoint."),
    option("--to", dest="target", required=True, choices=sorted(formats.TARGETS),
           help="Format to write: " + ", ".join(f"{name} (a {fmt.output.value})"
                                                for name, fmt in sorted(formats.TARGETS.items())) + "."),
    *CHECKPOINT_OPTIONS,
    option("--force", action="store_true",
           help="Replace DST if it is a checkpoint of the kind being written (its tokenizer files are kept)."),
    option("--max-shard-size", dest="max_shard_bytes", type=parse_size, default=MAX_SHARD_SIZE, metavar="SIZE",
           help="Shard size limit of Hugging Face checkpoints and keras-hub presets' backbone weights "
                "(default: %(default)s)."),
    option("--dtype", choices=("float32", "float16"),
           help="Weights' dtype, for --to onnx: float32 (the default) or float16 (LayerNorm and softmax kept in "
                "float32; refused if onnxruntime finds it overflows)."),
    option("--drop-untied-decoder", action="store_true",
           help="Write a format that has no decoder matrix even if the source's decoder differs from the embeddings."),
    ACCEPT_LOSS,
    json_flag("Print one JSON object: files written, tensors, ignored entries."),
    option("--quiet", "-q", action="store_true", help="No progress bar and no summary."),
)


def command(src: Path, dst: Path, target: str, config_path: Path | None, num_heads: int | None, model: str | None,
            revision: str | None, force: bool, max_shard_bytes: int, dtype: str | None, drop_untied_decoder: bool,
            accept_loss: list[str], as_json: bool, quiet: bool) -> None:
    """Convert SRC to DST in another (or the same) format, through the canonical tree.

    DST is written atomically, never replaces an existing path without --force, and never
    replaces anything the conversion reads.
    """
    tree = load(src, config_path, num_heads, model, revision)
    with byte_progress(f"writing {dst.name}", sum(p.tensor.nbytes for p in tree), quiet or as_json) as advance:
        report = save(tree, dst, to=target, force=force, max_shard_size=max_shard_bytes,
                      drop_untied_decoder=drop_untied_decoder, accept_loss=accept_loss, dtype=dtype, on_tensor=advance,
                      given=src)
    for warning in report.warnings:
        stderr.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
    if as_json:
        print_json("convert", report.to_json())
        return
    if quiet:
        return
    stderr.print(f"{tree.format} -> {target}: {len(report.output.tensors)} tensors written to {dst}")
    for path in report.output.files:
        stderr.print(f"  {path}")
    for sentence in ignored_summary(report.to_json()["ignored"]):
        stderr.print(f"not written: {escape(sentence)}", soft_wrap=True)
    for note in report.notes:
        stderr.print(f"note: {escape(note)}", soft_wrap=True)
