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
- **A functional probe** (`probe`): the checkpoint's own MLM head, run by a bertconv runtime, is
  asked how sure it is of text it wrote itself. It writes a small batch: token ids drawn (seeded)
  from its own prior, the softmax of the bias its logits add, then FILL_ROUNDS rounds in which
  every other position becomes the head's top prediction there (shown unmasked, attention mask
  all ones, token types 0). Shown that sample, a trained head is sure of it: its mean negative
  log-likelihood (NLL) of the sample's tokens falls far below the sample's own token entropy (the
  NLL the best context-free guess, the sample's token frequencies, would reach). That difference,
  the *context gain* in nats, must reach PROBE_GAIN_TRAINED. No predictor that ignores context
  gets above zero (its cross-entropy on the sample is at least the sample's entropy), so a head
  that has collapsed onto a few tokens, or leans on a large output bias, gains nothing; a random
  transform (a fresh head, a fresh head whose values were changed afterwards, another model's
  head) predicts its own writing no better than noise and gains less than nothing. The test needs
  no text, no vocab.txt and no [MASK] id, so it holds for any vocabulary and domain;
  docs/probe.md gives the figures on real models (`python -m benchmarks.probe_figures`).

Shape legend: B sample batch, S sample length, V vocab size, H hidden size.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ..dtypes import all_elements_equal, as_float32
from ..errors import BadInput, CheckFailed
from ..lazy import lazy_module
from ..records import record, replace
from ..tree import ParameterTree

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    import numpy as np
else:  # imported by the probe: plain verify reads the signs' bytes without NumPy
    np = lazy_module("numpy")

# --- signs of fresh initialization -------------------------------------------------------------


@record
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

#: The random batch `diff --outputs` runs both checkpoints on (`checks.outputs`): B sequences of S
#: token ids (S capped at the model's position table), drawn uniformly from [0, V) by a generator
#: seeded with PROBE_SEED, the same batch on every run.
PROBE_BATCH = 2
PROBE_LENGTH = 32
PROBE_SEED = 20261123

#: The probe's sample: SAMPLE_BATCH sequences of SAMPLE_LENGTH tokens (capped at the position
#: table), written in FILL_ROUNDS rounds that refill the even positions, then the odd ones, and so
#: on (a position is refilled while its neighbours hold still: refilling all at once oscillates),
#: then one pass to score. Five forward passes of 32 positions: 1.1 s of CPU with NumPy at
#: bert-base size (V = 30522, H = 768, L = 12), after reading the weights. Fewer rounds are cheaper
#: and not enough: with two (0.6 s) rxnmapper's trained ALBERT gained -0.91 to +0.51 nats over
#: five starting samples, with four +0.67 to +1.72.
SAMPLE_BATCH = 2
SAMPLE_LENGTH = 16
FILL_ROUNDS = 4

#: The verdict: a head is trained when its context gain on its own sample reaches this many nats.
#: Measured by `python -m benchmarks.probe_figures` (docs/probe.md has the table), over five
#: starting samples or five drawn heads each:
#:   trained heads, +0.67 and above: rxnmapper (ALBERT, reaction SMILES, V=591) +0.67 to +1.72,
#:   rxnfp (BERT, reaction SMILES, V=591) +1.40 to +1.61, antiberty (BERT, antibodies, V=25)
#:   +1.37 to +2.21; the fixtures' trained heads +1.11 to +2.21.
#:   other heads, -0.00 and below: the same real models with their head re-initialized -3.64 to
#:   -0.43, then perturbed -3.95 to -0.27, or a fresh head with a large output bias (context-free,
#:   so at most 0 by construction) -0.89 to -0.00; the fixtures' fresh, perturbed and copied heads
#:   -3.06 to -1.03.
#: 0.3 sits between the two, clear of 0, the bound of every context-free guess.
PROBE_GAIN_TRAINED = 0.3

#: Below these the sample cannot show a gain: its entropy is at most ln(min(V, B x S)), and a
#: vocabulary of 8 (ln 8 = 2.1 nats) leaves room for a trained head to clear the threshold.
PROBE_MIN_VOCAB = 8
PROBE_MIN_LENGTH = 8

RUNTIMES = ("numpy", "torch")

UNTRAINED_BY_PROBE = (
    "untrained MLM head: asked to fill {positions} positions and then shown what it wrote, it is no surer "
    "of its own tokens than their frequencies are (context gain {gain:+.2f} nats: NLL {nll:.2f} against the "
    "sample's token entropy {entropy:.2f}; a trained head gains at least {threshold:.2f}). Its values are "
    "not the trained ones: a freshly initialized head whose biases or LayerNorm were changed afterwards, a "
    "head copied from another model, or the wrong config for these weights. Use the checkpoint's original "
    "pre-training weights, or --allow-untrained-mlm if an untrained head is what you meant to verify"
)


@record
class ProbeResult:
    """What the MLM head made of its own sample.

    Attributes:
      gain: entropy - nll, in nats: how much surer of the sample the head is than the sample's
        token frequencies allow (see the module docstring).
      nll: mean -ln p(token) the head gives the sample's tokens, shown them, natural log.
      entropy: the entropy of the sample's token frequencies (plug-in, natural log).
      top1: the fraction of positions whose highest logit is the token there.
      distinct: how many different tokens the sample holds.
      chance_nll: ln V, the NLL of a uniform guess.
      positions: B x S, the positions of the sample.
      rounds: refilling rounds that wrote the sample.
      runtime: "numpy" or "torch".
      finite: every logit finite (when not, the figures say nothing).
    """

    gain: float
    nll: float
    entropy: float
    top1: float
    distinct: int
    chance_nll: float
    positions: int
    rounds: int
    runtime: str
    finite: bool = True

    @property
    def trained(self) -> bool:
        return self.finite and self.gain >= PROBE_GAIN_TRAINED

    def as_dict(self) -> dict:
        return {"gain": self.gain if self.finite else "nan", "threshold_gain": PROBE_GAIN_TRAINED,
                "nll": self.nll if self.finite else "nan", "entropy": self.entropy, "top1": self.top1,
                "distinct": self.distinct, "chance_nll": self.chance_nll, "positions": self.positions,
                "rounds": self.rounds, "runtime": self.runtime}

    def summary(self) -> str:
        """The result in a few words: `context gain -1.80 nats on its own 32-token sample`."""
        return f"context gain {self.gain:+.2f} nats on its own {self.positions}-token sample"

    def describe(self) -> str:
        return UNTRAINED_BY_PROBE.format(positions=self.positions, gain=self.gain, nll=self.nll,
                                         entropy=self.entropy, threshold=PROBE_GAIN_TRAINED)


def percent(fraction: float) -> str:
    """A fraction as a percentage with two significant digits: 1.2%, 0.0033%."""
    return f"{fraction * 100:.2g}%"


def usable_positions(config) -> int:
    """How many tokens a sequence may hold: the position rows after the family's offset
    (RoBERTa's first two rows belong to no position)."""
    return config.max_position_embeddings - config.position_offset


def probe_ids(vocab_size: int, max_positions: int) -> np.ndarray:
    """The random batch of `diff --outputs`: int64 token ids [B, S], S = min(PROBE_LENGTH, max_positions)."""
    length = min(PROBE_LENGTH, max_positions)
    return np.random.default_rng(PROBE_SEED).integers(0, vocab_size, size=(PROBE_BATCH, length), dtype=np.int64)


def why_not_probed(config) -> str | None:
    """Why the probe cannot judge a model of `config`, or None when it can."""
    if config.vocab_size < PROBE_MIN_VOCAB:
        return (f"the vocabulary holds {config.vocab_size} tokens, fewer than the {PROBE_MIN_VOCAB} the probe "
                f"needs for its sample's entropy to leave room for a gain")
    if usable_positions(config) < PROBE_MIN_LENGTH:
        return (f"the position table holds {usable_positions(config)} positions, fewer than the "
                f"{PROBE_MIN_LENGTH} the probe's sample needs")
    if config.num_hidden_layers == 0:
        return "the model has no encoder layers (num_hidden_layers 0): no context for the head to use"
    return None


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


def head_prior(tree: ParameterTree, bias_name: str) -> np.ndarray:
    """softmax(the bias the logits add) [V], float64: what the head predicts before any evidence.
    Uniform when the bias is not finite (the logits then are not either, and the verdict says so)
    or when the head has none (a ModernBERT with `decoder_bias` false)."""
    if bias_name not in tree:
        return np.full(tree.config.vocab_size, 1.0 / tree.config.vocab_size)
    param = tree[bias_name]
    bias = as_float32(np.asarray(param.tensor.read()), param.tensor.dtype).astype(np.float64)
    if not np.isfinite(bias).all():
        return np.full(bias.shape, 1.0 / bias.size)
    weights = np.exp(bias - bias.max())
    return weights / weights.sum()


def own_sample(model, prior: np.ndarray, length: int, *, batch: int = SAMPLE_BATCH, rounds: int = FILL_ROUNDS,
               seed: int = PROBE_SEED) -> tuple[np.ndarray, bool]:
    """(token ids [batch, length] the head wrote, whether every logit on the way was finite).

    Starts from ids drawn from `prior` [V] by a generator seeded with `seed`; each round sets the
    even positions (first round), then the odd ones, to the head's top prediction there.
    """
    ids = np.random.default_rng(seed).choice(prior.size, size=(batch, length), p=prior).astype(np.int64)
    parity = np.arange(length) % 2
    finite = True
    for round_ in range(rounds):
        logits = probe_logits(model, ids)
        finite = finite and bool(np.isfinite(logits).all())
        ids = np.where(parity == round_ % 2, logits.argmax(axis=-1), ids).astype(np.int64)
    return ids, finite


def score(logits: np.ndarray, ids: np.ndarray, runtime: str, rounds: int = FILL_ROUNDS) -> ProbeResult:
    """The context gain, NLL, entropy and top-1 of the sample `ids` [B, S] under `logits` [B, S, V]."""
    vocab_size = logits.shape[-1]
    wide = logits.astype(np.float64)
    peak = wide.max(axis=-1, keepdims=True)
    log_normalizer = peak[..., 0] + np.log(np.exp(wide - peak).sum(axis=-1))  # [B, S]
    shown = np.take_along_axis(wide, ids[..., None], axis=-1)[..., 0]  # [B, S]
    nll = float(np.mean(log_normalizer - shown))
    counts = np.unique(ids, return_counts=True)[1]
    frequencies = counts / ids.size
    entropy = float(-(frequencies * np.log(frequencies)).sum()) + 0.0  # + 0.0: no -0.0 for one token
    return ProbeResult(
        gain=entropy - nll,
        nll=nll,
        entropy=entropy,
        top1=float(np.mean(logits.argmax(axis=-1) == ids)),
        distinct=int(counts.size),
        chance_nll=math.log(vocab_size),
        positions=int(ids.size),
        rounds=rounds,
        runtime=runtime,
        finite=bool(np.isfinite(logits).all()),
    )


def probe(tree: ParameterTree, runtime: str = "numpy", *, batch: int = SAMPLE_BATCH,
          length: int = SAMPLE_LENGTH, rounds: int = FILL_ROUNDS, seed: int = PROBE_SEED) -> ProbeResult:
    """Have `tree`'s MLM head write its sample, then score the head on it (the module docstring).

    The keyword arguments exist for the measurements of benchmarks.probe_figures; verify uses the
    defaults. Raises BadInput or CheckFailed when the tree cannot be run (no MLM head, a partial
    head, conditional LayerNorm, an unreadable tensor).
    """
    model = build_model(tree, runtime)
    prior = head_prior(tree, model.decoder_bias)
    ids, finite = own_sample(model, prior, min(length, usable_positions(tree.config)), batch=batch,
                             rounds=rounds, seed=seed)
    result = score(probe_logits(model, ids), ids, runtime, rounds)
    return result if finite else replace(result, finite=False)


def try_probe(tree: ParameterTree, runtime: str) -> tuple[ProbeResult | None, str | None]:
    """(the probe's result, None), or (None, why the runtime could not run the head)."""
    try:
        return probe(tree, runtime), None
    except (BadInput, CheckFailed, OSError) as exc:
        return None, str(exc)
