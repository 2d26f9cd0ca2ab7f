"""Google's pre-training losses, as google-research/bert run_pretraining.py computes them, in NumPy.

Shape legend: B batch, S sequence length, H hidden size, V vocab size, M prediction slots per
sequence (`max_predictions_per_seq`; slots past a sequence's real masks are padding, weight 0).

`get_masked_lm_output`, step by step:
  1. gather the encoder output at `masked_lm_positions`: [B, S, H] -> [B, M, H]  (`gather_positions`)
  2. the MLM head on the gathered vectors only: transform dense + activation + LayerNorm, then
     logits against the decoder (the word embeddings, tied) plus the output bias: [B, M, V]
     (the runtime's `mlm_logits`; gathering first is what keeps the V x H product to M positions)
  3. log_softmax over V
  4. per-slot loss: -log p(label)
  5. loss = sum(weights * per-slot loss) / (sum(weights) + MLM_LOSS_EPSILON)
`get_next_sentence_output`: log_softmax of the [B, 2] NSP logits, then the batch mean of
-log p(label) (label 0: B follows A, 1: B is random). The pre-training loss is their sum.

ELECTRA's discriminator (google-research/electra run_pretraining.py `_get_discriminator_output`),
`replaced_token_loss`: on the replaced-token-detection logits [B, S] (one per token) and the
labels [B, S] (1 where the generator's sample replaced the token, 0 where the token is the
original: the sample may equal it), with the input mask as weights:
  1. per token: sigmoid cross-entropy with logits (`tf.nn.sigmoid_cross_entropy_with_logits`:
     max(x, 0) - x z + log(1 + exp(-|x|))), times the weight
  2. loss = sum(weighted losses) / (RTD_LOSS_EPSILON + sum(weights)); per example the same per row
transformers' `ElectraForPreTraining(labels=...)` takes the mean BCE over the positions whose
attention mask is 1 (all positions without a mask): the same value but for the epsilon, which it
does not add (a relative difference below RTD_LOSS_EPSILON / tokens).

`torch_bert` mirrors each function here with torch operations, step for step. Inputs arrive
checked (`inputs.check_slot_inputs`).
"""

from __future__ import annotations


import numpy as np

from ..errors import BadInput
from ..records import record
from .numerics import MLM_LOSS_EPSILON

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

#: google-research/electra `_get_discriminator_output`: `loss = tf.reduce_sum(losses) /
#: (1e-6 + tf.reduce_sum(weights))` (its per-example loss too): a batch of padding alone has
#: loss 0 rather than 0/0. (Not BERT's 1e-5: MLM_LOSS_EPSILON.)
RTD_LOSS_EPSILON = 1e-6


@record
class PretrainingLoss:
    """Losses of one batch, as scalars of the runtime's array type (float32 by default).

    Attributes:
      mlm: the masked-LM loss (step 5 above).
      nsp: the next-sentence loss (ALBERT's sentence-order loss for a model with SOP instead of
        NSP: the same loss on its own head), or None when no labels were given.
      total: mlm + nsp (mlm alone without NSP labels), as `total_loss` in run_pretraining.py.
      mlm_per_slot: [B, M] -log p(label) at every prediction slot, padding slots included
        (their weight, not this value, keeps them out of the loss).
    """

    mlm: Any
    nsp: Any | None
    total: Any
    mlm_per_slot: Any


def gather_positions(sequence: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Step 1, run_pretraining.py `gather_indexes`: [B, S, H] at positions [B, M] -> [B, M, H]."""
    batch = np.arange(sequence.shape[0])[:, None]  # [B, 1]
    return sequence[batch, positions]


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Step 3, `tf.nn.log_softmax` over the last axis: logits - max - log(sum(exp(logits - max)))."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    shifted -= np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return shifted


def masked_lm_loss(logits: np.ndarray, label_ids: np.ndarray, label_weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Steps 3-5 on the head's logits [B, M, V]: (loss scalar, per-slot loss [B, M]).

    The label's log-probability is picked by index, which equals Google's
    `reduce_sum(log_probs * one_hot(label_ids))` exactly for finite log-probabilities.
    """
    log_probs = log_softmax(logits)  # [B, M, V]
    per_slot = -np.take_along_axis(log_probs, label_ids[..., None], axis=-1)[..., 0]  # [B, M]
    numerator = np.sum(label_weights * per_slot)
    denominator = np.sum(label_weights) + np.float32(MLM_LOSS_EPSILON)
    return (numerator / denominator).astype(logits.dtype), per_slot


def next_sentence_loss(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """run_pretraining.py `get_next_sentence_output` on the NSP logits [B, 2]: the batch mean of
    -log p(label), a scalar."""
    log_probs = log_softmax(logits)  # [B, 2]
    per_example = -np.take_along_axis(log_probs, labels[:, None], axis=-1)[:, 0]  # [B]
    return per_example.mean(dtype=logits.dtype)


@record
class ReplacedTokenLoss:
    """ELECTRA's discriminator loss on one batch, in the runtime's array type (float32).

    Attributes:
      loss: the batch loss (step 2 of `replaced_token_loss`), a scalar.
      per_example: [B] each sequence's weighted mean, as Google's `per_example_loss`.
      per_token: [B, S] the sigmoid cross-entropy at every token, padding included (its weight,
        not this value, keeps it out of the loss).
    """

    loss: Any
    per_example: Any
    per_token: Any


def check_replaced_labels(batch: int, seq_len: int, labels) -> np.ndarray:
    """`labels` as an int64 [B, S] array of 0 (original token) and 1 (replaced), else BadInput."""
    array = np.asarray(labels)
    if array.dtype.kind not in "biu":
        raise BadInput(f"replaced-token labels have dtype {array.dtype}, expected integers 0 (original) "
                       f"and 1 (replaced)")
    if array.shape != (batch, seq_len):
        raise BadInput(f"replaced-token labels have shape {list(array.shape)}, expected [B={batch}, S={seq_len}] "
                       f"like input_ids")
    if array.size and not np.isin(array, (0, 1)).all():
        raise BadInput("replaced-token labels must hold only 0 (original token) and 1 (replaced)")
    return array.astype(np.int64)


def sigmoid_cross_entropy(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """`tf.nn.sigmoid_cross_entropy_with_logits`, elementwise: max(x, 0) - x z + log(1 + exp(-|x|))."""
    return np.maximum(logits, 0) - logits * labels + np.log1p(np.exp(-np.abs(logits)))


def replaced_token_loss(logits: np.ndarray, labels: np.ndarray, weights: np.ndarray) -> ReplacedTokenLoss:
    """`_get_discriminator_output` on RTD logits [B, S], 0/1 labels [B, S] and weights [B, S]
    (the input mask as float: 1 a token, 0 padding)."""
    labels = labels.astype(logits.dtype)
    weights = weights.astype(logits.dtype)
    per_token = sigmoid_cross_entropy(logits, labels)  # [B, S]
    weighted = per_token * weights
    epsilon = logits.dtype.type(RTD_LOSS_EPSILON)
    per_example = weighted.sum(axis=-1) / (epsilon + weights.sum(axis=-1))  # [B]
    loss = weighted.sum() / (epsilon + weights.sum())
    return ReplacedTokenLoss(loss=loss.astype(logits.dtype), per_example=per_example, per_token=per_token)
