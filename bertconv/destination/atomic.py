"""Outputs appear whole or not at all, and replace nothing they were not allowed to.

Writers write into a temporary sibling of the destination, `.<name>.bertconv-partial-<pid>`,
which takes the destination's place only once everything is written and synced. A run killed
midway leaves only such a temporary (SIGKILL; SIGINT, SIGTERM and SIGHUP remove it on the way
out); the next run towards the same destination removes those whose process is gone.

The last step never replaces a destination it did not check: a new output goes in with a
no-replace rename (`renameat2(RENAME_NOREPLACE)`), so if another process created the
destination meanwhile this run fails and the other's output stays whole; a `--force` replacement
swaps the two atomically (`RENAME_EXCHANGE`) after checking that the destination is still the
very file it inspected at the start.

`--force` replaces only a checkpoint of the kind being written (`Replaceable`): never a device,
FIFO, socket or symlink, never a file where a directory is written, never a directory holding
anything the format does not own or that may travel with it (tokenizer files). A replacement
holds exactly what this run wrote: what the old output held and this run did not write is gone
with it.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fnmatch
import os
import re
from collections.abc import Iterator
from pathlib import Path

from .. import paths
from ..errors import bad_input
from ..records import record

PARTIAL_MARK = ".bertconv-partial-"
_RETIRED_MARK = ".bertconv-replaced-"

#: renameat2(2) flags (linux/fs.h).
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


@record
class Replaceable:
    """What an existing destination directory may hold for `--force` to replace it.

    Attributes:
      owned: name patterns (fnmatch) of the files a checkpoint of this kind consists of.
      companions: name patterns of the files that travel with such a checkpoint (tokenizer
        files): an earlier output holding them may be replaced too, and they with it.

    A symbolic link with such a name is part of the old output too (a vocab.txt linked from
    elsewhere): replacing the directory removes the link, never what it points to.
    """

    owned: tuple[str, ...]
    companions: tuple[str, ...] = ()

    def unrelated(self, directory: Path) -> list[str]:
        """Entries of `directory` that are neither owned nor companions (sorted; subdirectories
        marked /)."""
        out = []
        for entry in sorted(os.listdir(directory)):
            kind = paths.kind_of(directory / entry)
            if kind not in ("file", "symlink"):
                out.append(entry + ("/" if kind == "directory" else ""))
            elif not self._matches(entry, self.owned + self.companions):
                out.append(entry)
        return out

    @staticmethod
    def _matches(name: str, patterns: tuple[str, ...]) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _partial_pattern(name: str) -> re.Pattern:
    return re.compile(rf"^\.{re.escape(name)}({re.escape(PARTIAL_MARK)}|{re.escape(_RETIRED_MARK)})(\d+)$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(destination: Path) -> list[Path]:
    """Remove temporaries left beside `destination` by runs that are no longer alive."""
    pattern = _partial_pattern(destination.name)
    removed = []
    for sibling in destination.parent.iterdir() if destination.parent.is_dir() else ():
        match = pattern.match(sibling.name)
        if match and not _alive(int(match.group(2))):
            _remove(sibling)
            removed.append(sibling)
    return removed


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        import shutil  # here: only a directory that was replaced or left half-written is removed

        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _fsync_tree(path: Path) -> None:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    for file in files:
        with open(file, "rb") as f:
            os.fsync(f.fileno())
    with contextlib.suppress(OSError):  # the renames below must survive a crash too
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def check_replaceable(destination: Path, *, directory: bool, force: bool,
                      replaceable: Replaceable | None) -> None:
    """Refuse a destination this run may not replace, saying why, before anything is written."""
    kind = paths.kind_of(destination)
    if kind is None:
        return
    if kind == "symlink":
        raise bad_input(destination, f"is a symbolic link (to {os.readlink(destination)}); bertconv does not "
                                     f"write through or replace links: name the real path")
    if kind not in ("file", "directory"):
        raise bad_input(destination, f"is {kind}; bertconv writes checkpoints only as regular files and "
                                     f"directories and never replaces anything else, --force or not")
    if not force:
        raise bad_input(destination, "already exists; pass --force to replace it")
    wanted = "directory" if directory else "file"
    if kind != wanted:
        raise bad_input(destination, f"is a {kind}, and this output is a {wanted}: --force replaces only a "
                                     f"checkpoint of the kind being written")
    if kind == "directory" and replaceable is not None:
        unrelated = replaceable.unrelated(destination)
        if unrelated:
            shown = ", ".join(unrelated[:8]) + (" ..." if len(unrelated) > 8 else "")
            one = len(unrelated) == 1
            raise bad_input(destination, f"holds {len(unrelated)} {'entry that is' if one else 'entries that are'} "
                                         f"not part of the checkpoint being written ({shown}); --force "
                                         f"replaces only a checkpoint of the same kind: choose another "
                                         f"destination or move those away")


@contextlib.contextmanager
def atomic_output(destination: Path, *, directory: bool, force: bool = False,
                  replaceable: Replaceable | None = None) -> Iterator[Path]:
    """Yield a temporary path to write into; on success it becomes `destination`.

    `directory` says whether the output is a directory (created empty) or a single file. An
    existing destination is replaced only with `force`, and only as `check_replaceable` allows;
    the replacement holds only what was written into the temporary. On any failure (a signal
    included) the temporary is removed and the destination is left as it was.
    """
    destination = Path(os.path.abspath(destination))
    if not destination.parent.is_dir():
        there = paths.kind_of(destination.parent)
        raise bad_input(destination, f"parent directory {destination.parent} does not exist" if there is None else
                        f"parent {destination.parent} is {'a file' if there == 'file' else there}, not a directory")
    check_replaceable(destination, directory=directory, force=force, replaceable=replaceable)
    before = _lstat_identity(destination)
    clean_stale(destination)
    partial = destination.parent / f".{destination.name}{PARTIAL_MARK}{os.getpid()}"
    _remove(partial)
    if directory:
        partial.mkdir()
    try:
        yield partial
        _fsync_tree(partial)
        _install(partial, destination, before)
    except BaseException:
        _remove(partial)
        raise


def _lstat_identity(path: Path) -> tuple[int, int, int] | None:
    """Device, inode and change time: a file deleted and another made in its place may get the
    same inode number, never the same change time as well."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns


