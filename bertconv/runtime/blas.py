"""How many threads NumPy's BLAS runs a matrix product on, for products too small to share.

OpenBLAS (the BLAS NumPy's wheels bundle) splits a product over all its threads whenever
M * N * K passes a small threshold, and waits for every part. A fill-mask text is a few rows
(tokens): a product of 8 rows by a 768 x 3072 kernel takes about 0.2 ms on one core, while on a
machine whose cores are busy a second thread may wait a whole scheduler time slice to run:
measured 10-40 ms per product on two busy cores, which turned a bert-base pass of 73 products
from 0.04 s into 1-2 s. `one_thread()` runs such products on the calling thread alone.

OpenBLAS is found among the shared libraries the process has loaded (Linux), else in the
directory where a NumPy wheel bundles it; with another BLAS (MKL, Accelerate) or none found,
`one_thread()` changes nothing.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

#: OpenBLAS's thread-count functions, as NumPy's scipy-openblas builds (prefix, 64-bit-integer
#: suffix) and plain builds name them: (set, get).
THREAD_FUNCTIONS = tuple(
    (f"{prefix}openblas_set_num_threads{suffix}", f"{prefix}openblas_get_num_threads{suffix}")
    for prefix in ("scipy_", "") for suffix in ("64_", "")
)
#: Where NumPy wheels bundle their libraries, beside the `numpy` package: Linux and Windows
#: (auditwheel, delvewheel), macOS (delocate).
WHEEL_LIBRARY_DIRS = ("numpy.libs", "numpy/.dylibs")


@contextmanager
def one_thread() -> Iterator[None]:
    """Run the block with NumPy's BLAS on one thread, then restore its thread count.

    The count is the process's: BLAS products other threads run meanwhile are single-threaded too.
    """
    controls = _openblas()
    before = controls[1]() if controls is not None else 1
    if before == 1:
        yield
        return
    controls[0](1)
    try:
        yield
    finally:
        controls[0](before)


@functools.cache
def _openblas() -> tuple[Callable[[int], None], Callable[[], int]] | None:
    """NumPy's OpenBLAS (set thread count, get thread count), or None where there is none to find."""
    for path in _candidate_libraries():
        try:
            library = ctypes.CDLL(str(path))  # already loaded by NumPy: the same handle, not a second copy
        except OSError:
            continue
        for set_name, get_name in THREAD_FUNCTIONS:
            if hasattr(library, set_name) and hasattr(library, get_name):
                set_threads, get_threads = getattr(library, set_name), getattr(library, get_name)
                set_threads.argtypes, set_threads.restype = [ctypes.c_int], None
                get_threads.argtypes, get_threads.restype = [], ctypes.c_int
                return set_threads, get_threads
    return None


def _candidate_libraries() -> list[Path]:
    """Shared libraries whose file name says OpenBLAS, NumPy's own first: those the process has
    loaded (from /proc/self/maps, on Linux; another package may have loaded its own), else those
    of the NumPy wheel's bundled-library directory."""
    import numpy

    site = Path(numpy.__file__).resolve().parent.parent
    bundled = [site / directory for directory in WHEEL_LIBRARY_DIRS]
    maps = Path("/proc/self/maps")
    if sys.platform.startswith("linux") and maps.is_file():
        fields = (line.split(None, 5) for line in maps.read_text().splitlines())
        loaded = {Path(f[5].strip()) for f in fields if len(f) == 6 and f[5].startswith("/")}  # address .. path
        found = [path for path in loaded if "openblas" in path.name.lower()]
    else:
        found = [path for directory in bundled for path in directory.glob("*openblas*") if path.is_file()]
    return sorted(found, key=lambda path: (path.parent not in bundled, str(path)))
