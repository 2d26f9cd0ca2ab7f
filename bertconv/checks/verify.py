"""Is the masked-LM head in a checkpoint, is its decoder tied, and is the file sound?

`verify` answers the question frameworks answer badly: loading an encoder-only file as a masked
LM succeeds with a warning that the head was "newly initialized", and its predictions are noise.
It sees only the canonical tree (never a file format), and reports:

- MLM head: `complete` (transform dense kernel and bias, transform LayerNorm gamma and beta,
  output bias, and a decoder: the word-embedding table, which every BERT has, or a stored
  matrix), `partial` (some of it; `missing` names the rest) or `missing`.
- Tying: `tied` when no decoder is stored (the embeddings serve), when it shares the
  embeddings' storage, or when a stored copy equals them bit for bit; `untied` when a stored
  decoder differs (a failure if the config says the embeddings are tied, a note otherwise);
  `n/a` without an MLM head. A stored decoder bias must equal the output bias.
- Consistency: the audit (`checks.audit`): shapes against the config, counts against the
  closed form. Its report is embedded whole under `audit`. A vocab.txt beside the checkpoint
  must hold one token per word-embedding row (`vocab_problem`).
- Trained (`mlm_trained`, see `checks.trained`): a complete head showing an initializer's values
  (output bias all zero, LayerNorm gamma all one or beta all zero, dense bias all zero) was never
  trained, a failure unless `allow_untrained_mlm`. With `probe` (by default with `deep`), the head
  also writes a small seeded sample and must be far surer of it than its token frequencies allow.
  When the probe does not run, `probe_not_run` says why, and the verdict rests on the signs.
- An ELECTRA discriminator (a tree with the replaced-token-detection head and no MLM head, or
  read as the discriminator) has no masked LM to verify: its head is replaced-token detection.
  verify then looks at that head instead (`rtd`: complete, partial or missing; its fresh-init
  signs, `trained.RTD_SIGNS`) and claims no MLM verdict (`verified_head` says which head).
- With `deep`: every tensor read once, streaming in chunks: all values finite, LayerNorm gammas
  not all zero, no pooler/MLM/NSP tensor all zero (a head never trained, or zeroed on save).
  Checksums are checked where the format stores them, by the tensor's own `read()`.

Comparing a stored decoder with the embeddings reads both tensors even without `deep` (chunked,
so memory stays bounded), and the signs read the four small head tensors (H and V values);
nothing else is read without `deep`. The probe reads the whole model into float32 once more
(a runtime holds it in memory), after the deep pass.

A tensor whose data cannot be read (a crc32c mismatch, a truncated data file) is a failed check
naming the tensor, not bad input: verify exists to find corrupt checkpoints, and reports them
with exit status 1. A data file that is absent altogether is bad input for `deep`
(`BadInput`, exit 2): there is nothing to check. Entries the reader set aside (`ignored`:
buffers, optimizer slots, other heads) are notes, never failures; their data is not read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, TypeVar

from ..dtypes import DType, as_float32
from ..errors import BadInput, bad_input
from ..lazy import lazy_module
from ..tensor import LazyTensor
from ..tree import Parameter, ParameterTree, role_of
from . import trained
from .arrays import chunk_indices, describe_difference, format_value, global_position
from .audit import counts, ignored_summary
from .contract import require_read
from .copies import differing_copies
from .files import data_file_problems
from .report import checkpoint
from .vocab import vocab_padding, vocab_problem

if TYPE_CHECKING:
    import numpy as np
else:  # imported where tensor values are compared or scanned: plain verify reads only bytes
    np = lazy_module("numpy")

T = TypeVar("T")

WORD = "embeddings.word"
DECODER = "mlm.decoder"
OUTPUT_BIAS = "mlm.output_bias"
DECODER_BIAS = "mlm.decoder_bias"

#: The tensors a complete MLM head needs besides its decoder, and what each one is (E = H except
#: in factorized families: ALBERT, ELECTRA).
MLM_REQUIRED = {
    "mlm.transform.kernel": "transform dense kernel [H, E]",
    "mlm.transform.bias": "transform dense bias [E]",
    "mlm.norm.gamma": "transform LayerNorm gamma [E]",
    "mlm.norm.beta": "transform LayerNorm beta [E]",
    OUTPUT_BIAS: "output bias [V]",
}
#: A causal model's head (`is_decoder`: transformers' `BertLMHeadModel`), stated with its verdict.
CAUSAL_HEAD = ("causal model (is_decoder): its head is a language model's next-token head, not a masked LM's: "
               "each position predicts the token after it from the tokens up to it (complete, tied and trained "
               "say the same of it; fill-mask refuses it)")
#: Why the reconstruction probe does not judge a causal head.
CAUSAL_PROBE = ("a causal head predicts the next token, not the token it is shown, so the reconstruction probe "
                "would call a trained head untrained")

#: `probe_not_run` when the probe was not asked for.
PROBE_NOT_ASKED = "not asked for (--probe, or --deep, runs it)"
#: Why a discriminator gets no MLM verdict (tying, trained, probe).
NOT_AN_MLM = ("an ELECTRA discriminator: its head is replaced-token detection (see rtd), not a masked LM, "
              "so it has no decoder to tie and no MLM head to probe")
#: Heads whose tensors must not be all zero (`deep`): a zero head was never trained or saved.
TRAINED_HEADS = ("pooler", "mlm", "nsp", "sop", "rtd")

MISSING_MLM = (
    "no MLM head: this checkpoint holds only the encoder{others} and none of the masked-LM weights "
    "(transform dense, transform LayerNorm, output bias). Loading it as a masked LM (such as "
    "transformers' BertForMaskedLM) gives a randomly initialized head with only a warning that "
    "weights were \"newly initialized\": its predictions are noise. Use a checkpoint saved with "
    "its pre-training heads, or allow a missing head (--allow-missing-mlm) if an encoder-only "
    "file is what you meant to verify"
)

#: The replaced-token-detection head of an ELECTRA discriminator (google-research/electra
#: `discriminator_predictions`: dense H -> H with the activation, then dense_1 H -> 1).
RTD_REQUIRED = {
    "rtd.dense.kernel": "dense kernel [H, H]",
    "rtd.dense.bias": "dense bias [H]",
    "rtd.output.kernel": "output kernel [H, 1]",
    "rtd.output.bias": "output bias [1]",
}
MISSING_RTD = (
    "no replaced-token-detection head: this ELECTRA discriminator holds only the encoder and none of "
    "discriminator_predictions (dense, dense_1). Loading it as ElectraForPreTraining gives a randomly "
    "initialized head with only a warning that weights were \"newly initialized\". Use the checkpoint "
    "saved with its pre-training heads, or --allow-missing-mlm if an encoder-only file is what you meant "
    "to verify"
)

COMPLETE, PARTIAL, MISSING = "complete", "partial", "missing"
TIED, UNTIED, NOT_APPLICABLE = "tied", "untied", "n/a"


@dataclass
class Findings:
    """What the checks found: failures (`problems`) and observations that pass (`notes`)."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def label(param: Parameter) -> str:
    """A tensor as messages name it: its name in the file, then its canonical name."""
    return f"{param.source} ({param.name})"


