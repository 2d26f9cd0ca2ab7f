"""A matrix's transpose copied bit for bit: `out[...] = array.T`, as fast as this machine allows.

Two ways, the first that applies:

- OpenBLAS' out-of-place matrix copy, `cblas_somatcopy`, from the OpenBLAS that NumPy's own
  wheels carry (found by `_openblas` without importing NumPy: bertconv builds no C of its own,
  and adds no package for this), for float32 matrices whose rows are contiguous (an operand not
  4-byte aligned goes through an aligned scratch, a strip at a time). Its kernels walk a
  transpose in register blocks: 4-25 GB/s on this project's machine where the tiles below made
  1.6-5 GB/s (bert-base and BERT-large kernels, one thread, side by side). It computes
  `alpha * a` with alpha 1, which gives back every float32's bits but two kinds: a signalling NaN
  comes out quiet, and a denormal comes out 0 on a thread whose floating-point unit flushes them
  (a library built with -ffast-math may have set that). So before each use the calling thread's
  unit is probed with denormals, and a block whose copy holds a NaN (`cblas_sdot` of the copy
  with itself is NaN) is copied again by tiles.
- Tiles of NumPy copies, for every dtype and stride.

`transpose_at` is the first way alone, between two addresses: a conversion transposes a matrix
stored in a file from a map of it into its output's staging block, and imports no NumPy (95 ms
of the interpreter's time, a sixth of a bert-base conversion).

A large transpose is split between the caller and one helper thread, each copying half of the
output rows (both ways let go of the GIL while they copy).
"""

from __future__ import annotations

import _thread
import os
import sys
from collections.abc import Callable
from pathlib import Path

from .lazy import lazy_module

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    import numpy as np
else:  # imported on first use: reading headers needs no NumPy
    np = lazy_module("numpy")

#: A transpose is copied in tiles of this many source rows by this many source columns. numpy's
#: own `ascontiguousarray(a.T)` walks one side a whole row apart per element, and with BERT's
#: power-of-two row lengths (a [1024, 4096] kernel rows 16 KiB apart) every such access falls in
#: the same few cache sets: 0.2-0.8 GB/s. A 16-row strip keeps each output row's writes within
#: one 64-byte cache line and the 512-column span the reads in L1: 2.5-5.5 GB/s on the same matrices.
TRANSPOSE_TILE_ROWS = 16
TRANSPOSE_TILE_COLUMNS = 512
#: A transpose of at least this many bytes is split between two threads, each writing its own
#: half of the output rows (NumPy releases the GIL while it copies a tile); smaller ones are not
#: worth it: diff's 4 MiB chunks took 0.30 s split against 0.23 s on one thread (bert-base, in one
#: process; the second thread's hand-offs, and its system time, cost more than its half saved;
#: measured again side by side: 0.42 s against 0.44 s split from 1 MiB). A conversion's writer
#: splits from less (`containers.stream.TWO_THREAD_TRANSPOSE_BYTES`).
TRANSPOSE_TWO_THREADS_BYTES = 8 << 20
#: Output rows a transpose with an unaligned operand copies at a time through its aligned scratch:
#: small enough to stay in the CPU's caches between somatcopy and the copy into place.
UNALIGNED_STRIP_BYTES = 1 << 20
#: The names `cblas_somatcopy` and `cblas_sdot` have in the OpenBLAS builds NumPy's wheels carry:
#: both take 64-bit integers (ILP64, the `64_` suffix), NumPy 2's `scipy-openblas64` and NumPy 1's
#: own build.
OPENBLAS_SYMBOLS = (("scipy_cblas_somatcopy64_", "scipy_cblas_sdot64_"), ("cblas_somatcopy64_", "cblas_sdot64_"))
#: Where NumPy's wheels put the libraries they carry, beside or inside the `numpy` package.
NUMPY_LIBRARY_DIRECTORIES = ("../numpy.libs", ".dylibs")
#: cblas' enum values for row-major storage and a transposed copy.
CBLAS_ROW_MAJOR, CBLAS_TRANS = 101, 112
#: The two smallest float32 denormals, each sign: what a flushing thread would copy as zeros.
DENORMAL_PROBE_BITS = (0x00000001, 0x80000001)

_transpose_helper = None  # the second thread's executor, started by the first large transpose
_helper_lock = _thread.allocate_lock()  # not `threading`: reading headers starts no thread
_UNLOOKED = object()
_openblas_functions = _UNLOOKED  # (somatcopy, sdot) once looked for; (None, None) where there are none


def transpose(array: np.ndarray) -> np.ndarray:
    """The transpose of 2-D `array` ([R, C] -> [C, R]) as a new C-contiguous array (see
    `transpose_into`). No memory beyond the output."""
    array = np.asarray(array)  # a plain view: slicing a np.memmap makes a memmap object per tile
    out = np.empty((array.shape[1], array.shape[0]), dtype=array.dtype)
    transpose_into(array, out)
    return out


