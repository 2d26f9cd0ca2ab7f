"""The numeric conventions on which BERT implementations differ, named, with where each comes from.

Three implementations trained and ran the BERT checkpoints bertconv reads, and they do not compute
quite the same function:

| convention | google-research/bert | Hugging Face transformers | bert4keras 0.11.5 |
|---|---|---|---|
| activation called "gelu" | tanh approximation | exact (erf) | exact (erf), switchable |
| LayerNorm epsilon | 1e-12 | 1e-12 (`layer_norm_eps`) | 1e-12 |
| masked attention scores | + (-10000.0) | + dtype minimum | replaced by -inf |

A runtime takes these from a `Numerics`, never from a guess: `Numerics.for_tree` starts from the
defaults of the family the checkpoint's format declares in the format registry (its entry's
`numerics`, a key of `FAMILY_DEFAULTS`), takes what the checkpoint's config says, and applies the
caller's overrides.

The mask conventions agree whenever a row of scores has at least one unmasked key: after the
softmax's max subtraction, exp(-10000) and exp(dtype min) are both exactly 0 in float32. They
differ only for a query whose keys are all masked (uniform weights under an additive adder, NaN
under -inf) and, for -10000, when unmasked scores are themselves near -10000.
"""

from __future__ import annotations

import math
from typing import Union

from .. import config as _config
from ..config import ACTIVATIONS
from ..errors import BadInput
# The format registry declares which family's numerics each format uses; a runtime looks that
# up there and calls into no format module.
from ..formats.registry import format_named
from ..records import record, replace

# --- activations ---------------------------------------------------------------------------

#: 0.5 x (1 + erf(x / sqrt(2))): transformers' "gelu" (torch.nn.functional.gelu, approximate="none")
#: and bert4keras' default `gelu_erf`.
GELU_ERF = "gelu"
#: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): google-research/bert modeling.py `gelu`, which
#: every Google-released BERT was trained with although its config says "gelu"; transformers'
#: "gelu_new" / "gelu_pytorch_tanh" (torch.nn.functional.gelu, approximate="tanh").
GELU_TANH = "gelu_tanh"
#: max(x, 0).
RELU = "relu"

#: Coefficient of x^3 inside the tanh approximation (Hendrycks & Gimpel 2016, eq. in section 2;
#: google-research/bert modeling.py `gelu`).
GELU_TANH_CUBIC = 0.044715
#: sqrt(2 / pi), the scale inside the tanh approximation (same sources).
GELU_TANH_SCALE = math.sqrt(2.0 / math.pi)

# --- LayerNorm -----------------------------------------------------------------------------

#: LayerNorm epsilon: google-research/bert `layer_norm` (tf.contrib.layers.layer_norm is given
#: 1e-12 by modeling.py), transformers `BertConfig.layer_norm_eps`, bert4keras `epsilon=1e-12`.
LAYER_NORM_EPS = _config.LAYER_NORM_EPS

# --- attention mask ------------------------------------------------------------------------

#: google-research/bert modeling.py `attention_layer`: `adder = (1.0 - mask) * -10000.0`, added to
#: the scaled scores before the softmax.
GOOGLE_MASK_ADDER = -10000.0
#: transformers (masking_utils / eager_attention_forward): the minimum of the compute dtype,
#: `torch.finfo(dtype).min`, added to the masked scores. A marker, resolved per dtype.
DTYPE_MIN = "dtype-min"
#: bert4keras 0.11.5 backend `attention_normalize` -> `sequence_masking(a, mask, -np.inf)`: masked
#: scores are replaced by -inf, the same as adding -inf to them.
BERT4KERAS_MASK_ADDER = float("-inf")
#: Keras 3 `Softmax` with a mask (keras-hub's attention): masked scores are replaced by -1e9
#: (keras/src/layers/activations/softmax.py `_large_negative_number`, float32).
KERAS_MASK_ADDER = -1e9

#: keras-bert's LayerNorm (keras-layer-normalization) epsilon: `K.epsilon() ** 2` with Keras'
#: default 1e-7, its only numeric difference from google-research/bert (tanh GELU, -10000 mask).
KERAS_BERT_LAYER_NORM_EPS = 1e-14

#: A mask adder: a number added to masked scores, or `DTYPE_MIN`.
MaskAdder = Union[float, str]

# --- the masked-LM loss --------------------------------------------------------------------

#: google-research/bert run_pretraining.py `get_masked_lm_output`:
#: `denominator = tf.reduce_sum(label_weights) + 1e-5`, so a batch whose prediction slots are all
#: padding (weight 0) has loss 0 rather than 0/0.
MLM_LOSS_EPSILON = 1e-5