class TensorReader:
    """Reads tensors for the checks; a tensor that cannot be read becomes a problem naming it.

    An array read with `keep=True` is held until read again, so that the tying checks and the
    deep pass share one read of each tensor (a TF tensor's crc32c is computed on every read).
    """

    def __init__(self, tree: ParameterTree, findings: Findings):
        self.tree = tree
        self.findings = findings
        self._kept: dict[str, np.ndarray] = {}
        self._failed: set[str] = set()

    @property
    def failed(self) -> bool:
        """Whether some tensor could not be read (each is a problem already)."""
        return bool(self._failed)

    def read(self, name: str, *, keep: bool = False) -> np.ndarray | None:
        """The values of parameter `name` in its storage dtype, or None when unreadable."""
        if name in self._kept:
            return self._kept[name] if keep else self._kept.pop(name)
        array = self._reading(name, lambda tensor: tensor.read())
        if keep and array is not None:
            self._kept[name] = array
        return array

    def read_bytes(self, name: str, *, keep: bool = False) -> bytes | None:
        """The stored bytes of parameter `name`, or None when unreadable: with `keep`, those of
        the array `read(name, keep=True)` holds for the deep pass; else `LazyTensor.read_bytes`
        (without NumPy where they lie as stored)."""
        if keep or name in self._kept:
            array = self.read(name, keep=True)
            return None if array is None else array.tobytes()
        return self._reading(name, lambda tensor: tensor.read_bytes())

    def _reading(self, name: str, read: Callable[[LazyTensor], T]) -> T | None:
        """`read(tensor of name)`, or None with a problem naming the tensor when it cannot be read."""
        if name in self._failed:
            return None
        param = self.tree[name]
        try:
            return read(param.tensor)
        except (BadInput, OSError) as exc:
            self._failed.add(name)
            self.findings.problems.append(f"{label(param)}: cannot be read: {exc}")
            return None


