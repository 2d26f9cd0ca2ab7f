"""Is the MLM head trained: its fresh-initialisation signs, and the reconstruction probe."""

from __future__ import annotations

from pathlib import Path

from ...errors import bad_input
from ...tree import ParameterTree
from .. import trained
from .findings import COMPLETE, Findings, TensorReader


#: Why the reconstruction probe does not judge a causal head.
CAUSAL_PROBE = ("a causal head predicts the next token, not the token it is shown, so the reconstruction probe "
                "would call a trained head untrained")

#: `probe_not_run` when the probe was not asked for.
PROBE_NOT_ASKED = "not asked for (--probe, or --deep, runs it)"

def fresh_init_signs(tree: ParameterTree, head: str, reader: TensorReader, keep: bool) -> tuple[list, bool]:
    """(the signs of fresh initialization the head shows, whether they could be looked for).

    Reads the bytes of the four small head tensors (kept for the deep pass when `keep`, which
    reads each tensor once). A tensor whose data file is absent (an index-only checkpoint, verified from its
    headers) is left unread, and the signs are then not checked; one that cannot be read is a
    problem (`TensorReader`).
    """
    if head != COMPLETE:
        return [], False
    names = {trained.sign_tensor(tree, sign) for sign in trained.SIGNS} & set(tree.params)
    if not all(Path(tree[name].file).exists() for name in names):
        return [], False
    return trained.seen_signs(tree, lambda name: reader.read_bytes(name, keep=keep)), True


def judge_mlm_trained(tree: ParameterTree, head: str, signs: list, signs_checked: bool, reader: TensorReader,
                 probe_runtime: str | None, allow_untrained_mlm: bool, findings: Findings) -> dict:
    """The `mlm_trained` report: are the head's values trained ones? (see `checks.trained`).

    Judges the `signs` found, and with `probe_runtime` ("numpy" | "torch") runs the head on the
    probe batch. An untrained head is a problem, or a note with `allow_untrained_mlm`.

    Keys: verdict (`trained` | `untrained` | `n/a`), evidence ("signs", "probe", "signs and
    probe" or what kept it from being judged), signs (keys of `trained.SIGNS` seen), probe (None
    or `ProbeResult.as_dict()`), probe_not_run (why the probe did not run, whenever probe is None).
    """
    if head != COMPLETE:
        return {"verdict": trained.NOT_JUDGED, "evidence": f"{head} MLM head", "signs": [], "probe": None,
                "probe_not_run": f"no complete MLM head to run ({head})"}
    result, unrun = _run_probe(tree, probe_runtime, reader, findings) if probe_runtime else (None, PROBE_NOT_ASKED)
    failures, brief = [], []  # the full messages, and each in a few words for a note
    if signs:
        seen = trained.describe_signs(tree, signs)
        failures.append(trained.UNTRAINED_BY_SIGNS.format(seen=seen))
        brief.append(seen)
    if result is not None and not result.trained:
        failures.append(result.describe() if result.finite else
                        "untrained MLM head: its logits on the probe batch are not all finite, so its "
                        "predictions are meaningless")
        brief.append(result.summary())
    evidence = " and ".join(e for e, used in (("signs", signs_checked), ("probe", result is not None)) if used)
    if failures:
        verdict = trained.UNTRAINED
        if allow_untrained_mlm:
            findings.notes.append(f"untrained MLM head, allowed (--allow-untrained-mlm): {'; '.join(brief)}")
        else:
            findings.problems.extend(failures)
    else:
        verdict = trained.TRAINED if evidence else trained.NOT_JUDGED
    if unrun and unrun != PROBE_NOT_ASKED:
        rests = "; whether the head is trained rests on the signs alone" if signs_checked else ""
        findings.notes.append(f"MLM probe not run: {unrun}{rests}")
    if not evidence:
        findings.notes.append("whether the MLM head is trained was not checked: its data file is absent")
    return {"verdict": verdict, "evidence": evidence or "data file absent",
            "signs": [sign.key for sign in signs], "probe": result.as_dict() if result is not None else None,
            "probe_not_run": unrun}


def _run_probe(tree: ParameterTree, runtime: str, reader: TensorReader,
               findings: Findings) -> tuple[trained.ProbeResult | None, str | None]:
    """(the probe's result, None), or (None, why it was not run: a note). A head the runtime
    fails to run is a problem; absent data files are bad input (`BadInput`), as for `deep`."""
    if tree.conditional:
        return None, "the runtimes do not run conditional LayerNorm (bert4keras layer_norm_cond)"
    if reader.failed:
        return None, "tensors could not be read (see the problems)"
    absent = [str(f) for f in tree.files if not Path(f).exists()]
    if absent:
        raise bad_input(tree.path, f"the MLM probe runs the model, but {', '.join(absent)} does not exist; "
                                   f"without --probe and --deep, verify reads only the headers")
    unfit = trained.why_not_probed(tree.config)
    if unfit is not None:
        return None, unfit
    result, why = trained.try_probe(tree, runtime)
    if why is not None:
        findings.problems.append(f"the MLM probe could not run the head: {why}")
    return result, why
