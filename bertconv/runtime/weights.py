"""The canonical tree's tensors as the arrays a runtime computes with.

A runtime needs every encoder parameter (with the embedding projection E -> H where the config
has one), and each head (pooler, MLM, NSP, SOP, RTD) either whole or not at all. `plan` checks that against the tree and its config (names, shapes, dtypes) before any tensor
data is read; `load` then hands exactly the tensors the plan names, one at a time, to a
conversion the runtime chooses (`float32_values` for NumPy; torch_bert has its own).

Weights are mapped, not copied, where the layout allows: `float32_values` uses a float32 file's
memory maps as they are (a Hugging Face kernel, stored [out, in], as the transposed view of its
map), so the NumPy runtime's weights are the page cache's pages, shared and read when touched.

Tying is decided here, once: the MLM decoder matrix [V, E] is the word-embedding table unless the
tree holds an untied `mlm.decoder` (`ParameterTree.has_untied_decoder`). `WeightPlan.decoder`
names the tensor to use, so a tied table is read once and handed to the head by name, visibly.
A decoder stored as a copy of a tied table is not read at all; `bertconv verify` is where a copy
that differs from the table is reported.
"""

from __future__ import annotations

from typing import Callable, TypeVar

import numpy as np

from ..config import Heads
from ..dtypes import FLOAT32, DType, as_float32
from ..errors import BadInput, CheckFailed
from ..records import record
from ..tensor import LazyTensor
from ..tree import ParameterTree, canonical_names, role_of

T = TypeVar("T")

#: The word-embedding table, which is also the MLM decoder of a tied model.
WORD_EMBEDDINGS = "embeddings.word"
#: A stored decoder matrix, used only when it is a parameter of its own (untied).
UNTIED_DECODER = "mlm.decoder"
#: The bias of the MLM logits, and an untied decoder's own bias that replaces it where stored.
OUTPUT_BIAS = "mlm.output_bias"
UNTIED_DECODER_BIAS = "mlm.decoder_bias"

#: The heads a runtime can run, in model order; each is present whole or absent.
HEAD_NAMES = ("pooler", "mlm", "nsp", "sop", "rtd")
#: Heads that read the pooled output.
POOLED_HEADS = ("nsp", "sop")
#: What each head is, for messages.
HEAD_DESCRIPTIONS = {
    "pooler": "pooler (the tanh dense layer on [CLS])",
    "mlm": "MLM head (transform dense, its LayerNorm, output bias)",
    "nsp": "NSP head (the next-sentence classifier)",
    "sop": "SOP head (ALBERT's sentence-order classifier)",
    "rtd": "replaced-token-detection head (ELECTRA's discriminator: dense, then one logit per token)",
}


@record
class WeightPlan:
    """What a runtime reads from a tree, checked against its config.

    Attributes:
      names: every canonical name to read, in model order.
      heads: the heads present (each complete); `heads.untied_decoder` as in the tree.
      decoder: the canonical name of the MLM decoder matrix [V, E]: "embeddings.word" (tied) or
        "mlm.decoder" (untied); None without an MLM head.
      decoder_bias: the canonical name of the bias added to the MLM logits [V]: the output bias,
        or an untied decoder's own bias where the file stores one (transformers applies that one).
    """

    names: tuple[str, ...]
    heads: Heads
    decoder: str | None
    decoder_bias: str | None


def plan(tree: ParameterTree) -> WeightPlan:
    """Check that `tree` can be run and say which tensors to read.

    Raises BadInput for an impossible config, a missing encoder tensor, a shape that disagrees
    with the config, a non-float tensor, or a conditional LayerNorm (it needs a condition input
    the runtimes do not take); CheckFailed for a head that is only partly present (a readable
    checkpoint that lost part of a head). Every missing tensor is named at once.
    """
    config = tree.config
    problems = config.problems()
    if problems:
        raise BadInput(f"{tree.path}: cannot run a model with this config: {'; '.join(problems)}")
    absent = [why for why in (tree.missing_untied_decoder(), tree.missing_condition()) if why]
    if absent:
        raise BadInput(f"{tree.path}: cannot run: {'; '.join(absent)}")
    if tree.conditional:
        raise BadInput(f"{tree.path}: has conditional LayerNorm (bert4keras layer_norm_cond), which needs a "
                       f"condition input; the runtimes run plain BERT only")

    untied, untied_bias = tree.has_untied_decoder, tree.has_untied_decoder_bias
    full = canonical_names(config, Heads(**{head: True for head in HEAD_NAMES}, untied_decoder=untied,
                                         untied_decoder_bias=untied_bias))
    by_head: dict[str | None, list[str]] = {None: [], **{head: [] for head in HEAD_NAMES}}
    for name in full:
        by_head[role_of(name).head].append(name)

    missing_encoder = [name for name in by_head[None] if name not in tree]
    if missing_encoder:
        raise BadInput(f"{tree.path}: the encoder is incomplete, missing {', '.join(missing_encoder)}")
    present = {}
    for head in HEAD_NAMES:
        missing = [name for name in by_head[head] if name not in tree]
        if missing and len(missing) < len(by_head[head]):
            raise CheckFailed(f"{tree.path}: the {HEAD_DESCRIPTIONS[head]} is partial, missing "
                              f"{', '.join(missing)}; a runtime cannot run part of a head")
        present[head] = not missing
    for head in POOLED_HEADS:
        if present[head] and not present["pooler"]:
            raise BadInput(f"{tree.path}: has an {head.upper()} head but no pooler, whose output the "
                           f"{head.upper()} head reads")

    names = [name for name in full if role_of(name).head is None or present[role_of(name).head]]
    for name in names:
        _check_tensor(tree, name)
    heads = Heads(**present, untied_decoder=untied, untied_decoder_bias=untied_bias)
    decoder = (UNTIED_DECODER if untied else WORD_EMBEDDINGS) if present["mlm"] else None
    decoder_bias = (UNTIED_DECODER_BIAS if untied_bias else OUTPUT_BIAS) if present["mlm"] else None
    return WeightPlan(tuple(names), heads, decoder, decoder_bias)


