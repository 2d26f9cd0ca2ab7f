"""The local Hugging Face cache: a repo id and a revision to the snapshot directory that holds
them, offline, as huggingface_hub lays the cache out; never a network access, never a write.

The layout (huggingface_hub's `file_download`, `constants`):

    <cache>/models--<org>--<name>/
        blobs/<etag>                   the files' bytes, once each
        refs/<branch or tag>           the commit hash the ref points to (no newline)
        snapshots/<commit>/<filename>  a relative symlink into ../../blobs/ (a copy where
                                       the system has no symlinks)

`<cache>` is `HF_HUB_CACHE`, else the legacy `HUGGINGFACE_HUB_CACHE`, else `HF_HOME/hub`, else
`$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`, as huggingface_hub reads
them. A revision is a ref (a branch or a tag: `refs/<revision>`, `main` by default), a full
commit hash, or, beyond what huggingface_hub resolves offline, a prefix of at least
`MIN_SHORT_HASH` hex digits naming exactly one cached snapshot.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ...errors import bad_input
from ...paths import HUB_SNAPSHOTS, holds_hub_snapshots
from ...records import field, record

#: huggingface_hub's `REPO_ID_SEPARATOR`, and the prefix of a model repo's folder.
SEPARATOR = "--"
MODEL_PREFIX = "models" + SEPARATOR
DEFAULT_REVISION = "main"
#: A commit hash in full (huggingface_hub's `REGEX_COMMIT_HASH`), and the shortest prefix taken for one (git's default).
COMMIT_HASH = re.compile(r"^[0-9a-f]{40}$")
MIN_SHORT_HASH = 7
SHORT_HASH = re.compile(rf"^[0-9a-f]{{{MIN_SHORT_HASH},39}}$")
#: A repo id as huggingface_hub's `validate_repo_id` accepts it: `name` or `namespace/name`, each
#: of word characters, `-` and `.`, no `--` or `..`, at most 96 characters.
REPO_ID = re.compile(r"^(?:[\w.-]+/)?[\w.-]+$")
MAX_REPO_ID = 96


def cache_dir() -> tuple[Path, str]:
    """The cache directory huggingface_hub uses, and the setting it comes from (for messages)."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return _expand(os.environ[variable]), variable
    if os.environ.get("HF_HOME"):
        return _expand(os.environ["HF_HOME"]) / "hub", "HF_HOME/hub"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return _expand(base) / "huggingface" / "hub", ("XDG_CACHE_HOME/huggingface/hub" if os.environ.get(
        "XDG_CACHE_HOME") else "the default, ~/.cache/huggingface/hub")


def _expand(text: str) -> Path:
    return Path(os.path.expandvars(os.path.expanduser(text)))


def is_repo_id(text: str) -> bool:
    """Whether `text` is spelled as a Hub repo id (`org/name`, or `name` for the old canonical
    repos such as `bert-base-uncased`)."""
    return (len(text) <= MAX_REPO_ID and bool(REPO_ID.match(text)) and SEPARATOR not in text and ".." not in text
            and not any(part.startswith(("-", ".")) or part.endswith(("-", ".")) for part in text.split("/")))


def repo_folder(cache: Path, repo_id: str) -> Path:
    """`<cache>/models--<org>--<name>` (huggingface_hub's `repo_folder_name`)."""
    return cache / (MODEL_PREFIX + repo_id.replace("/", SEPARATOR))


@record
class Snapshot:
    """One revision of a cached repo: `path` is `snapshots/<commit>`, `refs` the branches and
    tags that point to it."""

    repo_id: str
    commit: str
    path: Path
    refs: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """`org/name@main (1a2b3c4)`, or `org/name@1a2b3c4` for a commit no ref points to."""
        short = self.commit[:MIN_SHORT_HASH]
        return f"{self.repo_id}@{','.join(self.refs)} ({short})" if self.refs else f"{self.repo_id}@{short}"


