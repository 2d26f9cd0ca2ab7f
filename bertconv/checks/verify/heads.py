"""Which head a tree carries and whether it is whole: the masked-LM head (or a causal model's
next-token head) and an ELECTRA discriminator's replaced-token-detection head."""

from __future__ import annotations

from pathlib import Path

from ...tree import ParameterTree, has_parameter, role_of
from .. import trained
from .findings import COMPLETE, DECODER, MISSING, OUTPUT_BIAS, PARTIAL, WORD, Findings, TensorReader, label

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
#: Why a discriminator gets no MLM verdict (tying, trained, probe).
NOT_AN_MLM = ("an ELECTRA discriminator: its head is replaced-token detection (see rtd), not a masked LM, "
              "so it has no decoder to tie and no MLM head to probe")
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


def mlm_head(tree: ParameterTree) -> tuple[str, list[str]]:
    """(`complete` | `partial` | `missing`, the canonical names a partial head lacks)."""
    stored = [name for name in tree.params if role_of(name).head == "mlm"]
    if not stored and tree.config.parameter_free_mlm and WORD in tree.params:
        return COMPLETE, []  # RoFormer-v2's head is the tied word table alone
    if not stored:
        return MISSING, []
    missing = [name for name in MLM_REQUIRED if name not in tree.params and has_parameter(tree.config, name)]
    if DECODER not in tree.params and (WORD not in tree.params or not tree.config.tie_word_embeddings):
        missing.append(DECODER)  # the table is the decoder only when tied
    return (PARTIAL, missing) if missing else (COMPLETE, [])


def head_findings(tree: ParameterTree, head: str, missing: list[str], allow_missing_mlm: bool,
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


def check_rtd(tree: ParameterTree, reader: TensorReader, keep: bool, allow_missing: bool, allow_untrained: bool,
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
