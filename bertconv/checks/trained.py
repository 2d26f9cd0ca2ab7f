"""Is the masked-LM head the trained one, or a freshly initialized head that predicts noise?

The usual way to ship a broken masked LM: load an encoder-only checkpoint into a masked-LM class
(transformers' `BertForMaskedLM.from_pretrained` initializes the missing head and logs one line
about "newly initialized" weights), then save it. The file holds a complete, tied, correctly
shaped head, and only its values say that it was never trained. Two checks look at them:

- **Signs of fresh initialization** (`signs`): values an initializer gives and training never
  leaves exactly: an output bias of zeros, a transform LayerNorm with gamma all ones or beta all
  zeros, a transform dense bias of zeros. Every family initializes a new BERT head this way
  (google-research/bert `zeros_initializer` for `output_bias` and dense biases, LayerNorm ones and
  zeros; transformers `_init_weights`; bert4keras `MLM-Bias` and `LayerNormalization`). Only these
  four small tensors are read (a few kilobytes), so plain `verify` stays fast.
- **A functional probe** (`probe`): the checkpoint's own MLM head, run by a bertconv runtime on a
  fixed, seeded batch of token ids drawn uniformly from the vocabulary, shown unmasked (attention
  mask all ones, token types 0). A pre-trained BERT head reconstructs a visible token far above
  chance: pre-training leaves 10% of the masked slots unchanged and asks for the token there, so
  copying what it is shown is learned. A random head, a fresh head whose values were changed
  afterwards, or the head of another model sits at chance (1/V) or below. No text and no
  vocab.txt are needed.

Shape legend: B probe batch, S probe length, V vocab size, H hidden size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from ..dtypes import all_elements_equal
from ..errors import BadInput, CheckFailed
from ..lazy import lazy_module
from ..tree import ParameterTree

if TYPE_CHECKING:
    import numpy as np
else:  # imported by the probe: plain verify reads the signs' bytes without NumPy
    np = lazy_module("numpy")

# --- signs of fresh initialization -------------------------------------------------------------


@dataclass(frozen=True)
class Sign:
    """One initializer value that training never leaves exactly.

    Attributes:
      key: its id in JSON reports.
      tensor: the canonical name of the tensor it is about.
      value: the value every element holds when the sign is seen.
      describes: how a message says it.
    """

    key: str
    tensor: str
    value: float
    describes: str


OUTPUT_BIAS = "mlm.output_bias"
UNTIED_DECODER_BIAS = "mlm.decoder_bias"

SIGNS = (
    Sign("output_bias_zero", OUTPUT_BIAS, 0.0, "output bias all zero"),
    Sign("norm_gamma_one", "mlm.norm.gamma", 1.0, "transform LayerNorm gamma all one"),
    Sign("norm_beta_zero", "mlm.norm.beta", 0.0, "transform LayerNorm beta all zero"),
    Sign("transform_bias_zero", "mlm.transform.bias", 0.0, "transform dense bias all zero"),
)
#: The same kind of sign on ELECTRA's replaced-token-detection head (the discriminator's):
#: google-research/electra `_get_discriminator_output` builds it from two `tf.layers.dense`, whose
#: biases start at zeros, and transformers' `_init_weights` zeroes every Linear bias; training
#: moves both (the output bias is the logit's offset, with a gradient at every token). The head
#: has no LayerNorm, and its kernels start random, so the biases are its only signs.
RTD_SIGNS = (
    Sign("rtd_dense_bias_zero", "rtd.dense.bias", 0.0, "RTD dense bias all zero"),
    Sign("rtd_output_bias_zero", "rtd.output.bias", 0.0, "RTD output bias zero"),
)
SIGNS_BY_KEY = {sign.key: sign for sign in SIGNS + RTD_SIGNS}

#: Verdicts of `mlm_trained`.
TRAINED, UNTRAINED, NOT_JUDGED = "trained", "untrained", "n/a"

UNTRAINED_RTD_BY_SIGNS = (
    "untrained replaced-token-detection head: {seen}. A framework creates this head with zero biases "
    "and training never leaves them exactly zero: this discriminator head was initialized, not trained "
    "(as when an ELECTRA encoder is loaded into transformers' ElectraForPreTraining, which warns that "
    "discriminator_predictions weights were \"newly initialized\", and then saved), and its replaced-token "
    "predictions are noise. Use the checkpoint's original pre-training weights, or --allow-untrained-mlm "
    "if an untrained head is what you meant to verify"
)

UNTRAINED_BY_SIGNS = (
    "untrained MLM head: {seen}. These are the values a framework gives a head it has just created "
    "(output bias zeros, LayerNorm gamma ones and beta zeros, dense bias zeros), and training never "
    "leaves them exactly: this head was initialized, not trained, and its predictions are noise. It "
    "usually happens when an encoder-only checkpoint is loaded into a masked-LM class (transformers' "
    "BertForMaskedLM.from_pretrained warns that the cls.predictions weights were \"newly initialized\") "
    "and then saved (save_pretrained). Use the checkpoint's original pre-training weights, or "
    "--allow-untrained-mlm if an untrained head is what you meant to verify"
)


def sign_tensor(tree: ParameterTree, sign: Sign) -> str:
    """The canonical name of the tensor `sign` is read from in `tree`.

    The output-bias sign looks at the bias the logits add: an untied decoder's own bias where the
    file stores one. transformers 5 trains that one and leaves `cls.predictions.bias` at its zeros
    in an untied model (fixtures/trained/hf_untied), which is no sign of anything.
    """
    if sign.tensor == OUTPUT_BIAS and tree.has_untied_decoder_bias:
        return UNTIED_DECODER_BIAS
    return sign.tensor


def seen_signs(tree: ParameterTree, read_bytes: Callable[[str], bytes | None],
               signs: tuple[Sign, ...] = SIGNS) -> list[Sign]:
    """The `signs` of fresh initialization (the MLM head's by default) that `tree` shows.

    `read_bytes(name)` returns a tensor's stored bytes (or None when they cannot be read, which
    the caller reports); a tensor the tree lacks shows no sign. Values compare exactly in every
    dtype (-0.0 counts as zero; see `dtypes.all_elements_equal`).
    """
    seen = []
    for sign in signs:
        name = sign_tensor(tree, sign)
        if name not in tree.params:
            continue
        data = read_bytes(name)
        if data and all_elements_equal(data, tree[name].tensor.dtype, sign.value):
            seen.append(sign)
    return seen


def describe_signs(tree: ParameterTree, signs: list[Sign]) -> str:
    """The signs as a message lists them, each tensor by its name in the file."""
    return "; ".join(f"{sign.describes} ({tree[sign_tensor(tree, sign)].source})" for sign in signs)


# --- the functional probe -------------------------------------------------------------------

#: The probe batch: B sequences of S token ids (S capped at the model's position table), drawn
#: uniformly from [0, V) by a generator seeded with PROBE_SEED, the same batch on every run.
#: 2 x 32 = 64 positions: at bert-base size (encoder 64 x 170 MFLOP, MLM head 64 x V x H x 2 =
#: 3 GFLOP) the forward pass took 0.24 s of CPU with NumPy on one core (4 x 64 took 1.0 s), on top
#: of building the model (reading its 420 MB into float32, about 0.5 s). 64 positions separate the
#: two populations below by a wide margin.
PROBE_BATCH = 2
PROBE_LENGTH = 32
PROBE_SEED = 20261123

#: The verdict of the probe: a head is trained when it reconstructs at least this fraction of the
#: tokens it is shown. Measured with the NumPy runtime on the probe batch (tests/test_trained.py
#: checks the fixtures against it):
#:   untrained heads, 0% to 4.7%: MiniLM-L6 loaded into BertForMaskedLM (a fresh head, V=30522)
#:   0.0%; fixtures/trained/encoder_then_mlm 1.6%, perturbed_fresh 1.6%, copied_head 0.0%; the
#:   random heads of the other fixtures 0% to 4.7% (the highest: bert4keras v50, V=50, chance 2%).
#:   trained heads, 56.7% and above: fixtures/trained/hf 82.8% (tf/, the same weights, 82.8%),
#:   hf_untied 73.4%, bert4keras 56.7%, each trained by fixtures/make_trained_fixtures.py for 400
#:   steps; 71.8% for a real pre-trained BERT head (V=25) as measured in issue 14.
#: 25% sits between the two populations, and is more than 25 times chance for any V >= 100; for a
#: vocabulary that small, a head must also beat chance PROBE_OVER_CHANCE times over.
PROBE_TOP1_TRAINED = 0.25
PROBE_OVER_CHANCE = 4.0

RUNTIMES = ("numpy", "torch")

UNTRAINED_BY_PROBE = (
    "untrained MLM head: shown {positions} random tokens unmasked, it predicts the token it is shown "
    "{top1:.1%} of the time (chance 1/V = {chance}; a trained head reconstructs at least "
    "{threshold:.0%}), mean negative log-likelihood {nll:.2f} (a uniform guess: ln V = {chance_nll:.2f}). "
    "Its values are not the trained ones: a freshly initialized head whose biases or LayerNorm were "
    "changed afterwards, a head copied from another model, or the wrong config for these weights. "
    "Use the checkpoint's original pre-training weights, or --allow-untrained-mlm if an untrained head "
    "is what you meant to verify"
)


@dataclass(frozen=True)
class ProbeResult:
    """What the MLM head did with the probe batch.

    Attributes:
      top1: the fraction of positions whose highest logit is the token shown there.
      nll: mean -ln p(shown token), natural log.
      chance_top1, chance_nll: the same for a uniform guess: 1/V and ln V.
      positions: B x S, the positions scored.
      runtime: "numpy" or "torch".
      finite: every logit finite (when not, top1 and nll say nothing).
    """

    top1: float
    nll: float
    chance_top1: float
    chance_nll: float
    positions: int
    runtime: str
    finite: bool = True

    @property
    def trained(self) -> bool:
        return (self.finite and self.top1 >= PROBE_TOP1_TRAINED
                and self.top1 >= PROBE_OVER_CHANCE * self.chance_top1)

    def as_dict(self) -> dict:
        return {"top1": self.top1, "nll": self.nll if self.finite else "nan", "chance_top1": self.chance_top1,
                "chance_nll": self.chance_nll, "positions": self.positions, "runtime": self.runtime,
                "threshold_top1": PROBE_TOP1_TRAINED}

    def summary(self) -> str:
        """The result in a few words: `reconstructs 1.6% of 64 random tokens (chance 1.20%)`."""
        return (f"reconstructs {self.top1:.1%} of {self.positions} random tokens "
                f"(chance {percent(self.chance_top1)})")

    def describe(self) -> str:
        return UNTRAINED_BY_PROBE.format(positions=self.positions, top1=self.top1, chance=percent(self.chance_top1),
                                         threshold=PROBE_TOP1_TRAINED, nll=self.nll, chance_nll=self.chance_nll)


def percent(fraction: float) -> str:
    """A fraction as a percentage with two significant digits: 1.2%, 0.0033%."""
    return f"{fraction * 100:.2g}%"


def usable_positions(config) -> int:
    """How many tokens a sequence may hold: the position rows after the family's offset
    (RoBERTa's first two rows belong to no position)."""
    return config.max_position_embeddings - config.position_offset


def probe_ids(vocab_size: int, max_positions: int) -> np.ndarray:
    """The probe batch: int64 token ids [B, S], S = min(PROBE_LENGTH, max_positions)."""
    length = min(PROBE_LENGTH, max_positions)
    return np.random.default_rng(PROBE_SEED).integers(0, vocab_size, size=(PROBE_BATCH, length), dtype=np.int64)


def build_model(tree: ParameterTree, runtime: str):
    """The runtime's BERT on `tree` (NumPy, or torch when asked; torch is imported only then).

    Raises BadInput or CheckFailed when the tree cannot be run (see `runtime.weights.plan`).
    """
    if runtime not in RUNTIMES:
        raise ValueError(f"runtime must be one of {RUNTIMES}, got {runtime!r}")
    if runtime == "torch":
        from ..runtime.torch_bert import TorchBert
        return TorchBert(tree)
    from ..runtime.numpy_bert import NumpyBert
    return NumpyBert(tree)


def probe_logits(model, ids: np.ndarray) -> np.ndarray:
    """The MLM logits [B, S, V] of `model` (NumpyBert or TorchBert) on `ids` [B, S], unmasked,
    token types 0, every position attended; as a NumPy float32 array."""
    ones, zeros = np.ones_like(ids), np.zeros_like(ids)
    logits = model.mlm_logits(model.encode(ids, zeros, ones))
    if not isinstance(logits, np.ndarray):  # a torch tensor
        logits = logits.detach().cpu().float().numpy()
    return logits


def score(logits: np.ndarray, ids: np.ndarray, runtime: str) -> ProbeResult:
    """Top-1 reconstruction and mean NLL of the shown tokens `ids` [B, S] under `logits` [B, S, V]."""
    vocab_size = logits.shape[-1]
    finite = bool(np.isfinite(logits).all())
    wide = logits.astype(np.float64)
    peak = wide.max(axis=-1, keepdims=True)
    log_normalizer = peak[..., 0] + np.log(np.exp(wide - peak).sum(axis=-1))  # [B, S]
    shown = np.take_along_axis(wide, ids[..., None], axis=-1)[..., 0]  # [B, S]
    return ProbeResult(
        top1=float(np.mean(logits.argmax(axis=-1) == ids)),
        nll=float(np.mean(log_normalizer - shown)),
        chance_top1=1.0 / vocab_size,
        chance_nll=math.log(vocab_size),
        positions=int(ids.size),
        runtime=runtime,
        finite=finite,
    )


def probe(tree: ParameterTree, runtime: str = "numpy") -> ProbeResult:
    """Run `tree`'s MLM head on the probe batch and score it.

    Raises BadInput or CheckFailed when the tree cannot be run (no MLM head, a partial head,
    conditional LayerNorm, an unreadable tensor).
    """
    model = build_model(tree, runtime)
    ids = probe_ids(tree.config.vocab_size, usable_positions(tree.config))
    return score(probe_logits(model, ids), ids, runtime)


def try_probe(tree: ParameterTree, runtime: str) -> tuple[ProbeResult | None, str | None]:
    """(the probe's result, None), or (None, why it could not run)."""
    try:
        return probe(tree, runtime), None
    except (BadInput, CheckFailed, OSError) as exc:
        return None, str(exc)
