"""`convert` and `save`: a checkpoint written in another (or the same) format, through the
canonical tree; the report says what was written and what was not."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path

from ..records import record
from .report import Checkpoint, Report, tree_of

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

    from ..tree import ParameterTree
    from .report import PathArg, Source

#: `max_shard_size`'s default: Hugging Face's shard size limit.
MAX_SHARD_SIZE = "5GB"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMG]i?B|B)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def size_in_bytes(size: int | str) -> int:
    """A size in bytes, from bytes or a number with an optional unit ("5GB", "500MB", "2GiB");
    ValueError for anything else."""
    if isinstance(size, int):
        return size
    match = _SIZE.match(size)
    if not match:
        raise ValueError(f"{size!r} is not a size such as 5GB, 500MB or 2GiB")
    return int(float(match.group(1)) * _UNITS[(match.group(2) or "b").lower()])


@record
class Output:
    """The checkpoint written: its `path`, `format` (the target), every file written and the
    tensors it holds, by their names in the output."""

    path: Path
    format: str
    files: tuple[Path, ...]
    tensors: tuple[str, ...]


@record
class ConversionReport(Report):
    """`convert`'s account (ok: it wrote): the source `checkpoint`, whose `ignored` are the
    entries not in the output, each with why; the `output`; `notes` such as accepted losses and
    defaults the output now states as facts. `warnings`: what the conversion went ahead with
    but its user should hear about (a vocab.txt that does not match the embeddings, carried as
    it is); the command line prints them, its `--json` has no place for them."""

    command = "convert"

    checkpoint: Checkpoint
    output: Output
    warnings: tuple[str, ...]

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], warnings: tuple[str, ...] = ()) -> ConversionReport:
        out = obj["output"]
        return cls(**cls.verdict(obj), checkpoint=Checkpoint.from_json(obj), warnings=warnings,
                   output=Output(Path(out["path"]), out["format"], tuple(Path(f) for f in out["files"]),
                                 tuple(out["tensors"])))


def save(tree: ParameterTree, destination: PathArg, *, to: str, force: bool = False,
         max_shard_size: int | str = MAX_SHARD_SIZE, drop_untied_decoder: bool = False,
         accept_loss: tuple[str, ...] | list[str] = (), dtype: str | None = None,
         on_tensor: Callable[[int], None] | None = None, given: PathArg | None = None) -> ConversionReport:
    """Write `tree` (see `load`) to `destination` in format `to` (any of `formats.TARGETS`: "hf",
    "tf", "bert4keras", ...), atomically: the output appears whole or not at all, never replaces
    an existing path unless `force` (and then only a checkpoint of the kind being written), never
    anything the conversion reads (`given`: the path the tree was read from, if a directory).
    `max_shard_size`: Hugging Face's shard limit, bytes or "5GB"; `drop_untied_decoder`: write a
    format without a decoder matrix although the source's differs from the embeddings;
    `accept_loss`: fields the output cannot hold that may be lost (else `BadInput` names them);
    `dtype`: an export's weights ("float32" or "float16", for `to="onnx"`).

    >>> tree = bertconv.load(FIXTURES / "trained/tf")
    >>> report = bertconv.save(tree, tmp / "hf", to="hf")
    >>> report.output.format, sorted(f.name for f in report.output.files)
    ('hf', ['config.json', 'model.safetensors', 'vocab.txt'])
    """
    from ..conversion import WriteOptions, convert as write, warnings_for

    options = WriteOptions(max_shard_bytes=size_in_bytes(max_shard_size), drop_untied_decoder=drop_untied_decoder,
                           dtype=dtype, on_tensor=on_tensor)
    result = write(tree, Path(destination), to, force=force, accept_loss=tuple(accept_loss),
                   given=None if given is None else Path(given), options=options)
    return ConversionReport.from_json(result.as_dict(), tuple(warnings_for(tree)))


def convert(source: Source, destination: PathArg, *, to: str, config: PathArg | None = None,
            heads: int | None = None, model: str | None = None, force: bool = False,
            max_shard_size: int | str = MAX_SHARD_SIZE, drop_untied_decoder: bool = False,
            accept_loss: tuple[str, ...] | list[str] = (), dtype: str | None = None,
            on_tensor: Callable[[int], None] | None = None) -> ConversionReport:
    """Convert the checkpoint `source` to `destination` in format `to`: `bertconv convert SRC DST
    --to FORMAT`, its options as keywords (`config`, `heads`, `model` as `load`'s, the others
    as `save`'s).

    >>> report = bertconv.convert(FIXTURES / "trained/tf", tmp / "b4k.h5", to="bert4keras")
    >>> report.ok, report.output.path.name, len(report.output.tensors)
    (True, 'b4k.h5', 42)
    """
    from ..tree import ParameterTree

    tree = tree_of(source, config=config, heads=heads, model=model)
    given = None if isinstance(source, ParameterTree) else source
    return save(tree, destination, to=to, force=force, max_shard_size=max_shard_size,
                drop_untied_decoder=drop_untied_decoder, accept_loss=accept_loss, dtype=dtype, on_tensor=on_tensor,
                given=given)
