"""Repo ids resolved offline in a Hugging Face cache laid out as huggingface_hub lays it out
(tests/hub_cache_layout.py: blobs, relative symlinks, refs, several revisions, a tag), held
against huggingface_hub's own resolution where it has one; symlinked files never replaced, a
conversion into the cache refused, a repo id not in the cache exit 2 naming where it looked."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bertconv.formats.hf import cache as hub_cache
from bertconv.errors import BadInput
from conftest import FIXTURES, needs, run_in_process
from hub_cache_layout import add_snapshot, files_of, folder_of, state

HF = FIXTURES / "hf"
HF_TF = FIXTURES / "hf_tf"
VOCAB = HF_TF / "pretraining" / "vocab.txt"
#: Three commits of one repo; the last two share their first seven digits.
MAIN = "3f1c2a9b8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a"
TAGGED = "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d"
UNREFERENCED = "9e8d7c6f0000000000000000000000000000beef"
REPO = "org/tiny-bert"
CANONICAL = "bert-base-uncased"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A cache with `org/tiny-bert` (main: a BertForPreTraining; tag v1.0 and refs/pr/1: a
    BertForMaskedLM; one more commit no ref points to) and the canonical `bert-base-uncased`."""
    root = tmp_path / "hub"
    pretraining = {**files_of(HF / "pretraining"), "vocab.txt": VOCAB}
    masked_lm = {**files_of(HF / "masked_lm"), "vocab.txt": VOCAB}
    add_snapshot(root, REPO, MAIN, pretraining, refs=("main",))
    add_snapshot(root, REPO, TAGGED, masked_lm, refs=("v1.0", "refs/pr/1"))
    add_snapshot(root, REPO, UNREFERENCED, masked_lm)
    add_snapshot(root, CANONICAL, MAIN, masked_lm, refs=("main",))
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    return root


