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


from ..lazy import lazy_attribute

# Bound here, not on first use: `fill_mask` is also the name of a module of this package, which
# an import of `bertconv.runtime.fill_mask` would otherwise leave in its place.
from .fill_mask import MaskPredictions, Prediction, fill_mask

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from .loss import PretrainingLoss
    from .numerics import Numerics
    from .numpy_bert import BertOutput, NumpyBert
    from .tokenization.select import open_tokenizer
    from .tokenization.tokenizer import Encoding, Tokenizer
    from .torch_bert import TorchBert

#: Where each name lives; imported when first asked for. A format module that needs one runtime
#: module (a bert4keras writer, `sinusoids`) then pays for that module, not for every runtime and
#: tokenizer (10 ms of a conversion's start-up), and torch is imported only for `TorchBert`.
_HOME = {
    "PretrainingLoss": "loss", "Numerics": "numerics", "BertOutput": "numpy_bert", "NumpyBert": "numpy_bert",
    "open_tokenizer": "tokenization.select", "Encoding": "tokenization.tokenizer",
    "Tokenizer": "tokenization.tokenizer", "TorchBert": "torch_bert",
}

__all__ = [
    "BertOutput", "Encoding", "MaskPredictions", "Numerics", "NumpyBert", "Prediction", "PretrainingLoss",
    "TorchBert", "Tokenizer", "fill_mask", "open_tokenizer",
]


def __getattr__(name: str):
    return lazy_attribute(__name__, _HOME, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
