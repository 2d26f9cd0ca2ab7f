"""Advice to the kernel on how a file will be read: given where the system takes it, never an error.

`posix_fadvise` is Linux's and the BSDs' (macOS has none), and a file system may refuse it; the
reads it shapes are correct without it, only slower, so neither is a reason to stop a command.
"""

from __future__ import annotations

import os


def advise(fd: int, offset: int, length: int, advice: str) -> None:
    """`posix_fadvise(fd, offset, length, os.<advice>)` ("POSIX_FADV_RANDOM", ...) where the
    system has it; nothing where it has not, or refuses it."""
    if not hasattr(os, "posix_fadvise") or not hasattr(os, advice):
        return
    try:
        os.posix_fadvise(fd, offset, length, getattr(os, advice))
    except OSError:
        pass
