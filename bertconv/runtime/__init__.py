"""Runtimes: BERT with its pre-training heads, run directly on a canonical `ParameterTree`.

    from bertconv import load
    from bertconv.runtime import NumpyBert
    model = NumpyBert(load("bert_model.ckpt"))        # any format bertconv reads
    out = model(input_ids, token_type_ids, attention_mask)

`NumpyBert` needs nothing beyond NumPy; `TorchBert` (same API, torch tensors) is imported only
when first asked for, since torch is an optional extra. A runtime sees only the tree: it never
imports a format module. The numeric conventions are explicit (`Numerics`), and the masked-LM
loss is Google's (`loss`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .fill_mask import MaskPredictions, Prediction, fill_mask
from .loss import PretrainingLoss
from .numerics import Numerics
from .numpy_bert import BertOutput, NumpyBert
from .tokenization.select import open_tokenizer
from .tokenization.tokenizer import Encoding, Tokenizer

if TYPE_CHECKING:
    from .torch_bert import TorchBert

__all__ = [
    "BertOutput", "Encoding", "MaskPredictions", "Numerics", "NumpyBert", "Prediction", "PretrainingLoss",
    "TorchBert", "Tokenizer", "fill_mask", "open_tokenizer",
]


def __getattr__(name: str):
    if name == "TorchBert":  # torch is imported on first use only
        from .torch_bert import TorchBert
        return TorchBert
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