def transpose_into(array: np.ndarray, out: np.ndarray, *, two_threads_from: int | None = None) -> None:
    """out[...] = array.T for 2-D `array` [R, C] and a writable C-contiguous `out` [C, R] (a new
    array, or an output's staging block); one of at least `two_threads_from` bytes
    (`TRANSPOSE_TWO_THREADS_BYTES` unless given) by two threads, each taking half of the output
    rows (the source's columns)."""
    array = np.asarray(array)
    columns = array.shape[1]
    if two_threads_from is None:
        two_threads_from = TRANSPOSE_TWO_THREADS_BYTES
    if array.nbytes < two_threads_from or columns < 2:
        _transpose_columns(array, out, 0, columns)
        return
    middle = columns // 2
    other_half = _helper().submit(_transpose_columns, array, out, middle, columns)
    try:
        _transpose_columns(array, out, 0, middle)
    finally:
        other_half.result()  # even on an error here: the helper must be done with `out`


def transpose_at(source: int, rows: int, columns: int, source_stride: int, target: int, *,
                 two_threads_from: int = TRANSPOSE_TWO_THREADS_BYTES) -> bool:
    """Copy the transpose of the float32 matrix [rows, columns] at address `source` (its rows
    `source_stride` values apart) to the C-contiguous [columns, rows] one at `target`, by OpenBLAS,
    without NumPy; split between two threads from `two_threads_from` bytes. True when every bit
    was kept; False where OpenBLAS is not there, an address is not 4-byte aligned, or the copy
    may not hold the source's bits (a denormal-flushing thread, a NaN): the values at `target`
    are then undefined, and the caller copies them another way."""
    somatcopy = _somatcopy()
    if somatcopy is None or source % 4 or target % 4 or source_stride < columns:
        return False
    if 4 * rows * columns < two_threads_from or columns < 2:
        return _copied_at(somatcopy, source, source_stride, rows, 0, columns, target)
    middle = columns // 2
    other_half = _helper().submit(_copied_at, somatcopy, source, source_stride, rows, middle, columns, target)
    try:
        mine = _copied_at(somatcopy, source, source_stride, rows, 0, middle, target)
    finally:
        theirs = other_half.result()  # even on an error here: the helper must be done with `target`
    return mine and theirs


def transposes_at_addresses() -> bool:
    """Whether `transpose_at` can copy here (OpenBLAS found), so that a caller maps its matrix for it."""
    return _somatcopy() is not None


def _copied_at(somatcopy: Callable, source: int, source_stride: int, rows: int, first: int, end: int,
               target: int) -> bool:
    """Rows [first, end) of the transpose at `target` (see `transpose_at`) copied from columns
    [first, end) of the matrix at `source`; False when they may not hold the source's bits."""
    if not _keeps_denormals(somatcopy):
        return False
    into = target + 4 * rows * first
    somatcopy(CBLAS_ROW_MAJOR, CBLAS_TRANS, rows, end - first, 1.0, source + 4 * first, source_stride, into, rows)
    return not _holds_nan(into, rows * (end - first))


def _transpose_columns(array: np.ndarray, out: np.ndarray, first: int, end: int) -> None:
    """out[first:end] = array[:, first:end].T: by OpenBLAS where it keeps the bits, else by tiles."""
    if not _blas_copied(array, out, first, end):
        _tiles(array, out, first, end)


def _tiles(array: np.ndarray, out: np.ndarray, first: int, end: int) -> None:
    """out[first:end] = array[:, first:end].T, tile by tile."""
    rows = array.shape[0]
    for i in range(0, rows, TRANSPOSE_TILE_ROWS):
        strip = array[i:i + TRANSPOSE_TILE_ROWS]
        for j in range(first, end, TRANSPOSE_TILE_COLUMNS):
            stop = min(j + TRANSPOSE_TILE_COLUMNS, end)
            out[j:stop, i:i + TRANSPOSE_TILE_ROWS] = strip[:, j:stop].T