# --- the MLM head ---------------------------------------------------------------------------


def mlm_head(tree: ParameterTree) -> tuple[str, list[str]]:
    """(`complete` | `partial` | `missing`, the canonical names a partial head lacks)."""
    stored = [name for name in tree.params if role_of(name).head == "mlm"]
    if not stored:
        return MISSING, []
    missing = [name for name in MLM_REQUIRED if name not in tree.params]
    if DECODER not in tree.params and (WORD not in tree.params or not tree.config.tie_word_embeddings):
        missing.append(DECODER)  # the table is the decoder only when tied
    return (PARTIAL, missing) if missing else (COMPLETE, [])


def _head_findings(tree: ParameterTree, head: str, missing: list[str], allow_missing_mlm: bool,
                   findings: Findings) -> None:
    if head == MISSING:
        others = [h for h, present in tree.heads.as_dict().items() if present]
        message = MISSING_MLM.format(others=f" (with {' and '.join(others)})" if others else "")
        if allow_missing_mlm:
            findings.notes.append("no MLM head (allowed: an encoder-only checkpoint verified on purpose)")
        else:
            findings.problems.append(message)
    elif head == PARTIAL:
        stored = ", ".join(label(p) for p in tree if role_of(p.name).head == "mlm")
        lacking = "; ".join(f"{name} ({MLM_REQUIRED.get(name, 'decoder [V, E]')})" for name in missing)
        findings.problems.append(
            f"partial MLM head: missing {lacking}. Stored: {stored}. A masked-LM loader fills the "
            f"missing tensors with fresh initial values, so the head's predictions are wrong")


# --- tying ----------------------------------------------------------------------------------


def _differs(a: Parameter, a_values: np.ndarray, b: Parameter, b_values: np.ndarray) -> str | None:
    """None when the two tensors are bit-equal, else where and by how much they differ."""
    return describe_difference(a_values, a.tensor.dtype, b_values, b.tensor.dtype)