def resolve(repo_id: str, revision: str | None = None, cache: Path | None = None) -> Snapshot:
    """The snapshot of `repo_id` at `revision` (default `main`) in `cache` (default `cache_dir()`).

    BadInput (exit 2) naming the folder looked in, and what it holds, when the repo, the
    revision or its snapshot is not in the cache.
    """
    cache, setting = (cache, "given") if cache is not None else cache_dir()
    folder = repo_folder(cache, repo_id)
    if not holds_hub_snapshots(folder):
        raise bad_input(repo_id, f"no such file or directory, and not in the Hugging Face cache: looked for "
                                 f"{folder} (the cache from {setting}); bertconv never downloads: fetch it first "
                                 f"(`hf download {repo_id}`), or set HF_HUB_CACHE to the cache that holds it")
    revision = revision or DEFAULT_REVISION
    commit = _commit_of(folder, revision)
    snapshot = folder / HUB_SNAPSHOTS / commit
    if not snapshot.is_dir():
        raise bad_input(folder, f"refs/{revision} points to commit {commit}, whose snapshot is not in the cache "
                                f"(snapshots/{commit} is absent); cached: {_listing(folder)}")
    return Snapshot(repo_id, commit, snapshot, tuple(_refs_to(folder).get(commit, ())))


def _commit_of(folder: Path, revision: str) -> str:
    """The commit `revision` names in the repo folder: a ref's content, a full hash, or a unique
    short hash of a cached snapshot."""
    if ".." in Path(revision).parts or revision.startswith("/"):
        raise bad_input(folder, f"--revision {revision!r} is not a branch, tag or commit hash")
    ref = folder / "refs" / revision
    if ref.is_file():
        commit = ref.read_text(encoding="utf-8").strip()
        if not COMMIT_HASH.match(commit):
            raise bad_input(ref, f"holds {commit[:60]!r}, not a commit hash: the cache is damaged")
        return commit
    if COMMIT_HASH.match(revision):
        return revision
    if SHORT_HASH.match(revision):
        matching = sorted(c for c in _snapshot_commits(folder) if c.startswith(revision))
        if len(matching) == 1:
            return matching[0]
        if len(matching) > 1:
            raise bad_input(folder, f"--revision {revision} is the start of {len(matching)} cached commits "
                                    f"({', '.join(matching)}); give more of the hash")
    raise bad_input(folder, f"no revision {revision!r} in the cache (no refs/{revision}, no snapshot of that "
                            f"commit); cached: {_listing(folder)}")


def _snapshot_commits(folder: Path) -> list[str]:
    snapshots = folder / HUB_SNAPSHOTS
    return sorted(entry.name for entry in snapshots.iterdir() if entry.is_dir()) if snapshots.is_dir() else []


def _refs_to(folder: Path) -> dict[str, list[str]]:
    """Commit -> the refs (branches, tags, `refs/pr/N`) pointing to it, sorted with `main` first."""
    refs_dir = folder / "refs"
    pointing: dict[str, list[str]] = {}
    if refs_dir.is_dir():
        for ref in sorted(refs_dir.rglob("*"), key=lambda p: (p.name != DEFAULT_REVISION, str(p))):
            if ref.is_file():
                try:
                    commit = ref.read_text(encoding="utf-8").strip()
                except (OSError, UnicodeDecodeError):
                    continue
                pointing.setdefault(commit, []).append(ref.relative_to(refs_dir).as_posix())
    return pointing


def _listing(folder: Path) -> str:
    """The refs and snapshots a repo folder holds, for messages."""
    refs = [f"{ref} -> {commit[:MIN_SHORT_HASH]}" for commit, names in _refs_to(folder).items() for ref in names]
    commits = [c[:MIN_SHORT_HASH] for c in _snapshot_commits(folder)]
    return f"refs {', '.join(refs) or 'none'}; snapshots {', '.join(commits) or 'none'}"


