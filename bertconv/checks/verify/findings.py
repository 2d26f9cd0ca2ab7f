"""What verify's checks share: the tensors they name, the verdicts' words, the findings they
add to, and the reader through which every check reads a tensor once."""

from __future__ import annotations

from collections.abc import Callable

from ...errors import BadInput
from ...lazy import lazy_module
from ...records import field, record
from ...tensor import LazyTensor
from ...tree import Parameter, ParameterTree

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import TypeVar

    import numpy as np

    T = TypeVar("T")
else:  # imported where tensor values are compared or scanned: plain verify reads only bytes
    np = lazy_module("numpy")


WORD = "embeddings.word"
DECODER = "mlm.decoder"
OUTPUT_BIAS = "mlm.output_bias"
DECODER_BIAS = "mlm.decoder_bias"


COMPLETE, PARTIAL, MISSING = "complete", "partial", "missing"
TIED, UNTIED, NOT_APPLICABLE = "tied", "untied", "n/a"


@record(frozen=False)
class Findings:
    """What the checks found: failures (`problems`) and observations that pass (`notes`)."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def label(param: Parameter) -> str:
    """A tensor as messages name it: its name in the file, then its canonical name."""
    return f"{param.source} ({param.name})"


class TensorReader:
    """Reads tensors for the checks; a tensor that cannot be read becomes a problem naming it.

    An array read with `keep=True` is held until read again, so that the tying checks and the
    deep pass share one read of each tensor (a TF tensor's crc32c is computed on every read).
    """

    def __init__(self, tree: ParameterTree, findings: Findings):
        self.tree = tree
        self.findings = findings
        self._kept: dict[str, np.ndarray] = {}
        self._failed: set[str] = set()

    @property
    def failed(self) -> bool:
        """Whether some tensor could not be read (each is a problem already)."""
        return bool(self._failed)

    def read(self, name: str, *, keep: bool = False) -> np.ndarray | None:
        """The values of parameter `name` in its storage dtype, or None when unreadable."""
        if name in self._kept:
            return self._kept[name] if keep else self._kept.pop(name)
        array = self._reading(name, lambda tensor: tensor.read())
        if keep and array is not None:
            self._kept[name] = array
        return array

    def read_bytes(self, name: str, *, keep: bool = False) -> bytes | None:
        """The stored bytes of parameter `name`, or None when unreadable: with `keep`, those of
        the array `read(name, keep=True)` holds for the deep pass; else `LazyTensor.read_bytes`
        (without NumPy where they lie as stored)."""
        if keep or name in self._kept:
            array = self.read(name, keep=True)
            return None if array is None else array.tobytes()
        return self._reading(name, lambda tensor: tensor.read_bytes())

    def _reading(self, name: str, read: Callable[[LazyTensor], T]) -> T | None:
        """`read(tensor of name)`, or None with a problem naming the tensor when it cannot be read."""
        if name in self._failed:
            return None
        param = self.tree[name]
        try:
            return read(param.tensor)
        except (BadInput, OSError) as exc:
            self._failed.add(name)
            self.findings.problems.append(f"{label(param)}: cannot be read: {exc}")
            return None