@record
class Numerics:
    """The conventions a runtime computes with.

    Attributes:
      activation: "gelu" (erf), "gelu_tanh" or "relu", for the feed-forward and MLM transform.
      layer_norm_eps: epsilon added to the variance in every LayerNorm.
      mask_adder: added to the attention scores of padding keys: a number (-10000.0, -inf) or
        `DTYPE_MIN` for the compute dtype's minimum.
    """

    activation: str = GELU_ERF
    layer_norm_eps: float = LAYER_NORM_EPS
    mask_adder: MaskAdder = DTYPE_MIN

    def __post_init__(self) -> None:
        if self.activation not in ACTIVATIONS:
            raise BadInput(f"activation {self.activation!r} is not one of {', '.join(ACTIVATIONS)}")
        if not (isinstance(self.layer_norm_eps, (int, float)) and self.layer_norm_eps > 0):
            raise BadInput(f"LayerNorm epsilon must be a positive number, got {self.layer_norm_eps!r}")
        if isinstance(self.mask_adder, str):
            if self.mask_adder != DTYPE_MIN:
                raise BadInput(f"mask adder {self.mask_adder!r} is neither a number nor {DTYPE_MIN!r}")
        elif not self.mask_adder < 0:
            raise BadInput(f"mask adder must be negative (it pushes padding keys out of the softmax), "
                           f"got {self.mask_adder!r}")

    def mask_value(self, dtype_min: float) -> float:
        """The number added to masked scores when computing in a dtype whose minimum is `dtype_min`."""
        return dtype_min if self.mask_adder == DTYPE_MIN else float(self.mask_adder)

    def with_overrides(self, *, activation: str | None = None, layer_norm_eps: float | None = None,
                       mask_adder: MaskAdder | None = None) -> "Numerics":
        """A copy with every argument that is not None replaced."""
        given = dict(activation=activation, layer_norm_eps=layer_norm_eps, mask_adder=mask_adder)
        return replace(self, **{k: v for k, v in given.items() if v is not None})

    @classmethod
    def for_tree(cls, tree, *, activation: str | None = None, layer_norm_eps: float | None = None,
                 mask_adder: MaskAdder | None = None) -> "Numerics":
        """The conventions to run `tree` (a `ParameterTree`) with.

        In order of precedence: the arguments given here; the activation and epsilon the
        checkpoint's config or its format states (its reader has already read a config's "gelu" as
        the source family means it); the defaults of the family its format's registry entry names
        (`FAMILY_DEFAULTS[family_of(tree.format)]`).
        """
        defaults = FAMILY_DEFAULTS[family_of(tree.format)]
        config = tree.config
        # "format": a fact of the format its reader states (fairseq's LayerNorm epsilon 1e-5);
        # "family": its library's own default (ModernBERT's epsilon 1e-5).
        stated = {name for name, source in config.provenance.items()
                  if source in ("file", "flag", "format", "family")}
        base = cls(
            activation=config.hidden_act if "hidden_act" in stated else defaults.activation,
            layer_norm_eps=config.layer_norm_eps if "layer_norm_eps" in stated else defaults.layer_norm_eps,
            mask_adder=defaults.mask_adder,
        )
        return base.with_overrides(activation=activation, layer_norm_eps=layer_norm_eps, mask_adder=mask_adder)

    def describe(self) -> str:
        """One line for reports: `activation=gelu_tanh layer_norm_eps=1e-12 mask_adder=-10000.0`."""
        return f"activation={self.activation} layer_norm_eps={self.layer_norm_eps:g} mask_adder={self.mask_adder}"


#: The conventions each source family trained with (see the module docstring's table).
FAMILY_DEFAULTS: dict[str, Numerics] = {
    "google-tf": Numerics(GELU_TANH, LAYER_NORM_EPS, GOOGLE_MASK_ADDER),
    "hf": Numerics(GELU_ERF, LAYER_NORM_EPS, DTYPE_MIN),
    "bert4keras": Numerics(GELU_ERF, LAYER_NORM_EPS, BERT4KERAS_MASK_ADDER),
    "keras-bert": Numerics(GELU_TANH, KERAS_BERT_LAYER_NORM_EPS, GOOGLE_MASK_ADDER),
    # keras-hub's BERT and ALBERT; its configs state neither, its readers state each family's own.
    "keras-hub": Numerics(GELU_TANH, LAYER_NORM_EPS, KERAS_MASK_ADDER),
}


def family_of(format_name: str) -> str:
    """The family ("google-tf", "hf", "bert4keras") whose numerics a reader's format name (a
    `ParameterTree.format`) uses: the `numerics` of its entry in the format registry."""
    fmt = format_named(format_name)
    if fmt is None or fmt.numerics not in FAMILY_DEFAULTS:
        raise BadInput(f"format {format_name!r} belongs to no family with known numerics "
                       f"({', '.join(FAMILY_DEFAULTS)}); pass the activation, LayerNorm epsilon and "
                       f"mask adder explicitly")
    return fmt.numerics