def _inspect(*args) -> dict:
    result = run_in_process("inspect", *args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


# --- the layout, as huggingface_hub reads it -----------------------------------------------------


def test_the_layout_is_huggingface_hubs_own(cache):
    """huggingface_hub's `scan_cache_dir` finds the repos, revisions, refs and files laid out, and
    its `try_to_load_from_cache` and `snapshot_download(local_files_only=True)` resolve every ref
    and full hash to the snapshot bertconv resolves them to."""
    hub = needs("huggingface_hub")
    scanned = {repo.repo_id: repo for repo in hub.scan_cache_dir(cache).repos}
    assert set(scanned) == {REPO, CANONICAL}
    assert {r.commit_hash: set(r.refs) for r in scanned[REPO].revisions} == {
        MAIN: {"main"}, TAGGED: {"v1.0", "refs/pr/1"}, UNREFERENCED: set()}
    assert not hub.scan_cache_dir(cache).warnings
    ours = {repo.repo_id: repo for repo in hub_cache.cached_repos(cache)}
    assert {r.commit: set(r.refs) for r in ours[REPO].snapshots} == {
        r.commit_hash: set(r.refs) for r in scanned[REPO].revisions}
    for repo_id, revision in [(REPO, None), (REPO, "main"), (REPO, "v1.0"), (REPO, "refs/pr/1"), (REPO, TAGGED),
                              (REPO, UNREFERENCED), (CANONICAL, None)]:
        snapshot = hub_cache.resolve(repo_id, revision)
        assert Path(hub.snapshot_download(repo_id, revision=revision, cache_dir=cache,
                                          local_files_only=True)) == snapshot.path
        for name in ("model.safetensors", "config.json", "vocab.txt"):
            assert hub.try_to_load_from_cache(repo_id, name, cache_dir=cache, revision=revision) == \
                str(snapshot.path / name)


def test_the_cache_is_found_where_huggingface_hub_looks(tmp_path, monkeypatch):
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert hub_cache.cache_dir()[0] == tmp_path / "home" / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub_cache.cache_dir()[0] == tmp_path / "xdg" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", "~/hf")
    assert hub_cache.cache_dir() == (tmp_path / "home" / "hf" / "hub", "HF_HOME/hub")
    monkeypatch.setenv("HUGGINGFACE_HUB_CACHE", str(tmp_path / "legacy"))
    assert hub_cache.cache_dir()[0] == tmp_path / "legacy"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert hub_cache.cache_dir() == (tmp_path / "hub", "HF_HUB_CACHE")


def test_repo_ids_are_spelled_as_huggingface_hub_validates_them():
    hub = pytest.importorskip("huggingface_hub.utils", reason="needs huggingface_hub (the oracle of repo ids)")
    for text in ("org/name", "bert-base-uncased", "Org_1/name.v2", "a/b/c", "org--name", "../x", "org/", "/abs",
                 "-org/name", "org/name.", "x" * 97, "org/na me", "org/..", "fixtures/hf"):
        try:
            hub.validate_repo_id(text)
            valid = True
        except Exception:
            valid = False
        assert hub_cache.is_repo_id(text) == valid, text


# --- repo ids and revisions on the command line -------------------------------------------------


@pytest.mark.parametrize("revision, commit", [(None, MAIN), ("main", MAIN), ("v1.0", TAGGED), ("refs/pr/1", TAGGED),
                                              (TAGGED, TAGGED), (UNREFERENCED[:12], UNREFERENCED)])
def test_a_repo_id_is_read_at_its_revision(cache, revision, commit):
    report = _inspect(REPO, *(("--revision", revision) if revision else ()))
    assert report["path"] == str(folder_of(cache, REPO) / "snapshots" / commit / "model.safetensors")
    assert report["heads"]["nsp"] is (commit == MAIN)
    assert any(f"{REPO}@" in note and "read from the Hugging Face cache" in note for note in report["notes"])


def test_a_canonical_name_alone_is_a_repo_id(cache):
    report = _inspect(CANONICAL)
    assert report["path"].startswith(str(folder_of(cache, CANONICAL) / "snapshots" / MAIN))


def test_a_repo_folder_of_the_cache_alone_is_its_main_snapshot(cache):
    """A directory holding snapshots/ is looked up in the cache even without --revision
    (`api.report.load` reads any other directory as itself, without the cache's module)."""
    report = _inspect(folder_of(cache, REPO))
    assert report["path"].startswith(str(folder_of(cache, REPO) / "snapshots" / MAIN))


def test_a_repo_folder_of_the_cache_is_its_snapshot(cache):
    report = _inspect(folder_of(cache, REPO), "--revision", "v1.0")
    assert report["path"] == str(folder_of(cache, REPO) / "snapshots" / TAGGED / "model.safetensors")


def test_an_ambiguous_short_hash_is_refused_naming_both(cache):
    result = run_in_process("inspect", REPO, "--revision", TAGGED[:7])
    assert result.exit_code == 2 and TAGGED in result.stderr and UNREFERENCED in result.stderr


def test_an_unknown_revision_lists_what_is_cached(cache):
    result = run_in_process("audit", REPO, "--revision", "v2.0")
    assert result.exit_code == 2
    assert "v2.0" in result.stderr and "main -> 3f1c2a9" in result.stderr and "v1.0 -> 9e8d7c6" in result.stderr


def test_a_ref_to_a_commit_not_cached_is_refused(cache):
    (folder_of(cache, REPO) / "refs" / "dev").write_text("0" * 40)
    result = run_in_process("audit", REPO, "--revision", "dev")
    assert result.exit_code == 2 and "0" * 40 in result.stderr and "snapshot is not in the cache" in result.stderr


def test_a_repo_id_not_in_the_cache_names_where_it_looked(cache):
    result = run_in_process("verify", "org/absent", "--json")
    assert result.exit_code == 2
    assert str(folder_of(cache, "org/absent")) in result.stderr and "HF_HUB_CACHE" in result.stderr
    assert json.loads(result.stdout)["error"]["path"] == "org/absent"


def test_an_existing_path_wins_over_a_repo_id(cache, tmp_path, monkeypatch):
    local = tmp_path / "work" / CANONICAL
    local.mkdir(parents=True)
    for name, source in files_of(HF / "pretraining").items():
        (local / name).write_bytes(source.read_bytes())
    monkeypatch.chdir(tmp_path / "work")
    report = _inspect(CANONICAL)
    assert report["path"] == f"{CANONICAL}/model.safetensors" and report["heads"]["nsp"]
    assert not any("Hugging Face cache" in note for note in report["notes"])
    result = run_in_process("inspect", CANONICAL, "--revision", "main")
    assert result.exit_code == 2 and "is a path" in result.stderr


def test_no_network_is_ever_reached(cache, monkeypatch):
    """Resolution reads the disk only: with every socket refused, a repo id still resolves."""
    import socket

    def refuse(*args, **kwargs):
        raise AssertionError("a network connection was attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    assert _inspect(REPO)["format"] == "hf-safetensors"


# --- the cache is read, never written -----------------------------------------------------------


def test_converting_from_the_cache_leaves_it_as_it_was(cache, tmp_path):
    before = state(cache)
    out = tmp_path / "out"
    result = run_in_process("convert", REPO, out, "--to", "hf", "--revision", "v1.0")
    assert result.exit_code == 0, result.stderr
    assert state(cache) == before
    assert (out / "vocab.txt").is_file() and not (out / "vocab.txt").is_symlink()
    assert (out / "vocab.txt").read_bytes() == VOCAB.read_bytes()
    assert run_in_process("diff", out, folder_of(cache, REPO) / "snapshots" / TAGGED).exit_code == 0


@pytest.mark.parametrize("where", ["snapshot", "inside-snapshot", "blobs", "cache-root", "through-a-link"])
def test_converting_into_the_cache_is_refused(cache, tmp_path, where):
    snapshot = folder_of(cache, REPO) / "snapshots" / MAIN
    (tmp_path / "link").symlink_to(cache)
    destination = {"snapshot": snapshot, "inside-snapshot": snapshot / "converted",
                   "blobs": folder_of(cache, REPO) / "blobs" / "new", "cache-root": cache / "converted",
                   "through-a-link": tmp_path / "link" / "converted"}[where]
    before = state(cache)
    result = run_in_process("convert", HF / "masked_lm", destination, "--to", "hf", "--force")
    assert result.exit_code == 2, result.stdout
    assert "Hugging Face cache" in result.stderr or "which this conversion reads" in result.stderr
    assert state(cache) == before
    assert not os.path.lexists(destination) or where == "snapshot"


def test_library_resolution_refuses_a_path_like_revision(cache):
    with pytest.raises(BadInput, match="not a branch, tag or commit"):
        hub_cache.resolve(REPO, "../../etc")
