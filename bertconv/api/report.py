"""What every report shares: its verdict, the checkpoint it is about, and its JSON object; and
`load`, the one way the API reads a checkpoint.

A report is a frozen dataclass with typed fields, built from the JSON-ready object the library's
check returns (`from_json`); that object is kept as it came, so `to_json()` is, key for key, what
`bertconv COMMAND --json` prints (less the `bertconv` stamp: see `commands.output`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from ..records import field, record

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:  # the API's type aliases, for its annotations
    from typing import Any, TypeVar, Union

    from ..tree import ParameterTree

    #: A `--json` object, as `json.loads` would give it back.
    JSONObject = dict[str, Any]
    #: A path the API reads or writes: a string or any `os.PathLike`.
    PathArg = Union[str, "os.PathLike[str]"]
    #: A checkpoint as the API takes it: its path (a file, or a directory holding one), or a tree
    #: already read (`load`), which is then not read again.
    Source = Union[str, "os.PathLike[str]", "ParameterTree"]

    ReportT = TypeVar("ReportT", bound="Report")


def load(path: PathArg, *, config: PathArg | None = None, heads: int | None = None,
         model: str | None = None, revision: str | None = None) -> ParameterTree:
    """Read the checkpoint at `path` (any format: a file, or a directory holding one) into a
    canonical `ParameterTree`; headers only, its tensors read when asked for.

    `config`: a bert_config.json or config.json to use instead of the one beside the checkpoint;
    `heads`: the attention heads when no config says (default hidden_size / 64); `model`: which
    model of an ELECTRA pre-training checkpoint ("generator", the default, or "discriminator").
    `path` may also be a repo id (`org/name`) in the local Hugging Face cache, at `revision` (a
    branch, tag or commit; default main): the tree's notes then say which snapshot was read.
    Raises `BadInput` when it cannot be read.

    >>> tree = bertconv.load(FIXTURES / "hf/pretraining")
    >>> tree.format, tree.config.hidden_size
    ('hf-safetensors', 32)
    """
    from ..records import replace

    from .. import formats
    from ..paths import holds_hub_snapshots, require_file_or_directory

    local, snapshot = Path(path), None
    # A file is itself, never a repo in the cache; so is a directory other than a repo's folder
    # in the cache: neither needs the cache's module.
    itself = local.is_file() or (local.is_dir() and not holds_hub_snapshots(local))
    if revision is not None or not itself:
        from ..formats.hf import cache as hub_cache

        local, snapshot = hub_cache.local_path(local, revision)
    require_file_or_directory(local, "checkpoint")
    if config is not None:
        require_file_or_directory(Path(config), "config")
    tree = formats.read(local, config_path=None if config is None else Path(config), num_heads=heads, model=model)
    if snapshot is None:
        return tree
    return replace(tree, notes=(f"{snapshot.label} read from the Hugging Face cache: {snapshot.path}", *tree.notes))


def tree_of(source: Source, *, config: PathArg | None = None, heads: int | None = None,
            model: str | None = None) -> ParameterTree:
    """`source` itself if it is a tree (it takes no reading options then), else `load(source, ...)`."""
    from ..tree import ParameterTree

    if not isinstance(source, ParameterTree):
        return load(source, config=config, heads=heads, model=model)
    if (config, heads, model) != (None, None, None):
        raise TypeError("config, heads and model are options of reading a checkpoint: give a path with them, or "
                        "load(path, config=..., heads=..., model=...) once and pass the tree")
    return source


def frozen(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """A read-only copy of a JSON object (the report's own `to_json()` is not affected by it)."""
    return MappingProxyType(json_copy(dict(obj)))


#: Values a JSON object holds that no one can change, shared by a copy.
_IMMUTABLE = (str, int, float, bool, type(None))


def json_copy(value: Any) -> Any:
    """A deep copy of a JSON-ready value: its dicts, lists and tuples copied, its scalars shared,
    anything else by `copy.deepcopy`. As `copy.deepcopy`, without its memo, which a report's
    object (no part shared, none cyclic) does not need: the inspect object of BERT-large's 398
    tensors copies in 0.9 ms instead of 2.4 ms."""
    kind = type(value)
    if kind is dict:
        return {key: json_copy(item) for key, item in value.items()}
    if kind is list:
        return [json_copy(item) for item in value]
    if kind is tuple:
        return tuple(json_copy(item) for item in value)
    if kind in _IMMUTABLE:
        return value
    import copy  # noqa: PLC0415 (a report's JSON holds nothing else; `copy`, with weakref, takes 1.4 ms)

    return copy.deepcopy(value)


@record
class IgnoredEntry:
    """An entry of the file that is not a parameter of the model (an optimizer slot, a step
    counter, a buffer, a task head), or for a conversion one not in the output, and why."""

    name: str
    reason: str
    parameters: int
    dtype: str
    shape: tuple[int, ...]

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> IgnoredEntry:
        return cls(obj["name"], obj["reason"], obj["parameters"], obj["dtype"], tuple(obj["shape"]))


@record
class Checkpoint:
    """What every report says of the checkpoint it is about (`checks.report.checkpoint`).

    Attributes:
      path: the path read. format: its format ("hf-safetensors", "google-tf", ...).
      family: its model family ("bert", "albert", "electra", "roberta").
      model: which model of a file holding two (ELECTRA's "generator" or "discriminator"), else None.
      config: every config field, and under "provenance" where each value came from.
      heads: head name ("pooler", "mlm", "nsp", "sop", "rtd") -> present.
      ignored: the entries set aside, each with why.
    """

    path: Path
    format: str
    family: str
    model: str | None
    config: Mapping[str, Any]
    heads: Mapping[str, bool]
    ignored: tuple[IgnoredEntry, ...]

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Checkpoint:
        return cls(Path(obj["path"]), obj["format"], obj["family"], obj["model"], frozen(obj["config"]),
                   frozen(obj["heads"]), tuple(IgnoredEntry.from_json(i) for i in obj["ignored"]))


@record
class Report:
    """A command's verdict: `ok`, the `problems` that made it not ok (sentences naming the file
    and the tensor), the `notes` that did not, and the whole as `to_json()`."""

    #: The command whose `--json` object `to_json()` is (its schema: bertconv/schemas/<command>.json),
    #: named by each report's class. Not annotated `ClassVar`: typing is not imported at run time,
    #: and a dataclass made of the record would take the annotation for a field's.
    command = ""

    ok: bool
    problems: tuple[str, ...]
    notes: tuple[str, ...]
    _json: JSONObject = field(repr=False, compare=False)

    def to_json(self) -> JSONObject:
        """The command's `--json` object (a fresh copy): what `bertconv COMMAND --json` prints,
        but for the stamp of the version that printed it."""
        copied: JSONObject = json_copy(self._json)
        return copied

    def require_ok(self: ReportT) -> ReportT:
        """The report itself if it is ok, else `CheckFailed` (the command line's exit status 1)
        naming its problems."""
        if not self.ok:
            from ..errors import CheckFailed

            raise CheckFailed(f"{self.command} failed: " + "; ".join(self.problems))
        return self

    @staticmethod
    def verdict(obj: Mapping[str, Any]) -> dict[str, Any]:
        """The fields of `Report` from a `--json` object, as keywords (an error object has no
        problems or notes)."""
        return {"ok": obj["ok"], "problems": tuple(obj.get("problems", ())), "notes": tuple(obj.get("notes", ())),
                "_json": json_copy(dict(obj))}