def _tying(tree: ParameterTree, head: str, reader: TensorReader, keep: bool,
           findings: Findings) -> tuple[str, str]:
    """(tying, how it was established); failures and notes go to `findings`."""
    if head == MISSING:
        return NOT_APPLICABLE, "no MLM head"
    tied_config = tree.config.tie_word_embeddings
    decoder = tree.params.get(DECODER)
    if decoder is None:
        if not tied_config:
            findings.problems.append(
                "mlm.decoder: not stored, but the config says the embeddings are untied "
                "(tie_word_embeddings false): a loader builds a separate decoder and, finding none in "
                "the file, initializes it randomly. Store the decoder, or set tie_word_embeddings true")
        return TIED, "no decoder stored: the word embeddings serve as the decoder"
    if decoder.shared_with == WORD:
        return TIED, f"{decoder.source} shares storage with the word embeddings"
    word = tree.params.get(WORD)
    if word is None:
        return UNTIED, f"{decoder.source} is stored and there are no word embeddings to compare it with"
    decoder_values, word_values = reader.read(DECODER, keep=keep), reader.read(WORD, keep=keep)
    if decoder_values is None or word_values is None:
        return UNTIED, f"{decoder.source} is stored but could not be read to compare with the embeddings"
    difference = _differs(decoder, decoder_values, word, word_values)
    if difference is None:
        if not tied_config:
            findings.notes.append(f"{label(decoder)} equals {label(word)} bit for bit, although the config "
                                  f"says the embeddings are untied (tie_word_embeddings false)")
        return TIED, f"{decoder.source} is stored as a copy, bit-equal to {word.source}"
    sentence = f"{label(decoder)} differs from {label(word)}: {difference}"
    if tied_config:
        findings.problems.append(
            f"{sentence}. The config says the embeddings are tied (tie_word_embeddings true), so a loader "
            f"ties them and silently replaces this decoder with the word embeddings; set "
            f"tie_word_embeddings false if the decoder is meant to be its own matrix")
    else:
        findings.notes.append(f"untied decoder, as the config says (tie_word_embeddings false): {sentence}")
    return UNTIED, f"{decoder.source} is stored and differs from {word.source}"


def _decoder_bias(tree: ParameterTree, reader: TensorReader, keep: bool, findings: Findings) -> str:
    """`n/a` (not both stored), `shared`, `equal` or `differs`: the decoder bias against the output bias.

    With tied embeddings they are one tensor, and a difference is a failure. With untied
    embeddings a loader may keep them apart (transformers 5 unties both pairs, and its decoder
    applies the decoder's own bias): a difference is then a note, since the canonical tree holds
    one output bias (`mlm.output_bias`) and a format with a single bias keeps only that one.
    """
    decoder_bias, output_bias = tree.params.get(DECODER_BIAS), tree.params.get(OUTPUT_BIAS)
    if decoder_bias is None or output_bias is None:
        return NOT_APPLICABLE
    if decoder_bias.shared_with == OUTPUT_BIAS:
        return "shared"
    a, b = reader.read(DECODER_BIAS, keep=keep), reader.read(OUTPUT_BIAS, keep=keep)
    if a is None or b is None:
        return "unreadable"
    difference = _differs(decoder_bias, a, output_bias, b)
    if difference is None:
        return "equal"
    sentence = f"{label(decoder_bias)} differs from {label(output_bias)}: {difference}"
    if tree.config.tie_word_embeddings:
        findings.problems.append(f"{sentence}. They are one tensor in BERT with tied embeddings "
                                 f"(tie_word_embeddings true): a loader keeps only one of them")
    else:
        findings.notes.append(f"{sentence}. With untied embeddings a loader may apply the decoder's own bias; "
                              f"a format with a single output bias keeps only {output_bias.source}")
    return "differs"


# --- consistency ----------------------------------------------------------------------------


def _consistency(report: dict) -> list[str]:
    """The audit's problems, plus a total mismatch the component lines do not already explain."""
    problems = list(report["problems"])
    if not report["ok"] and not problems:
        problems.append(f"{report['parameters']:,} parameters, the closed form from the config gives "
                        f"{report['expected_parameters']:,}")
    return problems


# --- deep -----------------------------------------------------------------------------------


@dataclass
class Scan:
    """What one streaming pass over a tensor found."""

    non_finite: int = 0
    first_non_finite: tuple[int, ...] | None = None
    first_non_finite_value: float = 0.0
    all_zero: bool = True