@record
class CachedRepo:
    """A model repo in the cache and its cached snapshots (newest ref'd first: `main`'s)."""

    repo_id: str
    folder: Path
    snapshots: tuple[Snapshot, ...] = field(default_factory=tuple)


def repo_id_of(folder_name: str) -> str | None:
    """`models--org--name` -> `org/name` (None for a folder that is not a model repo's)."""
    if not folder_name.startswith(MODEL_PREFIX):
        return None
    return folder_name[len(MODEL_PREFIX):].replace(SEPARATOR, "/")


def cached_repos(cache: Path) -> list[CachedRepo]:
    """Every model repo in `cache` with its snapshots (those a ref points to first, then the
    others by hash), repos sorted by id. Dataset and Space repos are not checkpoints: left out."""
    repos = []
    for folder in sorted(Path(cache).iterdir()) if Path(cache).is_dir() else []:
        repo_id = repo_id_of(folder.name)
        if repo_id is None or not holds_hub_snapshots(folder):
            continue
        refs = _refs_to(folder)
        commits = sorted(_snapshot_commits(folder), key=lambda c: (c not in refs, DEFAULT_REVISION not in
                                                                    refs.get(c, ()), c))
        repos.append(CachedRepo(repo_id, folder, tuple(
            Snapshot(repo_id, c, folder / HUB_SNAPSHOTS / c, tuple(refs.get(c, ()))) for c in commits)))
    return repos


def is_cache(directory: Path) -> bool:
    """Whether `directory` is a Hugging Face cache: it holds at least one `models--*` folder with
    a `snapshots/` directory."""
    try:
        return any(repo_id_of(entry.name) and holds_hub_snapshots(entry) for entry in Path(directory).iterdir())
    except OSError:
        return False


def cache_holding(path: Path) -> Path | None:
    """The Hugging Face cache (or repo folder) that `path` is, or lies inside, else None: the
    active cache directory, or a `models--*` (`datasets--*`, `spaces--*`) folder holding
    `snapshots/` or `blobs/`. Both the path as spelled and the one its symlinks lead to are
    looked at, so a cache is never reached through a link to it."""
    active = os.path.realpath(cache_dir()[0])
    for spelled in {os.path.abspath(path), os.path.realpath(path)}:
        for node in (Path(spelled), *Path(spelled).parents):
            if os.path.realpath(node) == active and node.is_dir():
                return node
            if (node.name.split(SEPARATOR, 1)[0] in ("models", "datasets", "spaces") and SEPARATOR in node.name
                    and (holds_hub_snapshots(node) or (node / "blobs").is_dir())):
                return node
    return None


def local_path(path: Path, revision: str | None = None) -> tuple[Path, Snapshot | None]:
    """A command's PATH as the local path to read, and the cache snapshot it names if it names one.

    An existing path is that path, always, even when it is also spelled as a repo id (a folder
    `bert-base-uncased` in the working directory wins over the cached repo); a repo folder of the
    cache (`.../models--org--name`) is its snapshot at `revision`; anything else spelled as a
    repo id is looked up in the cache (`resolve`). `revision` applies to the last two only.
    """
    path = Path(path)
    if os.path.lexists(path):
        repo_id = repo_id_of(path.name)
        if repo_id is not None and holds_hub_snapshots(path):
            snapshot = resolve(repo_id, revision, cache=path.parent)
            return snapshot.path, snapshot
        if revision is not None:
            raise bad_input(path, f"is a path, and --revision {revision} applies to a repo id in the Hugging Face "
                                  f"cache (a path always wins over a repo id spelled the same)")
        return path, None
    if is_repo_id(str(path)):
        snapshot = resolve(str(path), revision)
        return snapshot.path, snapshot
    if revision is not None:
        raise bad_input(path, f"does not exist, and is not spelled as a repo id (org/name) that --revision "
                              f"{revision} could apply to")
    return path, None
