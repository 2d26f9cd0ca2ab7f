"""Advice to the kernel on how a file will be read: given where the system takes it, never an error.

`posix_fadvise` is Linux's and the BSDs' (macOS has none), `MADV_POPULATE_READ` Linux's from 5.14,
and a file system may refuse either; the reads they shape are correct without them, only slower,
so none of that is a reason to stop a command.
"""

from __future__ import annotations

import mmap
import os

#: madvise(2)'s MADV_POPULATE_READ and MADV_POPULATE_WRITE (Linux 5.14), which Python 3.11's mmap
#: does not name.
_MADV_POPULATE_READ = 22
_MADV_POPULATE_WRITE = 23

_madvise = None  # libc's madvise through ctypes, once looked up; False where there is none


def advise(fd: int, offset: int, length: int, advice: str) -> None:
    """`posix_fadvise(fd, offset, length, os.<advice>)` ("POSIX_FADV_RANDOM", ...) where the
    system has it; nothing where it has not, or refuses it."""
    if not hasattr(os, "posix_fadvise") or not hasattr(os, advice):
        return
    try:
        os.posix_fadvise(fd, offset, length, getattr(os, advice))
    except OSError:
        pass


def populate(array) -> None:
    """Map in the pages of the memory map the NumPy `array` views, if it views one, without
    copying: the loader does it so that the writer's transpose does not fault them in one by one.
    bert-base hf -> tf, medians of 9 to 11 taken in turns: 0.71 -> 0.60 s and 0.89 -> 0.79 s (on a
    disk slowed to twice its `cp` + `sync` time).

    Through libc's madvise, not `mmap.madvise`, which holds the GIL while the kernel maps the
    pages (36-67 ms for a BERT-large file): every thread of the conversion would wait for it."""
    region = array.base
    while region is not None and not isinstance(region, mmap.mmap):
        region = getattr(region, "base", None) if hasattr(region, "__array_interface__") else getattr(region, "obj", None)
    if region is None or region.closed or array.size == 0:
        return
    address = array.__array_interface__["data"][0]
    extents = [stride * (length - 1) for stride, length in zip(array.strides, array.shape)]
    low = address + sum(min(0, extent) for extent in extents)
    high = address + sum(max(0, extent) for extent in extents) + array.itemsize
    populate_range(low, high - low)


def populate_range(address: int, length: int) -> None:
    """Map in the pages of the `length` bytes at `address` (of a memory map), as `populate` does."""
    madvise = _libc_madvise()
    if not madvise or length <= 0:
        return
    start = address - address % mmap.PAGESIZE
    madvise(start, address + length - start, _MADV_POPULATE_READ)  # -1 (EINVAL) before Linux 5.14: faulted in as read


def populate_for_writing(region: mmap.mmap) -> None:
    """Map in every page of the anonymous map `region`, writable, in one call that does not hold
    the GIL. Touched page by page, 48 MiB of fresh staging blocks took 37-40 ms of CPU on the
    thread filling them; this call takes 25-31 ms, and a writer thread that is idle anyway makes
    it (`mmap`'s own MAP_POPULATE takes 16 ms, all of it holding the GIL). Nothing before Linux
    5.14: the pages fault in as they are written."""
    madvise = _libc_madvise()
    if not madvise or region.closed or not len(region):
        return
    import ctypes  # loaded already by _libc_madvise

    address = ctypes.addressof(ctypes.c_char.from_buffer(region))
    madvise(address, len(region), _MADV_POPULATE_WRITE)


def _libc_madvise():
    """libc's madvise(addr, length, advice) -> int, or False where ctypes cannot find it."""
    global _madvise
    if _madvise is None:
        import ctypes  # here: only a conversion's loader needs it

        try:
            function = ctypes.CDLL(None, use_errno=True).madvise
        except (OSError, AttributeError):
            function = False
        else:
            function.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
            function.restype = ctypes.c_int
        _madvise = function
    return _madvise
