"""fill-mask: the MLM head's most probable tokens, with probabilities, for every [MASK] of a text.

Shape legend: V vocab size, M the number of [MASK] tokens in the text.

The text is encoded as [CLS] text [SEP] (or as a tokenizer.json's post-processor frames it:
<s> text </s> for RoBERTa); the head runs at the mask positions only
(`masked_lm_logits`), and each position's logits [V] go through a softmax over the whole vocab,
as transformers' fill-mask pipeline does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import BadInput
from .tokenizer import WordPieceTokenizer


@dataclass(frozen=True)
class Prediction:
    """One candidate for a [MASK]: its token (None for an id past the end of vocab.txt), id and
    probability."""

    token: str | None
    id: int
    prob: float

    def as_dict(self) -> dict:
        return {"token": self.token, "id": self.id, "prob": self.prob}


@dataclass(frozen=True)
class MaskPredictions:
    """The candidates for one [MASK], most probable first; `position` counts [CLS] as 0."""

    position: int
    predictions: list[Prediction]


def fill_mask(model: Any, tokenizer: WordPieceTokenizer, text: str, *, top_k: int = 5) -> list[MaskPredictions]:
    """The `top_k` predictions for every mask token in `text`, in text order.

    `model` is a NumpyBert or a TorchBert with an MLM head; `tokenizer` a WordPieceTokenizer or
    a `tokenizer_json.JsonTokenizer` (anything with `vocab`, `tokens`, `mask_token`, `encode`,
    `token`). Raises BadInput for a text without a mask, a text longer than the position table,
    or a vocabulary larger than the model's.
    """
    config = model.config
    mask = tokenizer.mask_token
    if len(tokenizer.tokens) > config.vocab_size:
        raise BadInput(f"the vocabulary has {len(tokenizer.tokens)} tokens but the model's embeddings have "
                       f"{config.vocab_size} rows: the vocabulary belongs to another model")
    if mask not in tokenizer.vocab:
        raise BadInput(f"the vocabulary has no {mask} token")
    encoding = tokenizer.encode(text)
    # By id: a tokenizer.json's token text may carry the space its mask token absorbs (" <mask>").
    positions = [i for i, token_id in enumerate(encoding.ids) if token_id == tokenizer.vocab[mask]]
    if not positions:
        raise BadInput(f"the text has no {mask} to fill: {text!r}")
    usable = config.max_position_embeddings - config.position_offset
    if len(encoding.ids) > usable:
        raise BadInput(f"the text is {len(encoding.ids)} tokens with its special tokens, but the model takes at most "
                       f"{usable}")
    logits = model.masked_lm_logits([encoding.ids], [encoding.type_ids], None, [positions])  # [1, M, V]
    logits = _as_float64(logits)[0]  # [M, V]
    shifted = logits - logits.max(axis=-1, keepdims=True)
    probs = np.exp(shifted)
    probs /= probs.sum(axis=-1, keepdims=True)  # [M, V]
    results = []
    for position, row in zip(positions, probs):
        best = np.argsort(-row, kind="stable")[:top_k]
        results.append(MaskPredictions(position, [
            Prediction(tokenizer.token(int(i)), int(i), float(row[i])) for i in best
        ]))
    return results


def _as_float64(values: Any) -> np.ndarray:
    """A NumPy array or a torch tensor (any float dtype, any device) as a float64 array."""
    if hasattr(values, "detach"):
        values = values.detach().float().cpu().numpy()
    return np.asarray(values, dtype=np.float64)
