"""`verify`: is the MLM head there, is it trained, is the decoder tied, is the file sound?"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from ..records import record
from .audit import Counts
from .report import Checkpoint, Report, tree_of

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

    from ..tree import ParameterTree
    from .report import PathArg, Source


@record
class Probe:
    """The MLM probe's figures (`checks.trained.ProbeResult`): the head wrote a seeded sample and
    is `gain` nats surer of it (`entropy` - `nll`) than its token frequencies allow; trained from
    `threshold_gain` up. `gain` and `nll` are "nan" when a logit was not finite."""

    gain: float | str
    threshold_gain: float
    nll: float | str
    entropy: float
    top1: float
    distinct: int
    chance_nll: float
    positions: int
    rounds: int
    runtime: str


@record
class Training:
    """Whether a head is trained: `verdict` ("trained", "untrained" or "n/a"), on what `evidence`,
    the initializer `signs` seen (keys of `checks.trained.SIGNS_BY_KEY`), the MLM `probe` if it
    ran, else why not (`probe_not_run`; an RTD head has no probe: both None)."""

    verdict: str
    evidence: str
    signs: tuple[str, ...]
    probe: Probe | None = None
    probe_not_run: str | None = None

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Training:
        probe = obj.get("probe")
        return cls(obj["verdict"], obj["evidence"], tuple(obj["signs"]),
                   Probe(**probe) if probe is not None else None, obj.get("probe_not_run"))


@record
class DeepRead:
    """What `deep` read: every tensor once, this many values in all."""

    tensors: int
    values: int


@record
class RtdHead:
    """An ELECTRA discriminator's replaced-token-detection head: "complete", "partial" or
    "missing" (the canonical names it lacks in `missing`), and whether it is trained."""

    head: str
    missing: tuple[str, ...]
    trained: Training


@record
class VerifyReport(Report):
    """`verify`'s verdict (`checks.verify.verify` documents each field).

    Attributes:
      verified_head: "mlm", or "rtd" for an ELECTRA discriminator (judged by `rtd` instead).
      mlm_head: "complete", "partial" or "missing"; `missing`: the canonical names it lacks.
      tying: "tied", "untied" or "n/a", said in words by `tying_detail`.
      decoder_bias: "n/a", "shared", "equal", "differs" or "unreadable".
      consistency: the audit's problems. deep: what `deep` read, else None.
      mlm_trained: whether the MLM head is trained. audit: the counts `audit` gives.
    """

    command = "verify"

    checkpoint: Checkpoint
    verified_head: str
    mlm_head: str
    missing: tuple[str, ...]
    tying: str
    tying_detail: str
    decoder_bias: str
    consistency: tuple[str, ...]
    deep: DeepRead | None
    mlm_trained: Training
    rtd: RtdHead | None
    audit: Counts

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> VerifyReport:
        deep, rtd = obj["deep"], obj["rtd"]
        return cls(**cls.verdict(obj), checkpoint=Checkpoint.from_json(obj), verified_head=obj["verified_head"],
                   mlm_head=obj["mlm_head"], missing=tuple(obj["missing"]), tying=obj["tying"],
                   tying_detail=obj["tying_detail"], decoder_bias=obj["decoder_bias"],
                   consistency=tuple(obj["consistency"]),
                   deep=None if deep is None else DeepRead(**deep),
                   mlm_trained=Training.from_json(obj["mlm_trained"]),
                   rtd=None if rtd is None else RtdHead(rtd["head"], tuple(rtd["missing"]),
                                                        Training.from_json(rtd["trained"])),
                   audit=Counts.from_json(obj["audit"]))


def verify(checkpoint: Source, *, config: PathArg | None = None, heads: int | None = None, model: str | None = None,
           deep: bool = False, allow_missing_mlm: bool = False, allow_untrained_mlm: bool = False,
           probe: bool | None = None, runtime: str = "numpy", headers_only: bool = False,
           accept_loss: tuple[str, ...] | list[str] = (),
           on_tensor: Callable[[int], None] | None = None) -> VerifyReport:
    """Check that `checkpoint`'s MLM head is present, trained and its decoder tied, and that shapes
    agree with the config: `bertconv verify PATH`, its options as keywords (`config`, `heads`,
    `model` as `load`'s). `deep` reads every tensor once (finite values, checksums, zeroed heads)
    and runs the probe (`probe`: True or False to run it or not regardless; `runtime` "numpy" or
    "torch"); `on_tensor(nbytes)` is called as each tensor is read. `accept_loss`: config keys and
    tensors bertconv does not compute with that may be left out (else `BadInput` names them).

    >>> report = bertconv.verify(FIXTURES / "trained/hf", deep=True)
    >>> report.ok, report.mlm_head, report.tying, report.mlm_trained.verdict
    (True, 'complete', 'tied', 'trained')
    >>> report.mlm_trained.probe.gain > report.mlm_trained.probe.threshold_gain
    True
    """
    from ..checks.verify import verify as verify_tree

    tree = tree_of(checkpoint, config=config, heads=heads, model=model)
    report = verify_tree(tree, deep=deep, allow_missing_mlm=allow_missing_mlm, allow_untrained_mlm=allow_untrained_mlm,
                         probe=probe, runtime=runtime, headers_only=headers_only, accept_loss=tuple(accept_loss),
                         on_tensor=on_tensor)
    return VerifyReport.from_json(_with_copies(tree, report, deep=deep, on_tensor=on_tensor))


def _with_copies(tree: ParameterTree, report: dict[str, Any], *, deep: bool,
                 on_tensor: Callable[[int], None] | None) -> dict[str, Any]:
    """`report` with each other copy of the model (a snapshot's other formats) held against the
    file read (`checks.copies_agree`): `copies` in the report, a disagreeing copy a problem."""
    from ..checks.copies_agree import compare_copy, unreadable_copy

    entries = [unreadable_copy(*copy) if isinstance(copy, tuple) else
               compare_copy(tree, copy, deep=deep, on_tensor=on_tensor) for copy in copies_of(tree)]
    report["copies"] = entries
    report["problems"] += [problem for entry in entries for problem in entry["problems"]]
    report["ok"] = report["ok"] and all(entry["agree"] for entry in entries)
    return report


def copies_of(tree: ParameterTree) -> list[ParameterTree | tuple[Path, str]]:
    """The other copies of the model in the directory `tree` was read from (`ParameterTree.copies`),
    read with the same config, heads and model; a copy that cannot be read is (path, message)."""
    from .. import formats
    from ..errors import BertconvError

    read: list[ParameterTree | tuple[Path, str]] = []
    for path in tree.copies:
        try:
            read.append(formats.read(path, config_path=tree.config.source, num_heads=tree.config.num_attention_heads,
                                     model=tree.model))
        except BertconvError as exc:
            read.append((path, str(exc)))
    return read