def _blas_copied(array: np.ndarray, out: np.ndarray, first: int, end: int) -> bool:
    """Copy out[first:end] = array[:, first:end].T with `cblas_somatcopy` and say True, where
    that keeps every bit (see the module's docstring); else say False, having copied nothing or
    a part that the caller copies again.

    An operand whose values are not 4-byte aligned (a msgpack stream's lie at any byte) is
    copied through an aligned scratch, `UNALIGNED_STRIP_BYTES` of output rows at a time:
    OpenBLAS' kernels may assume a float's alignment."""
    if array.dtype != np.float32 or out.dtype != np.float32:
        return False
    rows = array.shape[0]
    source_row, source_step = array.strides
    target_row, target_step = out.strides
    if source_step != 4 or target_step != 4 or source_row < 4 * (end - first) or target_row != 4 * rows:
        return False  # rows not contiguous (or reversed), which somatcopy cannot walk
    if not rows or end <= first or source_row % 4 or target_row % 4:
        return False
    somatcopy = _somatcopy()
    if somatcopy is None:
        return False
    if array.flags.aligned and out.flags.aligned:
        return _copied_at(somatcopy, array.ctypes.data, source_row // 4, rows, first, end, out.ctypes.data)
    strip = min(end - first, max(1, UNALIGNED_STRIP_BYTES // (4 * rows)))
    source_scratch = None if array.flags.aligned else np.empty((rows, strip), np.float32)
    target_scratch = None if out.flags.aligned else np.empty((strip, rows), np.float32)
    for start in range(first, end, strip):
        stop = min(start + strip, end)
        if source_scratch is None:
            source, source_stride = array.ctypes.data + 4 * start, source_row // 4
        else:
            source_scratch[:, :stop - start] = array[:, start:stop]
            source, source_stride = source_scratch.ctypes.data, strip
        target = out[start:stop] if target_scratch is None else target_scratch[:stop - start]
        if not _copied_at(somatcopy, source, source_stride, rows, 0, stop - start, target.ctypes.data):
            return False
        if target_scratch is not None:
            out[start:stop] = target
    return True


def _keeps_denormals(somatcopy: Callable) -> bool:
    """Whether `somatcopy`, on this thread, copies float32 denormals as they are (a thread that
    flushes them to zero copies them as zeros)."""
    import ctypes  # loaded already: `somatcopy` is a ctypes function

    probe = (ctypes.c_uint32 * 2)(*DENORMAL_PROBE_BITS)
    copied = (ctypes.c_uint32 * 2)()
    somatcopy(CBLAS_ROW_MAJOR, CBLAS_TRANS, 1, 2, 1.0, ctypes.addressof(probe), 2, ctypes.addressof(copied), 1)
    return list(copied) == list(DENORMAL_PROBE_BITS)


def _holds_nan(address: int, count: int) -> bool:
    """Whether one of the `count` float32 values at `address` is a NaN: the sum of their squares
    is NaN exactly then (a square is never negative, so infinities add up to +inf, never to
    inf - inf)."""
    total = _sdot()(count, address, 1, address, 1)
    return total != total


def _somatcopy() -> Callable | None:
    """`cblas_somatcopy` of the OpenBLAS NumPy's wheel carries, as a ctypes function; None where
    NumPy was built with another BLAS, or carries none (then every transpose goes by tiles)."""
    return _openblas()[0]


def _sdot() -> Callable:
    """`cblas_sdot` of the same library (there whenever `_somatcopy()` is)."""
    return _openblas()[1]


def _openblas() -> tuple[Callable | None, Callable | None]:
    global _openblas_functions
    if _openblas_functions is _UNLOOKED:
        _openblas_functions = _look_up_openblas()
    return _openblas_functions


def _look_up_openblas() -> tuple[Callable | None, Callable | None]:
    """(somatcopy, sdot) of the OpenBLAS in NumPy's wheel, loaded by path (if NumPy is imported
    later, the dynamic loader hands it the same library); (None, None) where there are not both."""
    import ctypes  # here: a command that transposes nothing loads no library

    numpy_directory = _numpy_directory()
    for directory in NUMPY_LIBRARY_DIRECTORIES if numpy_directory is not None else ():
        folder = (numpy_directory / directory).resolve()
        if not folder.is_dir():
            continue
        for name in sorted(os.listdir(folder)):
            if "openblas" not in name:
                continue
            try:
                library = ctypes.CDLL(str(folder / name))
            except OSError:
                continue
            for somatcopy_symbol, sdot_symbol in OPENBLAS_SYMBOLS:
                somatcopy = getattr(library, somatcopy_symbol, None)
                sdot = getattr(library, sdot_symbol, None)
                if somatcopy is not None and sdot is not None:
                    somatcopy.restype = None
                    somatcopy.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_float,
                                          ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64)
                    sdot.restype = ctypes.c_float
                    sdot.argtypes = (ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64)
                    return somatcopy, sdot
    return None, None


def _numpy_directory() -> Path | None:
    """NumPy's package directory, found without importing NumPy; None where it is not installed."""
    module = sys.modules.get("numpy")
    if module is not None:
        return Path(module.__file__).parent
    import importlib.util

    spec = importlib.util.find_spec("numpy")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0]) if locations else None


def _helper():
    """The one helper thread of every two-thread transpose (a second caller's half waits its turn)."""
    global _transpose_helper
    with _helper_lock:
        if _transpose_helper is None:
            from .threads import Workers  # here: most commands never transpose

            _transpose_helper = Workers(1, "bertconv-transpose")
    return _transpose_helper
