"""Early writeback: the kernel starts writing an output's bytes to disk while the rest is written.

Every output is fsynced before it is renamed into place (`destination/atomic.py`). Left to itself, the
kernel keeps a freshly written file in dirty pages until that fsync, which then writes the whole
file while the conversion waits: 0.35-0.4 s of a BERT-large conversion (1.3 GB). A writer that
tells `EarlyWriteback` how far it has written gets each stretch of `WRITEBACK_STEP` bytes handed
to the disk at once (`sync_file_range(SYNC_FILE_RANGE_WRITE)`: start writing, do not wait), so
the disk works while the next tensors are read, transposed and copied, and the final fsync finds
at most one stretch left.

Durability still rests on that fsync alone: `sync_file_range` makes no promise about metadata or
completion, and an error it could not report here stays recorded for the fsync to report (it only
submits, so it marks no writeback error as seen). Where the call does not exist or the file
system does not support it, nothing is done.
"""

from __future__ import annotations

import errno
import os

from ..lazy import lazy_module

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import BinaryIO

    import ctypes
else:  # imported by the first writer: reading headers needs no ctypes
    ctypes = lazy_module("ctypes")

#: How many written bytes are handed to the disk at a time: large enough that each call submits
#: big requests, small enough that the fsync at the end has little left.
WRITEBACK_STEP = 32 << 20

#: sync_file_range(2) flag (linux/fs.h).
_SYNC_FILE_RANGE_WRITE = 2
#: Errors meaning "not here" (old kernel, file system or file kind without it): skip, fsync covers all.
_UNSUPPORTED = {errno.ENOSYS, errno.EINVAL, errno.ESPIPE, errno.EOPNOTSUPP, errno.EBADF}


def _sync_file_range():
    """libc's sync_file_range with its argument types, or None where there is none."""
    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    function.restype = ctypes.c_int
    return function


class EarlyWriteback:
    """Hands the written part of `file` to the disk, `WRITEBACK_STEP` bytes at a time.

    The writer calls `written(end)` when it has written up to offset `end` (a part of that
    range not written yet is simply left for the fsync); `step` (default `WRITEBACK_STEP`) is for
    tests.
    """

    def __init__(self, file: BinaryIO, *, step: int | None = None):
        self.file = file
        self.step = step or WRITEBACK_STEP
        self.submitted = 0  # bytes [0, submitted) have been handed to the disk
        self._call = _sync_file_range()

    def written(self, end: int) -> None:
        """Bytes [0, end) of the file are written; submit them once a whole step has gathered."""
        if self._call is None or end - self.submitted < self.step:
            return
        self.file.flush()  # bytes still in Python's buffer are not in the page cache yet
        if self._call(self.file.fileno(), self.submitted, end - self.submitted, _SYNC_FILE_RANGE_WRITE) != 0:
            code = ctypes.get_errno()
            if code in _UNSUPPORTED:
                self._call = None
                return
            raise OSError(code, os.strerror(code))
        self.submitted = end
