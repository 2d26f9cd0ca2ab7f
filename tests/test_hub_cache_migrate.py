"""The cache as a whole: its inventory (`inspect --cache`, `inspect --recursive CACHE`) and the
migration of its stranded repos (`migrate-cache`), on a cache laid out as huggingface_hub lays it
out, with the tf_model.h5 and flax_model.msgpack fixtures as the stranded repos."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import FIXTURES, needs, run_in_process
from hub_cache_layout import add_snapshot, files_of, folder_of, state

HF, HF_TF, HF_FLAX = FIXTURES / "hf", FIXTURES / "hf_tf", FIXTURES / "hf_flax"
VOCAB = HF_TF / "pretraining" / "vocab.txt"
STRANDED = {"org/tf-only": HF_TF / "pretraining", "org/flax-only": HF_FLAX / "masked_lm",
            "tf-sharded": HF_TF / "sharded"}
WEIGHTS = ("tf_model.h5", "flax_model.msgpack", "tf_model.h5.index.json", "config.json", "vocab.txt")


def _commit(n: int) -> str:
    return f"{n:x}" * 40


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """Three stranded repos (TF, Flax, sharded TF), one safetensors repo at two revisions, one holding
    safetensors and tf_model.h5 (not stranded), one cached for its tokenizer alone."""
    root = tmp_path / "hub"
    for n, (repo_id, fixture) in enumerate(STRANDED.items(), start=1):
        files = {p.name: p for p in sorted(fixture.iterdir()) if p.is_file() and (p.name in WEIGHTS or
                                                                                  p.name.startswith("tf_model-"))}
        add_snapshot(root, repo_id, _commit(n), {"vocab.txt": VOCAB, **files}, refs=("main",))
    add_snapshot(root, "org/safe", _commit(4), files_of(HF / "pretraining"), refs=("main",))
    add_snapshot(root, "org/safe", _commit(5), files_of(HF / "masked_lm"), refs=("v1",))
    add_snapshot(root, "org/both", _commit(6), {"model.safetensors": HF_TF / "pretraining" / "pt" / "model.safetensors",
                                                **files_of(HF_TF / "pretraining", WEIGHTS)}, refs=("main",))
    add_snapshot(root, "org/tokenizer-only", _commit(7), {"vocab.txt": VOCAB}, refs=("main",))
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    return root


def _lines(result) -> list[dict]:
    return [json.loads(line) for line in result.stdout.splitlines()]


def _assert_valid(command: str, objects: list[dict]) -> None:
    needs("jsonschema")
    from test_json_output import assert_valid

    for obj in objects:
        assert_valid(command, obj)


# --- the inventory -------------------------------------------------------------------------------


def test_the_inventory_has_a_row_per_repo_and_revision(cache):
    result = run_in_process("inspect", "--cache", "--json", "--jobs", "2")
    assert result.exit_code == 0, result.stdout
    rows = {(row["repo_id"], row["commit"]): row for row in _lines(result)}
    assert set(rows) == {("org/tf-only", _commit(1)), ("org/flax-only", _commit(2)), ("tf-sharded", _commit(3)),
                         ("org/safe", _commit(4)), ("org/safe", _commit(5)), ("org/both", _commit(6)),
                         ("org/tokenizer-only", _commit(7))}
    _assert_valid("inspect", [row for row in rows.values() if "error" not in row])
    safe_main, safe_v1 = rows["org/safe", _commit(4)], rows["org/safe", _commit(5)]
    assert safe_main["refs"] == ["main"] and safe_v1["refs"] == ["v1"]
    assert safe_main["heads"]["nsp"] and not safe_v1["heads"]["nsp"]
    assert safe_main["parameters"] == json.loads(run_in_process("inspect", HF / "pretraining", "--json").stdout)[
        "parameters"]
    assert rows["org/both", _commit(6)]["checkpoints"] == {"model.safetensors": "hf", "tf_model.h5": "hf-tf"}
    assert rows["org/both", _commit(6)]["path"].endswith("model.safetensors")
    assert rows["org/flax-only", _commit(2)]["checkpoints"] == {"flax_model.msgpack": "hf-flax"}
    assert rows["tf-sharded", _commit(3)]["checkpoints"] == {"tf_model.h5.index.json": "hf-tf"}
    for key in rows:
        if key[0] != "org/tokenizer-only":
            assert rows[key]["mlm_head"] == "complete" and rows[key]["family"] == "bert", key
    assert rows["org/tokenizer-only", _commit(7)]["checkpoints"] == {}


def test_the_inventory_lists_what_huggingface_hub_scans(cache):
    hub = needs("huggingface_hub")
    rows = _lines(run_in_process("inspect", "--cache", "--json", "--jobs", "1"))
    scanned = {(repo.repo_id, revision.commit_hash, tuple(sorted(revision.refs)))
               for repo in hub.scan_cache_dir(cache).repos for revision in repo.revisions}
    assert {(row["repo_id"], row["commit"], tuple(sorted(row["refs"]))) for row in rows} == scanned


def test_the_inventory_table_and_recursive_over_a_cache(cache):
    table = run_in_process("inspect", "--recursive", cache, "--jobs", "1")
    assert table.exit_code == 0
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["repo", "revision", "family", "formats", "MLM", "head", "parameters"]
    assert any(line.startswith("org/safe") and "v1 (5555555)" in line for line in lines)
    assert any(line.startswith("org/tokenizer-only") and "no weights cached" in line for line in lines)
    assert "6 repo(s), 7 cached revision(s)" in lines[-1]
    assert _lines(run_in_process("inspect", cache, "--cache", "--json", "-j", "1")) == \
        _lines(run_in_process("inspect", "-r", cache, "--json", "-j", "1"))


# --- the migration -------------------------------------------------------------------------------


def test_stranded_repos_are_converted_outside_the_cache(cache, tmp_path):
    before = state(cache)
    out = tmp_path / "migrated"
    result = run_in_process("migrate-cache", out, "--jobs", "2", "--json")
    assert result.exit_code == 0, result.stdout
    reports = _lines(result)
    _assert_valid("migrate-cache", reports)
    assert {r["repo_id"]: r["status"] for r in reports} == {repo_id: "converted" for repo_id in STRANDED}
    assert state(cache) == before
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == sorted(
        f"{repo_id}/{name}" for repo_id in STRANDED for name in ("model.safetensors", "config.json", "vocab.txt"))
    for n, repo_id in enumerate(STRANDED, start=1):
        snapshot = folder_of(cache, repo_id) / "snapshots" / _commit(n)
        assert run_in_process("diff", out / repo_id, snapshot).exit_code == 0, repo_id  # bit for bit
        assert (out / repo_id / "vocab.txt").read_bytes() == VOCAB.read_bytes()


def test_a_rerun_leaves_what_is_there_and_the_summary_says_so(cache, tmp_path):
    out = tmp_path / "migrated"
    first = run_in_process("migrate-cache", out, "--cache", cache, "-j", "1")
    assert first.exit_code == 0 and "3 stranded repo(s)" in first.stdout and "3 converted" in first.stdout
    assert all(any(line.startswith(repo_id) and "converted" in line for line in first.stdout.splitlines())
               for repo_id in STRANDED)
    written = state(out)
    again = run_in_process("migrate-cache", out, "--cache", cache, "-j", "1")
    assert again.exit_code == 0 and "0 converted, 3 already there" in again.stdout
    assert state(out) == written


def test_a_stranded_repo_that_cannot_be_read_is_a_row_and_the_others_go_on(cache, tmp_path):
    add_snapshot(cache, "org/broken", _commit(8), {"tf_model.h5": b"\x89HDF\r\n\x1a\n truncated",
                                                   "config.json": HF_TF / "pretraining" / "config.json"},
                 refs=("main",))
    result = run_in_process("migrate-cache", tmp_path / "out", "-j", "2", "--json")
    assert result.exit_code == 2
    by_repo = {r["repo_id"]: r for r in _lines(result)}
    assert by_repo["org/broken"]["status"] == "error" and not (tmp_path / "out" / "org" / "broken").exists()
    assert all(by_repo[repo_id]["status"] == "converted" for repo_id in STRANDED)


@pytest.mark.parametrize("inside", ["cache-root", "repo-folder"])
def test_the_output_is_never_inside_the_cache(cache, inside):
    before = state(cache)
    out = cache / "migrated" if inside == "cache-root" else folder_of(cache, "org/safe") / "migrated"
    result = run_in_process("migrate-cache", out, "--cache", cache)
    assert result.exit_code == 2 and "Hugging Face cache" in result.stderr
    assert state(cache) == before and not out.exists()


def test_a_cache_that_is_not_there_is_exit_two(tmp_path):
    result = run_in_process("migrate-cache", tmp_path / "out", "--cache", tmp_path / "nowhere")
    assert result.exit_code == 2 and "nowhere" in result.stderr
