"""What a path really is: the file behind every spelling of it, and what kind of file it is.

Two paths name the same file when they have the same device and inode, whatever symlinks, `..`,
hard links or bind mounts lead there. Guards against overwriting an input compare those
identities, never the spelled paths.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import bad_input

Identity = tuple[int, int]

#: Where a Hugging Face cache keeps a repo's checked-out revisions: a `models--org--name` folder
#: holding it is a repo folder of the cache.
HUB_SNAPSHOTS = "snapshots"

#: What each kind of non-regular file is called in messages.
_KINDS = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def holds_hub_snapshots(folder: Path) -> bool:
    """Whether `folder` holds a Hugging Face cache's `snapshots/` directory (`HUB_SNAPSHOTS`)."""
    return (Path(folder) / HUB_SNAPSHOTS).is_dir()


def kind_of(path: Path) -> str | None:
    """"file", "directory", "symlink", a phrase for a special file, or None when nothing is there.
    Looks at the path itself (a symlink is not followed)."""
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    return _KINDS.get(stat.S_IFMT(mode), "a special file")


def special_kind(path: Path) -> str | None:
    """What `path` leads to (symlinks followed) when that is a FIFO, socket or device ("a FIFO
    (named pipe)", ...); None for a regular file, a directory or nothing at all."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return _KINDS.get(stat.S_IFMT(mode), "a special file")


def require_file_or_directory(path: Path, what: str = "input") -> None:
    """Refuse a FIFO, socket or device: reading one can block forever or never end.
    A path that does not exist is left to the caller's own message."""
    special = special_kind(path)
    if special is not None:
        raise bad_input(path, f"is {special}, not a regular file or directory; bertconv reads {what}s only "
                              f"from files")


def file_problem(path: Path) -> str | None:
    """None when `path` leads to a regular file (symlinks followed); else what is there instead, as
    the end of a sentence naming it: "does not exist", "is a directory, not a file", "is a FIFO
    (named pipe), not a regular file"."""
    if os.path.isfile(path):
        return None
    if os.path.isdir(path):
        return "is a directory, not a file"
    special = special_kind(path)
    return f"is {special}, not a regular file" if special is not None else "does not exist"


def why_not_a_file(path: Path) -> str | None:
    """Why a path that is there in some form cannot be read as a regular file: a dangling or
    looping symlink, a directory, a FIFO, socket or device. None when it is a regular file (or a
    symlink to one) or when nothing is there at all. Only `stat`s, never opens: a FIFO would block.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if not os.path.islink(path):
            return None
        return f"is a symlink to {os.readlink(path)}, which does not exist"
    except OSError as exc:  # a symlink loop, a permission denied on the way
        return f"cannot be reached: {exc.strerror}"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory, not a file"
    return f"is {_KINDS.get(stat.S_IFMT(mode), 'a special file')}, not a regular file"


def identity(path: Path) -> Identity | None:
    """(device, inode) of the file `path` leads to (symlinks followed), or None if none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def identity_chain(path: Path) -> list[Identity]:
    """The identities of `path` (when it exists) and of every existing directory above it, nearest
    first, following the real path (symlinks resolved)."""
    real = Path(os.path.realpath(path))
    chain = []
    for node in (real, *real.parents):
        ident = identity(node)
        if ident is not None:
            chain.append(ident)
    return chain


def clash(destination: Path, inputs: list[Path]) -> tuple[Path, str] | None:
    """The first input `destination` would replace, contain or sit inside, with how; else None.

    `inputs` are every file and directory a command reads (checkpoint files, config, vocab,
    tokenizer files, the directory the user named). A hard link to an input inside a destination
    directory counts as the input itself: replacing the directory would remove it.
    """
    destination_chain = identity_chain(destination)
    destination_id = identity(destination)
    links = hard_links_within(destination)
    for source in inputs:
        source_id = identity(source)
        if source_id is None:
            continue
        if destination_id is not None and destination_id == source_id:
            return source, "is"
        if source_id in links:
            return source, f"holds {links[source_id].name}, a hard link to"
        if destination_id is not None and destination_id in identity_chain(source)[1:]:
            return source, "contains"
        if os.path.isdir(source) and source_id in destination_chain:
            return source, "lies inside"
    return None


def hard_links_within(directory: Path) -> dict[Identity, Path]:
    """identity -> entry for the regular files directly inside `directory` that have other names
    too (a link count above one); {} when it is not a directory. Not recursive: `--force`
    replaces no directory that holds a subdirectory."""
    if kind_of(directory) != "directory":
        return {}
    links = {}
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                    links[(st.st_dev, st.st_ino)] = Path(entry.path)
    except OSError:
        return links
    return links
