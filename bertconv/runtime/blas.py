"""How many threads NumPy's BLAS runs a matrix product on, for products too small to share.

OpenBLAS (the BLAS NumPy's wheels bundle) splits a product over all its threads whenever
M * N * K passes a small threshold, and waits for every part. A fill-mask text is a few rows
(tokens): a product of 8 rows by a 768 x 3072 kernel takes about 0.2 ms on one core, while on a
machine whose cores are busy a second thread may wait a whole scheduler time slice to run:
measured 10-40 ms per product on two busy cores, which turned a bert-base pass of 73 products
from 0.04 s into 1-2 s. `one_thread()` runs such products on the calling thread alone.

threadpoolctl (scikit-learn's) finds the BLAS libraries the process has loaded (OpenBLAS, MKL,
BLIS) and sets their thread counts; where it finds none, `one_thread()` changes nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from threadpoolctl import ThreadpoolController


@contextmanager
def one_thread() -> Iterator[None]:
    """Run the block with NumPy's BLAS on one thread, then restore its thread count.

    The count is the process's: BLAS products other threads run meanwhile are single-threaded too.
    """
    libraries = _controller().select(user_api="blas")
    if all(library.num_threads == 1 for library in libraries.lib_controllers):
        yield
        return
    limiter = libraries.limit(limits=1)
    try:
        yield
    finally:
        limiter.restore_original_limits()


@functools.cache
def _controller() -> ThreadpoolController:
    """The thread pools of the libraries loaded now: called after NumPy (and its BLAS) is."""
    import numpy  # noqa: F401  (its BLAS must be loaded before the controller looks)
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()
