"""Modules imported when first used, so that a command pays only for what it touches.

`audit` of a safetensors file reads JSON headers: it should not wait ~0.1 s for NumPy, and no
command on a non-HDF5 file should wait for h5py. A module written

    if TYPE_CHECKING:
        import numpy as np
    else:
        np = lazy_module("numpy")

reads as usual (`np.empty`, `isinstance(x, h5py.Group)`); the real import happens on the first
attribute access, and every later access is a plain attribute read.

A package exports names from its modules the same way: its `__getattr__` (PEP 562) returns
`lazy_attribute(__name__, HOMES, name)`, `HOMES` mapping each name to the module that defines it.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

#: typing.TYPE_CHECKING without importing typing (2 ms), as in bertconv/__init__.py.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any


class _LazyModule:
    """Stands for module `name` until an attribute is asked for, then imports it and takes on
    its namespace."""

    def __init__(self, name: str):
        self.__dict__["_lazy_name"] = name

    def __getattr__(self, attribute: str):  # only called for what the instance does not hold yet
        module: ModuleType = importlib.import_module(self.__dict__["_lazy_name"])
        self.__dict__.update(vars(module))
        return getattr(module, attribute)

    def __repr__(self) -> str:
        return f"<lazy module {self.__dict__['_lazy_name']!r}>"


def lazy_module(name: str) -> ModuleType:
    """Module `name`, imported on first attribute access."""
    return _LazyModule(name)  # type: ignore[return-value]


def module_name(module: ModuleType) -> str:
    """The dotted name of `module`, without importing it when it is lazy."""
    return module.__dict__["_lazy_name"] if isinstance(module, _LazyModule) else module.__name__


def pending(module: object) -> bool:
    """True for a lazy module whose import has not happened yet (by it or by anyone else)."""
    return isinstance(module, _LazyModule) and module.__dict__["_lazy_name"] not in sys.modules


def lazy_attribute(package: str, homes: Mapping[str, str], name: str) -> Any:
    """The value of `package`'s exported `name`, imported from its module `homes[name]` (relative to
    `package`) on the first call; later calls find that module imported.

    Raises AttributeError, worded as for any module, for a name `homes` does not hold.
    """
    if name not in homes:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{package}.{homes[name]}"), name)
