"""The inputs both runtimes take, checked once against the config before any arithmetic.

Shape legend: B batch, S sequence length, M prediction slots per sequence.

Inputs may be anything `numpy.asarray` accepts (lists, NumPy arrays, CPU torch tensors). A bad
input raises BadInput naming it: a wrong shape or dtype, an id outside the vocab, a sequence
longer than the position table, a mask that is not 0/1.
"""

from __future__ import annotations


import numpy as np

from ..config import BertConfig
from ..errors import BadInput
from ..records import record

#: Next-sentence labels: 0 "B follows A", 1 "B is random" (google-research/bert
#: create_pretraining_data.py `is_random_next`).
NSP_CLASSES = 2


@record
class ModelInputs:
    """Ids and token types int64 [B, S]; attention mask bool [B, S] (True: a token, False: padding);
    the position-table row of each token int64 [B, S] (`position_ids`)."""

    input_ids: np.ndarray
    token_type_ids: np.ndarray
    attention_mask: np.ndarray
    position_ids: np.ndarray


@record
class SlotInputs:
    """Prediction slots: positions and label ids int64 [B, M], weights float32 [B, M] (0 for a
    padding slot), NSP labels int64 [B] or None."""

    positions: np.ndarray
    label_ids: np.ndarray
    label_weights: np.ndarray
    nsp_labels: np.ndarray | None


def check_model_inputs(config: BertConfig, input_ids, token_type_ids=None, attention_mask=None) -> ModelInputs:
    """Validate a batch of ids [B, S]; token types default to 0 (and must be 0 for a model with no
    token types), the mask to all ones."""
    ids = _integers("input_ids", input_ids)
    if ids.ndim != 2 or ids.shape[0] == 0 or ids.shape[1] == 0:
        raise BadInput(f"input_ids has shape {list(ids.shape)}, expected [B, S] with B, S >= 1")
    usable = config.max_position_embeddings - config.position_offset
    if ids.shape[1] > usable:
        offset = f" ({config.position_offset} of them before the first position)" if config.position_offset else ""
        raise BadInput(f"input_ids holds {ids.shape[1]} tokens per sequence, but the model's position table "
                       f"has {config.max_position_embeddings} rows{offset}: at most {usable} tokens")
    _in_range("input_ids", ids, config.vocab_size, "vocab_size")
    if token_type_ids is None:
        types = np.zeros_like(ids)
    else:
        types = _integers("token_type_ids", token_type_ids)
        _same_shape("token_type_ids", types, ids.shape)
        if config.type_vocab_size == 0:
            _no_token_types(types)
        else:
            _in_range("token_type_ids", types, config.type_vocab_size, "type_vocab_size")
    if attention_mask is None:
        mask = np.ones(ids.shape, dtype=bool)
    else:
        raw = np.asarray(attention_mask)
        _same_shape("attention_mask", raw, ids.shape)
        if not np.isin(raw, (0, 1)).all():
            raise BadInput("attention_mask must hold only 0 (padding) and 1 (token)")
        mask = raw.astype(bool)
    return ModelInputs(ids, types, mask, position_ids(config, ids))


def position_ids(config: BertConfig, input_ids: np.ndarray) -> np.ndarray:
    """The position-table row of every token [B, S] (int64).

    0, 1, ..., S-1 without a position offset. With one (RoBERTa: offset = pad id + 1), as fairseq's
    `make_positions` and transformers' `create_position_ids_from_input_ids` count: padding
    tokens take row `pad`, the others `pad` + their rank among the sequence's non-padding tokens.
    """
    if not config.position_offset:
        return np.tile(np.arange(input_ids.shape[1], dtype=np.int64), (input_ids.shape[0], 1))
    pad = config.position_offset - 1
    tokens = (input_ids != pad).astype(np.int64)
    return np.cumsum(tokens, axis=1) * tokens + pad


def check_positions(batch: int, seq_len: int, masked_lm_positions) -> np.ndarray:
    """Validate prediction-slot positions [B, M] for a batch of [B, S]; int64."""
    positions = _integers("masked_lm_positions", masked_lm_positions)
    if positions.ndim != 2 or positions.shape[0] != batch:
        raise BadInput(f"masked_lm_positions has shape {list(positions.shape)}, expected [B={batch}, M]")
    _in_range("masked_lm_positions", positions, seq_len, "the sequence length")
    return positions


def check_slot_inputs(batch: int, seq_len: int, vocab_size: int, masked_lm_positions, masked_lm_ids,
                      masked_lm_weights=None, next_sentence_labels=None) -> SlotInputs:
    """Validate the prediction-slot inputs of a [B, S] batch; weights default to all ones."""
    positions = check_positions(batch, seq_len, masked_lm_positions)
    label_ids = _integers("masked_lm_ids", masked_lm_ids)
    _same_shape("masked_lm_ids", label_ids, positions.shape)
    _in_range("masked_lm_ids", label_ids, vocab_size, "vocab_size")
    if masked_lm_weights is None:
        weights = np.ones(positions.shape, dtype=np.float32)
    else:
        weights = np.asarray(masked_lm_weights, dtype=np.float32)
        _same_shape("masked_lm_weights", weights, positions.shape)
        if not np.isfinite(weights).all() or (weights < 0).any():
            raise BadInput("masked_lm_weights must be finite and non-negative (1.0 a real slot, 0.0 padding)")
    labels = None
    if next_sentence_labels is not None:
        labels = _integers("next_sentence_labels", next_sentence_labels)
        _same_shape("next_sentence_labels", labels, (batch,))
        _in_range("next_sentence_labels", labels, NSP_CLASSES, "the NSP classes")
    return SlotInputs(positions, label_ids, weights, labels)


def _integers(name: str, values) -> np.ndarray:
    array = np.asarray(values)
    if array.dtype.kind not in "iu":
        raise BadInput(f"{name} has dtype {array.dtype}, expected integers")
    return array.astype(np.int64, copy=False)


def _same_shape(name: str, array: np.ndarray, shape: tuple[int, ...]) -> None:
    if array.shape != tuple(shape):
        raise BadInput(f"{name} has shape {list(array.shape)}, expected {list(shape)}")


def _no_token_types(types: np.ndarray) -> None:
    """A model without token types (type_vocab_size 0: fairseq's RoBERTa) takes all-zero ones
    (what a tokenizer gives a single segment), which select nothing; any other type is refused."""
    if types.any():
        raise BadInput(f"token_type_ids holds {int(types[types != 0][0])}, but the model has no token types "
                       f"(type_vocab_size 0): pass zeros or no token_type_ids")


def _in_range(name: str, values: np.ndarray, bound: int, what: str) -> None:
    if values.size == 0:
        return
    low, high = int(values.min()), int(values.max())
    if low < 0 or high >= bound:
        raise BadInput(f"{name} holds {low if low < 0 else high}, outside [0, {bound}) ({what})")
