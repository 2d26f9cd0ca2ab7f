"""fill-mask: the MLM head's most probable tokens, with probabilities, for every mask of each text.

Shape legend: B texts in a batch, S the longest of them in tokens, M the most masks in one of
them, V vocab size.

Each text is encoded with its tokenizer's special tokens ([CLS] text [SEP], or <s> text </s> for
RoBERTa). Texts run in batches: padded on the right to the batch's longest, the padding hidden
by the attention mask (and, with RoBERTa's position offset, given the padding id, so the real
tokens keep their positions): a text's predictions do not depend on the texts batched with it.
The head runs at the mask positions only (`masked_lm_logits`), and each position's logits [V] go
through a softmax over the whole vocab, as transformers' fill-mask pipeline does.
"""

from __future__ import annotations


import numpy as np

from .. import families
from ..errors import BadInput
from ..records import record
from .tokenization.tokenizer import Encoding, Tokenizer

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

#: Texts run through the model at once.
BATCH_SIZE = 16


@record
class Prediction:
    """One candidate for a mask: its token (None for an id the tokenizer has no token for), id and
    probability."""

    token: str | None
    id: int
    prob: float

    def as_dict(self) -> dict:
        return {"token": self.token, "id": self.id, "prob": self.prob}


@record
class MaskPredictions:
    """The candidates for one mask, most probable first; `position` counts [CLS] as 0."""

    position: int
    predictions: list[Prediction]


def fill_mask(model: Any, tokenizer: Tokenizer, text: str, *, top_k: int = 5) -> list[MaskPredictions]:
    """The `top_k` predictions for every mask in `text`, in text order. Raises BadInput for a text
    without a mask, a text longer than the position table, or a vocabulary larger than the model's."""
    check_masked_lm(model.config, model.path)
    check_vocabulary(model, tokenizer)
    encoding = tokenizer.encode(text)
    check_text(model, tokenizer, text, encoding)
    return predict(model, tokenizer, [encoding], top_k=top_k)[0]


def check_masked_lm(config: Any, path: Any) -> None:
    """BadInput for a family whose tokenizer bertconv cannot reproduce (`Family.tokenizer_unsupported`),
    and for a causal model (`is_decoder`): its head predicts, at each position, the token
    after it from the tokens up to it, so at a mask it neither sees the words to the right nor
    predicts the masked token; its "fill" would be a confident answer to another question."""
    unsupported = families.of(config).tokenizer_unsupported
    if unsupported:
        raise BadInput(f"{path}: fill-mask needs the text split into ids as the model's own tokenizer splits it, "
                       f"and {unsupported}; no prediction was made")
    if config.is_decoder:
        raise BadInput(f"{path}: is a causal language model (is_decoder: true): its head predicts the next token "
                       f"from the tokens before it, not a masked token from both sides; fill-mask needs a masked "
                       f"LM")


def check_vocabulary(model: Any, tokenizer: Tokenizer) -> None:
    """BadInput unless the tokenizer's ids are rows of the model's embeddings."""
    if len(tokenizer.tokens) > model.config.vocab_size:
        raise BadInput(f"{tokenizer.source}: the tokenizer has {len(tokenizer.tokens)} tokens but the model's "
                       f"embeddings have {model.config.vocab_size} rows: the tokenizer belongs to another model")


def vocabulary_shortfall(model: Any, tokenizer: Tokenizer) -> str | None:
    """A sentence when the model's embeddings have rows no token of the tokenizer names (their
    predictions have no token to show), else None. Not refused: vocabularies padded to a multiple
    of 8 or 64 rows for speed (Megatron's BERT, 30,592 rows for 30,522 tokens) leave such rows on
    purpose; but a vocabulary of another model does too."""
    tokens, rows = len(tokenizer.tokens), model.config.vocab_size
    if tokens >= rows:
        return None
    return (f"{tokenizer.source}: the tokenizer has {tokens} tokens but the model's embeddings have {rows} rows: "
            f"rows {tokens}..{rows - 1} have no token (shown as \"not in the vocabulary\"); if most predictions are "
            f"such rows, the tokenizer belongs to another model")


def check_text(model: Any, tokenizer: Tokenizer, text: str, encoding: Encoding) -> None:
    """BadInput unless the encoded text has a mask and fits the model's position table."""
    if tokenizer.mask_id not in encoding.ids:
        raise BadInput(f"the text has no {tokenizer.mask_token} to fill: {text!r}")
    config = model.config
    usable = config.max_position_embeddings - config.position_offset
    if len(encoding.ids) > usable:
        raise BadInput(f"the text is {len(encoding.ids)} tokens with its special tokens, but the model takes at "
                       f"most {usable}: {text!r}")


def predict(model: Any, tokenizer: Tokenizer, encodings: list[Encoding], *, top_k: int = 5,
            batch_size: int = BATCH_SIZE) -> list[list[MaskPredictions]]:
    """The predictions for each encoding (checked with `check_text`), run `batch_size` at a time."""
    results: list[list[MaskPredictions]] = []
    for start in range(0, len(encodings), batch_size):
        results.extend(_predict_batch(model, tokenizer, encodings[start:start + batch_size], top_k))
    return results


def padding_id(model: Any, tokenizer: Tokenizer) -> int:
    """The id padding takes: with a position offset (RoBERTa), the id the positions count as
    padding (offset - 1); else the tokenizer's pad token (its value is hidden by the mask)."""
    if model.config.position_offset:
        return model.config.position_offset - 1
    return tokenizer.pad_id if tokenizer.pad_id is not None else 0


def _predict_batch(model: Any, tokenizer: Tokenizer, encodings: list[Encoding], top_k: int) -> list[list[MaskPredictions]]:
    length = max(len(e.ids) for e in encodings)
    ids = np.full((len(encodings), length), padding_id(model, tokenizer), dtype=np.int64)  # [B, S]
    type_ids = np.zeros((len(encodings), length), dtype=np.int64)  # [B, S]
    attention = np.zeros((len(encodings), length), dtype=np.int64)  # [B, S]
    # By id: a tokenizer.json's token text may carry the space its mask token absorbs (" <mask>").
    positions = [[i for i, token_id in enumerate(e.ids) if token_id == tokenizer.mask_id] for e in encodings]
    slots = max(len(p) for p in positions)
    gather = np.zeros((len(encodings), slots), dtype=np.int64)  # [B, M]; unused slots read [CLS]
    for row, (encoding, mine) in enumerate(zip(encodings, positions)):
        ids[row, :len(encoding.ids)] = encoding.ids
        type_ids[row, :len(encoding.ids)] = encoding.type_ids
        attention[row, :len(encoding.ids)] = 1
        gather[row, :len(mine)] = mine
    logits = _as_float64(model.masked_lm_logits(ids, type_ids, attention, gather))  # [B, M, V]
    shifted = logits - logits.max(axis=-1, keepdims=True)
    probs = np.exp(shifted)
    probs /= probs.sum(axis=-1, keepdims=True)  # [B, M, V]
    results = []
    for row, mine in enumerate(positions):
        per_text = []
        for slot, position in enumerate(mine):
            best = np.argsort(-probs[row, slot], kind="stable")[:top_k]
            per_text.append(MaskPredictions(position, [
                Prediction(tokenizer.token(int(i)), int(i), float(probs[row, slot, i])) for i in best]))
        results.append(per_text)
    return results


def _as_float64(values: Any) -> np.ndarray:
    """A NumPy array or a torch tensor (any float dtype, any device) as a float64 array."""
    if hasattr(values, "detach"):
        values = values.detach().float().cpu().numpy()
    return np.asarray(values, dtype=np.float64)