def _check_tensor(tree: ParameterTree, name: str) -> None:
    param = tree[name]
    expected = role_of(name).expected_shape(tree.config)
    actual = tuple(param.tensor.shape)
    if actual != expected:
        letters = "x".join(str(d) for d in role_of(name).shape)
        raise BadInput(f"{param.file}: tensor {name} ({param.source}) has shape {list(actual)}, but the config "
                       f"makes it {list(expected)} ({letters}); pass the right --config")
    if not param.tensor.dtype.is_float:
        raise BadInput(f"{param.file}: tensor {name} ({param.source}) has dtype {param.tensor.dtype}, "
                       f"expected a floating-point type")


def sentence_head(weight_plan: WeightPlan) -> str:
    """The head a sentence-level loss runs on the pooled output: NSP, or ALBERT's SOP (the same
    shape and loss; its labels say whether the two segments were swapped) when there is no NSP."""
    return "sop" if weight_plan.heads.sop and not weight_plan.heads.nsp else "nsp"


def require_head(weight_plan: WeightPlan, head: str, tree_path, needed_for: str) -> None:
    """Raise CheckFailed unless the plan has `head` (one of `HEAD_NAMES`)."""
    if not getattr(weight_plan.heads, head):
        raise CheckFailed(f"{tree_path}: has no {HEAD_DESCRIPTIONS[head]}, which {needed_for} needs; "
                          f"this checkpoint does not hold it (encoder-only, or the head was dropped "
                          f"when it was saved)")


def load(tree: ParameterTree, weight_plan: WeightPlan, convert: Callable[[LazyTensor], T],
         on_tensor: Callable[[int], None] | None = None) -> dict[str, T]:
    """canonical name -> `convert(its lazy tensor)`, for every name of the plan.

    Tensors are converted one at a time, so peak memory is what the conversions keep plus one
    stored tensor. `on_tensor(nbytes)` is called after each one (progress).
    """
    out = {}
    for name in weight_plan.names:
        out[name] = convert(tree[name].tensor)
        if on_tensor:
            on_tensor(tree[name].tensor.nbytes)
    return out


def plan_nbytes(tree: ParameterTree, weight_plan: WeightPlan) -> int:
    """The stored bytes `load` reads for `weight_plan`."""
    return sum(tree[name].tensor.nbytes for name in weight_plan.names)


def float32_values(tensor: LazyTensor) -> np.ndarray:
    """The tensor's values as the float32 array the NumPy runtime computes with, shared with the
    file where the layout allows, copied where it does not.

    Shared: a float32 tensor whose values (`read_view`) are a read-only, aligned, native-endian
    array laid out row- or column-major, such as a memory map of the file, or the transposed view
    of one for a kernel stored [out, in]; NumPy hands either layout to BLAS without copying.
    Copied (`to_float32`, C-contiguous and owned): float16 and bfloat16 (widened), float64
    (rounded), a big-endian, misaligned or strided array (which BLAS would copy on every product),
    and a writable array (in memory, which its owner could change under the model).
    """
    if tensor.dtype is FLOAT32:
        values = np.asarray(tensor.read_view())  # a plain ndarray view: not a np.memmap in every result
        if _shareable(values):
            return values
    return to_float32(tensor.read(), tensor.dtype)


def _shareable(values: np.ndarray) -> bool:
    flags = values.flags
    return (values.dtype == np.float32 and not flags.writeable and flags.aligned
            and (flags.c_contiguous or flags.f_contiguous))


def to_float32(values: np.ndarray, dtype: DType) -> np.ndarray:
    """A C-contiguous float32 copy, owned (not a view of the file): float16 and bfloat16 are
    widened exactly, float64 is rounded."""
    return np.array(as_float32(values, dtype), dtype=np.float32, order="C")
