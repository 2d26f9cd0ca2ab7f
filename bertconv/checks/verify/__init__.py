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


from ...tree import ParameterTree
from .. import trained
from ..audit import counts, ignored_summary
from ..contract import require_read
from ..copies import differing_copies
from ..files import data_file_problems
from ..report import checkpoint
from ..vocab import vocab_padding, vocab_problem
from .deep import deep_pass, require_data_files
from .findings import NOT_APPLICABLE, Findings, TensorReader
from .heads import CAUSAL_HEAD, NOT_AN_MLM, check_rtd, head_findings, mlm_head, verified_head
from .trained_head import CAUSAL_PROBE, fresh_init_signs, judge_mlm_trained
from .tying import check_decoder_bias, check_tying


def _consistency(report: dict) -> list[str]:
    """The audit's problems, plus a total mismatch the component lines do not already explain."""
    problems = list(report["problems"])
    if not report["ok"] and not problems:
        problems.append(f"{report['parameters']:,} parameters, the closed form from the config gives "
                        f"{report['expected_parameters']:,}")
    return problems


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
    `untrained` | `n/a`, evidence, signs, probe}: see `trained_head.judge_mlm_trained`; `n/a` for a discriminator),
    rtd (None, or for a discriminator {head, missing, trained: {verdict, evidence, signs}}: see
    `heads.check_rtd`), problems (sentences naming each tensor by its name in the file and its canonical name), notes (observations that do not
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
        require_data_files(tree)
    findings = Findings(notes=accepted)
    reader = TensorReader(tree, findings)
    checked = verified_head(tree)
    head, missing = mlm_head(tree)
    if checked == "mlm":
        head_findings(tree, head, missing, allow_missing_mlm, findings)
        tying, tying_detail = check_tying(tree, head, reader, deep, findings)
    else:
        tying, tying_detail = NOT_APPLICABLE, NOT_AN_MLM
    rtd = check_rtd(tree, reader, deep, allow_missing_mlm, allow_untrained_mlm, findings) if checked == "rtd" else None
    decoder_bias = check_decoder_bias(tree, reader, deep, findings)
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
    signs, signs_checked = fresh_init_signs(tree, head, reader, deep)
    deep_counts = deep_pass(tree, reader, findings, on_tensor) if deep else None
    run_probe = deep if probe is None else probe
    if tree.config.is_decoder and checked == "mlm":
        findings.notes.append(CAUSAL_HEAD)
    if checked == "mlm":
        causal_probe = run_probe and tree.config.is_decoder
        mlm_trained = judge_mlm_trained(tree, head, signs, signs_checked, reader,
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