def scan(values: np.ndarray, dtype: DType) -> Scan:
    """Count non-finite values (floats only) and see whether every value is zero, chunk by chunk."""
    result = Scan()
    for index in chunk_indices(values):
        chunk = as_float32(np.asarray(values[index]), dtype)
        if result.all_zero and np.any(chunk != 0):
            result.all_zero = False
        if not dtype.is_float:
            continue
        bad = ~np.isfinite(chunk)
        count = int(np.count_nonzero(bad))
        if count and result.first_non_finite is None:
            flat = int(np.argmax(bad))
            result.first_non_finite = global_position(index, bad.shape, flat)
            result.first_non_finite_value = float(chunk.reshape(-1)[flat])
        result.non_finite += count
    return result


def _must_not_be_zero(name: str) -> str | None:
    """Why tensor `name` must not be all zero, or None when zero is no sign of trouble."""
    role = role_of(name)
    if role.conditional:
        return None  # bert4keras initializes conditional LayerNorm kernels to zero
    if role.template.endswith(".gamma"):
        return "a LayerNorm gamma of all zeros makes the layer's output constant"
    if role.head in TRAINED_HEADS:
        return f"an all-zero {role.head} tensor is a head that was never trained, or was zeroed when saved"
    return None


def _zero_is_only_a_note(name: str) -> bool:
    """A zero pooler or NSP *bias* is what an untrained but unused head looks like (models trained
    without NSP, such as sentence encoders, keep their initial zeros): worth saying, not failing.
    The MLM head is what verify vouches for, so any zero there fails."""
    role = role_of(name)
    return role.head in ("pooler", "nsp", "sop") and role.template.endswith("bias")


def _require_data_files(tree: ParameterTree) -> None:
    """`BadInput` when a file the tree reads from is absent: there is no data to check."""
    absent = [str(f) for f in tree.files if not Path(f).exists()]
    if absent:
        raise bad_input(tree.path, f"a deep verify reads every tensor, but {', '.join(absent)} does not "
                                   f"exist; without --deep, verify reads only the headers")


def _deep(tree: ParameterTree, reader: TensorReader, findings: Findings, on_tensor=None) -> dict:
    """Read every tensor once and check its values; returns counts for the report.
    `on_tensor(nbytes)` is called after each tensor (progress)."""
    tensors = values = 0
    for param in tree:
        if on_tensor:
            on_tensor(param.tensor.nbytes)
        array = reader.read(param.name)
        if array is None:
            continue
        result = scan(array, param.tensor.dtype)
        tensors += 1
        values += param.numel
        if result.non_finite:
            findings.problems.append(
                f"{label(param)}: {result.non_finite} non-finite value(s), the first "
                f"{format_value(result.first_non_finite_value)} at {list(result.first_non_finite)}")
        reason = _must_not_be_zero(param.name)
        if reason and result.all_zero and param.numel:
            sentence = f"{label(param)}: every value is zero; {reason}"
            unused = param.name == OUTPUT_BIAS and tree.has_untied_decoder_bias
            if unused:
                sentence = (f"{label(param)}: every value is zero, and unused: the logits add the untied "
                            f"decoder's own bias (transformers 5 trains that one and leaves this one at zero)")
            (findings.notes if unused or _zero_is_only_a_note(param.name) else findings.problems).append(sentence)
    return {"tensors": tensors, "values": values}


# --- is the head trained? ------------------------------------------------------------------


def _fresh_init_signs(tree: ParameterTree, head: str, reader: TensorReader, keep: bool) -> tuple[list, bool]:
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


