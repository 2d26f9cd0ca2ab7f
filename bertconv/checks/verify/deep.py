"""`verify --deep`: every tensor read once, streaming in chunks, and its values judged."""

from __future__ import annotations

from pathlib import Path

from ...dtypes import DType, as_float32
from ...errors import bad_input
from ...lazy import lazy_module
from ...records import record
from ...tree import ParameterTree, role_of
from ..arrays import chunk_indices, format_value, global_position
from .findings import OUTPUT_BIAS, Findings, TensorReader, label

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    import numpy as np
else:  # imported where tensor values are compared or scanned: plain verify reads only bytes
    np = lazy_module("numpy")


#: Heads whose tensors must not be all zero (`deep`): a zero head was never trained or saved.
TRAINED_HEADS = ("pooler", "mlm", "nsp", "sop", "rtd")


@record(frozen=False)
class Scan:
    """What one streaming pass over a tensor found."""

    non_finite: int = 0
    first_non_finite: tuple[int, ...] | None = None
    first_non_finite_value: float = 0.0
    all_zero: bool = True


def scan(values: np.ndarray, dtype: DType) -> Scan:
    """Count non-finite values (floats only) and see whether every value is zero, chunk by chunk."""
    result = Scan()
    for index in chunk_indices(values):
        chunk = as_float32(np.asarray(values[index]), dtype)
        if result.all_zero and np.any(chunk != 0):
            result.all_zero = False
        if not dtype.is_float:
            continue
        bad = ~np.isfinite(chunk)
        count = int(np.count_nonzero(bad))
        if count and result.first_non_finite is None:
            flat = int(np.argmax(bad))
            result.first_non_finite = global_position(index, bad.shape, flat)
            result.first_non_finite_value = float(chunk.reshape(-1)[flat])
        result.non_finite += count
    return result


def _must_not_be_zero(name: str) -> str | None:
    """Why tensor `name` must not be all zero, or None when zero is no sign of trouble."""
    role = role_of(name)
    if role.conditional:
        return None  # bert4keras initializes conditional LayerNorm kernels to zero
    if role.template.endswith(".gamma"):
        return "a LayerNorm gamma of all zeros makes the layer's output constant"
    if role.head in TRAINED_HEADS:
        return f"an all-zero {role.head} tensor is a head that was never trained, or was zeroed when saved"
    return None


def _zero_is_only_a_note(name: str) -> bool:
    """A zero pooler or NSP *bias* is what an untrained but unused head looks like (models trained
    without NSP, such as sentence encoders, keep their initial zeros): worth saying, not failing.
    The MLM head is what verify vouches for, so any zero there fails."""
    role = role_of(name)
    return role.head in ("pooler", "nsp", "sop") and role.template.endswith("bias")


def require_data_files(tree: ParameterTree) -> None:
    """`BadInput` when a file the tree reads from is absent: there is no data to check."""
    absent = [str(f) for f in tree.files if not Path(f).exists()]
    if absent:
        raise bad_input(tree.path, f"a deep verify reads every tensor, but {', '.join(absent)} does not "
                                   f"exist; without --deep, verify reads only the headers")


def deep_pass(tree: ParameterTree, reader: TensorReader, findings: Findings, on_tensor=None) -> dict:
    """Read every tensor once and check its values; returns counts for the report.
    `on_tensor(nbytes)` is called after each tensor (progress)."""
    tensors = values = 0
    for param in tree:
        if on_tensor:
            on_tensor(param.tensor.nbytes)
        array = reader.read(param.name)
        if array is None:
            continue
        result = scan(array, param.tensor.dtype)
        tensors += 1
        values += param.numel
        if result.non_finite:
            findings.problems.append(
                f"{label(param)}: {result.non_finite} non-finite value(s), the first "
                f"{format_value(result.first_non_finite_value)} at {list(result.first_non_finite)}")
        reason = _must_not_be_zero(param.name)
        if reason and result.all_zero and param.numel:
            sentence = f"{label(param)}: every value is zero; {reason}"
            unused = param.name == OUTPUT_BIAS and tree.has_untied_decoder_bias
            if unused:
                sentence = (f"{label(param)}: every value is zero, and unused: the logits add the untied "
                            f"decoder's own bias (transformers 5 trains that one and leaves this one at zero)")
            (findings.notes if unused or _zero_is_only_a_note(param.name) else findings.problems).append(sentence)
    return {"tensors": tensors, "values": values}
