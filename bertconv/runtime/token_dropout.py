"""ESM's token-dropout rescaling at inference (`config.token_dropout`; transformers `EsmEmbeddings`),
decided once for both runtimes, in NumPy.

Shape legend: B batch, S sequence length.

ESM was trained with masked tokens' word vectors zeroed (input dropout of the masked positions),
15% of tokens masked and 80% of those replaced by <mask>. At inference the word vectors of
<mask> are zeroed and every vector of a sequence is multiplied by (1 - 0.15 * 0.8) / (1 - r),
r the sequence's <mask> tokens over its real tokens (the input mask's sum).
"""

from __future__ import annotations


import numpy as np

from ..config import BertConfig
from ..records import record

#: The ratio of replaced-by-<mask> tokens in every ESM training run (transformers hard-codes it).
MASK_RATIO_TRAIN = 0.15 * 0.8


@record
class TokenDropout:
    """What the embeddings do: `masked` bool [B, S, 1] zeroed, then x * `train` / `observed`."""

    masked: np.ndarray
    train: np.float32
    observed: np.ndarray  # float32 [B, 1, 1]: 1 - r


def token_dropout(config: BertConfig, input_ids: np.ndarray, attention_mask: np.ndarray) -> TokenDropout:
    """The rescaling of a batch of ids [B, S] with its input mask [B, S] (bool)."""
    masked = input_ids == config.mask_token_id
    # float32 count / float32 length, as torch divides the float count by the integer sum.
    ratio = masked.sum(-1).astype(np.float32) / attention_mask.sum(-1).astype(np.float32)
    return TokenDropout(masked[..., None], np.float32(1 - MASK_RATIO_TRAIN),
                        (np.float32(1) - ratio).astype(np.float32)[:, None, None])


def apply(x: np.ndarray, dropout: TokenDropout) -> np.ndarray:
    """The word vectors [B, S, E] rescaled (NumPy)."""
    return np.where(dropout.masked, np.float32(0), x) * dropout.train / dropout.observed
