"""Do the copies of one model that a directory holds in several formats agree?

A Hugging Face snapshot often holds the same model as `model.safetensors`, `pytorch_model.bin`,
`tf_model.h5` and `flax_model.msgpack`; bertconv reads the one transformers loads first
(`formats.preferred`) and `verify` holds each other copy against it in canonical space: by
default a stat and header pass (every data file whole, the same canonical names, each with the
same shape), with `deep` the values too, bit for bit after widening (`diff.diff`), so a copy saved
from other weights, or re-saved in a lower precision, is named.
"""

from __future__ import annotations

from collections.abc import Callable

from ..tree import ParameterTree, model_order_key
from .files import data_file_problems


def header_differences(read: ParameterTree, copy: ParameterTree) -> list[str]:
    """Canonical names one side lacks, and shapes that differ (a tied copy one side does not
    store stands for the tensor it copies, as in `diff`)."""
    from .diff import stand_in  # diff imports NumPy, which plain verify does without

    differences = []
    for name in sorted(set(read.params) | set(copy.params), key=model_order_key):
        a, b = stand_in(read, name), stand_in(copy, name)
        if b is None:
            differences.append(f"{name} ({a.label}) is only in the file read")
        elif a is None:
            differences.append(f"{name} ({b.label}) is only in the copy")
        elif tuple(a.param.tensor.shape) != tuple(b.param.tensor.shape):
            differences.append(f"{name}: shape {list(a.param.tensor.shape)} in the file read, "
                               f"{list(b.param.tensor.shape)} in the copy ({b.label})")
    return differences


def compare_copy(read: ParameterTree, copy: ParameterTree, *, deep: bool,
                 on_tensor: Callable[[int], None] | None = None) -> dict:
    """{path, format, compared ("headers" or "values"), agree, problems} for one copy; each
    problem names the copy and the file read."""
    found = data_file_problems(copy)
    compared = "headers"
    if not found:
        found = header_differences(read, copy)
    if deep and not found:
        from .diff import diff

        compared = "values"
        found = diff(read, copy, on_tensor=on_tensor)["problems"]  # A: the file read, B: the copy
    problems = [f"the copy {copy.path.name} disagrees with {read.path.name}, the file read (A: {read.path.name}, "
                f"B: {copy.path.name}): {difference}" for difference in found]
    return {"path": str(copy.path), "format": copy.format, "compared": compared, "agree": not problems,
            "problems": problems}


def unreadable_copy(path, message: str) -> dict:
    """The entry of a copy that cannot be read: a problem of its own."""
    return {"path": str(path), "format": None, "compared": "headers", "agree": False,
            "problems": [f"the copy {path.name} cannot be read: {message}"]}
