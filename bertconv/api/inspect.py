"""`inspect`: a checkpoint's format, config, every tensor, and what was set aside."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..records import record
from .report import Checkpoint, Report, tree_of

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

    from ..tree import ParameterTree
    from .report import JSONObject, PathArg, Source


@record
class TensorEntry:
    """One tensor: its `name` and `shape` in the file, the `canonical` parameter it is and that
    parameter's shape (after the format's transposes), its dtype, and the canonical parameter it
    shares storage with (a tied decoder), if any."""

    name: str
    shape: tuple[int, ...]
    canonical: str
    canonical_shape: tuple[int, ...]
    dtype: str
    shared_with: str | None = None

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> TensorEntry:
        return cls(obj["name"], tuple(obj["shape"]), obj["canonical"], tuple(obj["canonical_shape"]), obj["dtype"],
                   obj.get("shared_with"))


@record
class InspectReport(Report):
    """`inspect`'s description (always ok). `scope`: the name scope a TF checkpoint's model sits
    under ("" for none); `parameters`: counted, each tied copy once; `files` that exist, and
    `missing_files` the checkpoint names but lacks (an index published without its shards)."""

    command = "inspect"

    checkpoint: Checkpoint
    scope: str
    parameters: int
    files: tuple[Path, ...]
    missing_files: tuple[Path, ...]
    tensors: tuple[TensorEntry, ...]

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> InspectReport:
        return cls(**cls.verdict(obj), checkpoint=Checkpoint.from_json(obj), scope=obj["scope"],
                   parameters=obj["parameters"], files=tuple(Path(f) for f in obj["files"]),
                   missing_files=tuple(Path(f) for f in obj["missing_files"]),
                   tensors=tuple(TensorEntry.from_json(t) for t in obj["tensors"]))


def describe(tree: ParameterTree) -> JSONObject:
    """The `inspect --json` object: the checkpoint's fields (see `checks.report.checkpoint`), the
    parameters counted (a tied copy once), and every tensor. Each tensor's `shape` is its shape
    under its `name` in the file; `canonical_shape` the shape of its `canonical` parameter (after the format's transposes).
    `files` lists the files that exist, `missing_files` those the checkpoint names but lacks
    (an index published without its data shards)."""
    from ..checks.contract import unread_notes
    from ..checks.copies import copies_not_compared
    from ..checks.report import checkpoint

    files = [Path(f) for f in tree.files]
    return {
        **checkpoint(tree),
        "ok": True,
        "scope": tree.scope,
        "parameters": sum(p.numel for p in tree if tree.is_counted(p.name)),
        "files": [str(f) for f in files if f.is_file()],
        "missing_files": [str(f) for f in files if not f.is_file()],
        "tensors": [
            {"name": p.source, "shape": list(p.source_shape or ()), "canonical": p.name,
             "canonical_shape": list(p.tensor.shape), "dtype": str(p.tensor.dtype),
             **({"shared_with": p.shared_with} if p.shared_with else {})}
            for p in tree
        ],
        "problems": [],
        "notes": [*unread_notes(tree), *(f"{f} is named by the checkpoint but absent; headers were read without it"
                                         for f in files if not f.is_file()),
                  *copies_not_compared(tree)],
    }


def inspect(checkpoint: Source, *, config: PathArg | None = None, heads: int | None = None,
            model: str | None = None) -> InspectReport:
    """Describe `checkpoint`: format, config, tensors and ignored entries (reads headers only;
    a parameter the format stores twice is not read in either copy: `verify` compares them):
    `bertconv inspect PATH`. Options as `load`'s.

    >>> report = bertconv.inspect(FIXTURES / "hf/pretraining")
    >>> report.checkpoint.format, report.parameters
    ('hf-safetensors', 20495)
    >>> report.tensors[0]
    TensorEntry(name='bert.embeddings.word_embeddings.weight', shape=(99, 32), canonical='embeddings.word', canonical_shape=(99, 32), dtype='float32', shared_with=None)
    """
    return InspectReport.from_json(describe(tree_of(checkpoint, config=config, heads=heads, model=model)))
