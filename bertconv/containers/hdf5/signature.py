"""Whether a file is HDF5, from its signature alone: no h5py, so a sniff stays cheap."""

from __future__ import annotations

import os
from pathlib import Path

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import BinaryIO


HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
#: HDF5 puts its signature at byte 0 or after a user block of 512, 1024, 2048, ... bytes.
FIRST_USERBLOCK_SIZE = 512


def has_hdf5_signature(f: BinaryIO, size: int) -> bool:
    """True when the open file `f` of `size` bytes carries the signature where HDF5 looks for it."""
    offset = 0
    while offset + len(HDF5_SIGNATURE) <= size:
        f.seek(offset)
        if f.read(len(HDF5_SIGNATURE)) == HDF5_SIGNATURE:
            return True
        offset = FIRST_USERBLOCK_SIZE if offset == 0 else offset * 2
    return False


def is_hdf5(path: Path) -> bool:
    """True when the file `path` carries the HDF5 signature at byte 0 or after a user block."""
    try:
        with open(path, "rb") as f:
            return has_hdf5_signature(f, os.fstat(f.fileno()).st_size)
    except OSError:
        return False