def _install(partial: Path, destination: Path, before: tuple[int, int, int] | None) -> None:
    """Put `partial` in `destination`'s place: only into an empty place if there was none at the
    start, only over the very file inspected at the start otherwise."""
    if before is None:
        try:
            _rename_noreplace(partial, destination)
        except FileExistsError:
            raise bad_input(destination, "appeared while this conversion was writing (another process "
                                         "wrote it?); it was left as it is and nothing of this run was "
                                         "kept") from None
        return
    if _lstat_identity(destination) != before:
        raise bad_input(destination, "changed while this conversion was writing (another process "
                                     "replaced it?); it was left as it is and nothing of this run was kept")
    retired = destination.parent / f".{destination.name}{_RETIRED_MARK}{os.getpid()}"
    try:
        _renameat2(partial, destination, _RENAME_EXCHANGE)
        _remove(partial)  # now the old destination
        return
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise
    os.replace(destination, retired)
    try:
        _rename_noreplace(partial, destination)
    except BaseException:
        os.replace(retired, destination)
        raise
    _remove(retired)


def _rename_noreplace(source: Path, target: Path) -> None:
    try:
        _renameat2(source, target, _RENAME_NOREPLACE)
        return
    except OSError as exc:
        if exc.errno == errno.EEXIST:
            raise FileExistsError(errno.EEXIST, "exists", str(target)) from None
        if exc.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise
    # No renameat2 here: a file can go in by link (which fails if the target exists); a
    # directory by rename, which fails over anything but an empty directory.
    if source.is_dir():
        if os.path.lexists(target):
            raise FileExistsError(errno.EEXIST, "exists", str(target))
        os.rename(source, target)
    else:
        os.link(source, target)
        os.unlink(source)


def _renameat2(source: Path, target: Path, flags: int) -> None:
    function = getattr(_libc(), "renameat2", None)
    if function is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available")
    if function(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), flags) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(target))


def _libc():
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