def _mlm_trained(tree: ParameterTree, head: str, signs: list, signs_checked: bool, reader: TensorReader,
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


# --- the discriminator's head --------------------------------------------------------------


def verified_head(tree: ParameterTree) -> str:
    """The head verify vouches for: "mlm", or "rtd" for an ELECTRA discriminator (the tree has
    the replaced-token-detection head and no MLM head, or was read as the discriminator)."""
    if tree.heads.mlm:
        return "mlm"
    return "rtd" if tree.heads.rtd or tree.model == "discriminator" else "mlm"


def rtd_head(tree: ParameterTree) -> tuple[str, list[str]]:
    """(`complete` | `partial` | `missing`, the canonical names a partial RTD head lacks)."""
    if not any(role_of(name).head == "rtd" for name in tree.params):
        return MISSING, []
    missing = [name for name in RTD_REQUIRED if name not in tree.params]
    return (PARTIAL, missing) if missing else (COMPLETE, [])


def _rtd(tree: ParameterTree, reader: TensorReader, keep: bool, allow_missing: bool, allow_untrained: bool,
         findings: Findings) -> dict:
    """The `rtd` report: the head (complete, partial, missing), what a partial one lacks, and
    whether it is trained by its signs (`trained.RTD_SIGNS`). There is no probe: what a trained
    discriminator says of a given input is no fixed property (random tokens may all look
    replaced), so the signs are the evidence."""
    head, missing = rtd_head(tree)
    judged = {"verdict": trained.NOT_JUDGED, "evidence": f"{head} RTD head", "signs": []}
    if head == MISSING:
        (findings.notes if allow_missing else findings.problems).append(
            "no replaced-token-detection head (allowed: an encoder-only discriminator verified on purpose)"
            if allow_missing else MISSING_RTD)
    elif head == PARTIAL:
        stored = ", ".join(label(p) for p in tree if role_of(p.name).head == "rtd")
        lacking = "; ".join(f"{name} ({RTD_REQUIRED[name]})" for name in missing)
        findings.problems.append(f"partial replaced-token-detection head: missing {lacking}. Stored: {stored}. "
                                 f"A loader fills the missing tensors with fresh initial values, so the "
                                 f"head's predictions are wrong")
    elif not all(Path(tree[name].file).exists() for name in RTD_REQUIRED):
        judged["evidence"] = "data file absent"
        findings.notes.append("whether the RTD head is trained was not checked: its data file is absent")
    else:
        signs = trained.seen_signs(tree, lambda name: reader.read_bytes(name, keep=keep), trained.RTD_SIGNS)
        judged.update(verdict=trained.UNTRAINED if signs else trained.TRAINED, evidence="signs",
                      signs=[sign.key for sign in signs])
        if signs:
            seen = trained.describe_signs(tree, signs)
            if allow_untrained:
                findings.notes.append(f"untrained RTD head, allowed (--allow-untrained-mlm): {seen}")
            else:
                findings.problems.append(trained.UNTRAINED_RTD_BY_SIGNS.format(seen=seen))
    return {"head": head, "missing": missing, "trained": judged}


# --- the report -----------------------------------------------------------------------------


def verify(tree: ParameterTree, *, deep: bool = False, allow_missing_mlm: bool = False,
           allow_untrained_mlm: bool = False, probe: bool | None = None, runtime: str = "numpy",
           headers_only: bool = False, accept_loss: tuple[str, ...] = (), on_tensor=None) -> dict:
    """Verify `tree`'s MLM head, tying, consistency and (with `deep`) values; a JSON-ready report.

    Keys: the checkpoint's (path, format, family, config, heads, ignored: see
    `report.checkpoint`), ok, verified_head ("mlm", or "rtd" for an ELECTRA discriminator:
    `verified_head`), mlm_head (`complete` | `partial` | `missing`), missing (canonical
    names a partial head lacks), tying (`tied` | `untied` | `n/a`), tying_detail, decoder_bias
    (`n/a` | `shared` | `equal` | `differs` | `unreadable`), consistency (the audit's
    problems), deep (None, or {tensors, values} read), mlm_trained ({verdict: `trained` |
    `untrained` | `n/a`, evidence, signs, probe}: see `_mlm_trained`; `n/a` for a discriminator),
    rtd (None, or for a discriminator {head, missing, trained: {verdict, evidence, signs}}: see
    `_rtd`), problems (sentences naming
    each tensor by its name in the file and its canonical name), notes (observations that do not
    fail), audit (the counts of `audit.counts`).

    `probe` runs the MLM head on the probe batch with `runtime` ("numpy" | "torch"); None runs it
    when `deep` does. `allow_untrained_mlm` turns an untrained head into a note.

    Every data file must exist and be long enough for the tensors its header places in it (a
    stat, no reads); with `headers_only` (an index published without its data) that is a note.

    Raises `BadInput` when `deep` is asked of a checkpoint whose data files are absent, or when
    its config states a key bertconv would not compute with that is not in `accept_loss`
    (`contract.require_read`).
    """
    accepted = require_read(tree, accept_loss)
    if deep:
        _require_data_files(tree)
    findings = Findings(notes=accepted)
    reader = TensorReader(tree, findings)
    checked = verified_head(tree)
    head, missing = mlm_head(tree)
    if checked == "mlm":
        _head_findings(tree, head, missing, allow_missing_mlm, findings)
        tying, tying_detail = _tying(tree, head, reader, deep, findings)
    else:
        tying, tying_detail = NOT_APPLICABLE, NOT_AN_MLM
    rtd = _rtd(tree, reader, deep, allow_missing_mlm, allow_untrained_mlm, findings) if checked == "rtd" else None
    decoder_bias = _decoder_bias(tree, reader, deep, findings)
    data_files = data_file_problems(tree)
    if headers_only:
        findings.notes.extend(f"{p} (allowed: --headers-only)" for p in data_files)
    else:
        findings.problems.extend(data_files)
    report_audit = counts(tree)
    consistency = _consistency(report_audit)
    findings.problems.extend(consistency)
    vocab = vocab_problem(tree)
    if vocab:
        findings.problems.append(vocab)
    padding = vocab_padding(tree)
    if padding:
        findings.notes.append(padding)
    findings.problems.extend(f"{copy.sentence()}. A reader that took the other copy would compute another model: "
                             f"re-save the file with its copies agreeing (bertconv convert writes the copy the "
                             f"model computes with; so does transformers 4's save_pretrained after loading it)"
                             for copy in differing_copies(tree))
    signs, signs_checked = _fresh_init_signs(tree, head, reader, deep)
    deep_counts = _deep(tree, reader, findings, on_tensor) if deep else None
    run_probe = deep if probe is None else probe
    if tree.config.is_decoder and checked == "mlm":
        findings.notes.append(CAUSAL_HEAD)
    if checked == "mlm":
        causal_probe = run_probe and tree.config.is_decoder
        mlm_trained = _mlm_trained(tree, head, signs, signs_checked, reader,
                                   runtime if run_probe and not causal_probe else None, allow_untrained_mlm, findings)
        if causal_probe:
            mlm_trained["probe_not_run"] = CAUSAL_PROBE
            findings.notes.append(f"MLM probe not run: {CAUSAL_PROBE}")
    else:
        mlm_trained = {"verdict": trained.NOT_JUDGED, "evidence": NOT_AN_MLM, "signs": [], "probe": None,
                       "probe_not_run": NOT_AN_MLM}
    findings.notes.extend(ignored_summary([entry.as_dict() for entry in tree.ignored]))
    return {
        **checkpoint(tree),
        "ok": not findings.problems,
        "verified_head": checked,
        "mlm_head": head,
        "missing": missing,
        "tying": tying,
        "tying_detail": tying_detail,
        "decoder_bias": decoder_bias,
        "consistency": consistency,
        "deep": deep_counts,
        "mlm_trained": mlm_trained,
        "rtd": rtd,
        "problems": findings.problems,
        "notes": findings.notes,
        "audit": report_audit,
    }
