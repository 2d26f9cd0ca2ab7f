"""Clear messages for the everyday mistakes: each names the file and what was expected, with the
exit status the CLI documents (2 bad input, 1 a failed check) and never a traceback.

Cases run the command line in this process (`cli`: an exception escaping it fails the test as a
traceback would); a few run `bertconv` as a separate process, as a user does (`run_cli`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import FIXTURES, real_file, run_cli, run_in_process

HF = FIXTURES / "hf"
TF = FIXTURES / "tf"
WORD_HF = "bert.embeddings.word_embeddings.weight"


#: `bertconv ARGS` in this process.
cli = run_in_process


def fails(result, status: int, *needles: str) -> str:
    """Assert exit `status`, no traceback, and each needle in the output; returns the output."""
    output = result.stdout + result.stderr
    assert result.exit_code == status, output
    assert "Traceback" not in output
    for needle in needles:
        assert needle in output, f"{needle!r} not in: {output}"
    return output


def copy(source: Path, tmp_path: Path, name: str | None = None) -> Path:
    destination = tmp_path / (name or source.name)
    shutil.copytree(source, destination)
    return destination


# --- two checkpoints in one directory -------------------------------------------------------


@pytest.mark.parametrize("second", ["tf bundle", "bert4keras h5"])
def test_directory_with_two_checkpoints(tmp_path, second):
    """(model.safetensors beside pytorch_model.bin is one model in two of transformers' formats,
    read as transformers reads it: tests/test_hub_cache_formats.py.)"""
    directory = copy(HF / "pretraining", tmp_path, "two")
    if second == "tf bundle":
        for file in (TF / "full").glob("bert_model.ckpt.*"):
            shutil.copy(file, directory)
        names = ("model.safetensors", "bert_model.ckpt")
    else:
        shutil.copy(FIXTURES / "bert4keras" / "v50-mlm" / "bert4keras_model.h5", directory)
        names = ("model.safetensors", "bert4keras_model.h5")
    for args in (("audit", directory), ("convert", directory, tmp_path / "out", "--to", "hf")):
        fails(cli(*args), 2, str(directory), "2 checkpoints", *names, "pass the one")
    assert not (tmp_path / "out").exists()
    assert cli("audit", directory / "model.safetensors").exit_code == 0  # naming one works


def test_directory_with_two_tf_bundles(tmp_path):
    directory = tmp_path / "bundles"
    directory.mkdir()
    for prefix in ("a.ckpt", "b.ckpt"):
        for file in (TF / "encoder_only").glob("bert_model.ckpt.*"):
            shutil.copy(file, directory / file.name.replace("bert_model.ckpt", prefix))
    fails(cli("inspect", directory), 2, str(directory), "2 checkpoints", "a.ckpt", "b.ckpt", "pass the one")
    assert cli("inspect", directory / "b.ckpt").exit_code == 0


# --- a config that disagrees with the tensors -----------------------------------------------


def test_config_that_disagrees_with_the_shapes(tmp_path):
    directory = copy(HF / "pretraining", tmp_path)
    config = json.loads((directory / "config.json").read_text())
    config["hidden_size"] = 48
    (directory / "config.json").write_text(json.dumps(config))
    fails(cli("audit", directory), 1, WORD_HF, "shape [99, 32]", "config expects [99, 48]", "audit FAILED")
    fails(cli("verify", directory), 1, WORD_HF, "config expects [99, 48]")
    out = fails(run_cli("convert", directory, tmp_path / "out", "--to", "tf"), 2,
                str(directory / "model.safetensors"), "disagree with the config", WORD_HF, "config expects [99, 48]")
    assert "bertconv: error:" in out
    assert not (tmp_path / "out").exists()


def test_config_given_with_config_that_disagrees(tmp_path):
    config = json.loads((TF / "full" / "bert_config.json").read_text())
    config["vocab_size"] = 100
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(config))
    fails(cli("audit", TF / "full", "--config", path), 1, "bert/embeddings/word_embeddings",
          "shape [99, 32]", "config expects [100, 32]")
    fails(cli("convert", TF / "full", tmp_path / "out", "--to", "hf", "--config", path), 2,
          "bert/embeddings/word_embeddings", "config expects [100, 32]")


def test_config_file_that_does_not_exist(tmp_path):
    fails(cli("audit", HF / "pretraining", "--config", tmp_path / "nope.json"), 2,
          str(tmp_path / "nope.json"), "does not exist")


# --- vocab.txt against the embedding rows ---------------------------------------------------


@pytest.mark.parametrize("tokens", [90, 120])
def test_vocab_whose_size_differs_from_the_embedding_rows(tmp_path, tokens):
    directory = copy(TF / "full", tmp_path)
    lines = (directory / "vocab.txt").read_text().splitlines()
    lines = lines[:tokens] + [f"extra{i}" for i in range(tokens - len(lines))]
    (directory / "vocab.txt").write_text("\n".join(lines) + "\n")
    vocab = str(directory / "vocab.txt")

    fails(cli("verify", directory), 1, vocab, f"{tokens} tokens", "99 rows", "bert/embeddings/word_embeddings",
          "verify FAILED")
    report = json.loads(cli("verify", "--json", directory).stdout)
    assert not report["ok"] and any(vocab in p and f"{tokens} tokens" in p for p in report["problems"])

    result = run_cli("convert", directory, tmp_path / "out", "--to", "hf")
    assert result.exit_code == 0, result.stderr
    assert "warning" in result.stderr and vocab in result.stderr and f"{tokens} tokens" in result.stderr
    assert "99 rows" in result.stderr
    # a quiet conversion still warns
    result = cli("convert", directory, tmp_path / "out2", "--to", "tf", "--quiet")
    assert result.exit_code == 0 and f"{tokens} tokens" in result.stderr


def test_matching_vocab_and_a_vocab_without_final_newline_pass(tmp_path):
    assert cli("verify", TF / "full").exit_code == 0
    directory = copy(TF / "full", tmp_path)
    vocab = directory / "vocab.txt"
    vocab.write_bytes(vocab.read_bytes().rstrip(b"\n"))  # 99 tokens, no newline after the last
    assert cli("verify", directory).exit_code == 0
    result = cli("convert", directory, tmp_path / "out", "--to", "hf")
    assert result.exit_code == 0 and "warning" not in result.stderr


@pytest.mark.parametrize("content,tokens", [(b"", 0), (b"a", 1), (b"a\n", 1), (b"a\nb", 2), (b"a\r\nb\r\n", 2),
                                            (b"\n", 1), (b"a\n\nb\n", 3)])
def test_vocab_tokens_are_counted_as_the_tokenizer_reads_them(tmp_path, content, tokens):
    from bertconv.checks.vocab import VOCAB_READ_BYTES, count_vocab_tokens

    path = tmp_path / "vocab.txt"
    path.write_bytes(content)
    lines = content.decode().split("\n")
    assert count_vocab_tokens(path) == tokens == len(lines) - (lines[-1] == "")
    path.write_bytes(b"x\n" * (VOCAB_READ_BYTES // 2 + 7))  # across read chunks
    assert count_vocab_tokens(path) == VOCAB_READ_BYTES // 2 + 7


# --- a path that does not exist -------------------------------------------------------------


@pytest.mark.parametrize("command", ["inspect", "audit", "verify", "convert", "diff-a", "diff-b", "fill-mask"])
def test_path_that_does_not_exist(tmp_path, command):
    missing = tmp_path / "no" / "such" / "bert_model.ckpt"
    args = {
        "convert": ("convert", missing, tmp_path / "out", "--to", "hf"),
        "diff-a": ("diff", missing, HF / "pretraining"),
        "diff-b": ("diff", HF / "pretraining", missing),
        "fill-mask": ("fill-mask", missing, "a [MASK] b"),
    }.get(command, (command, missing))
    fails((run_cli if command == "inspect" else cli)(*args), 2, str(missing), "does not exist")


def test_index_of_a_prefix_that_does_not_exist(tmp_path):
    fails(cli("inspect", tmp_path / "model.ckpt.index"), 2, str(tmp_path / "model.ckpt.index"), "does not exist")


# --- a TF prefix given with a suffix ----------------------------------------------------------


@pytest.mark.parametrize("fixture,suffixes", [
    ("full", ["", ".index", ".data-00000-of-00001"]),
    ("two_shards", ["", ".index", ".data-00000-of-00002", ".data-00001-of-00002"]),
])
def test_prefix_given_with_index_or_data_suffix_is_the_same_checkpoint(fixture, suffixes):
    prefix = TF / fixture / "bert_model.ckpt"
    reports = []
    for suffix in suffixes:
        result = cli("inspect", "--json", f"{prefix}{suffix}")
        assert result.exit_code == 0, result.stderr
        reports.append(json.loads(result.stdout))
    assert all(r == reports[0] for r in reports)
    assert reports[0]["path"] == str(prefix)
    directory = json.loads(cli("inspect", "--json", TF / fixture).stdout)
    assert directory["tensors"] == reports[0]["tensors"]


def test_data_suffix_conversion_equals_prefix_conversion(tmp_path):
    prefix = TF / "full" / "bert_model.ckpt"
    assert cli("convert", f"{prefix}.data-00000-of-00001", tmp_path / "a", "--to", "hf").exit_code == 0
    assert cli("convert", prefix, tmp_path / "b", "--to", "hf").exit_code == 0
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()


# --- HDF5 files that are not BERT -----------------------------------------------------------


def test_real_keras_file_that_is_not_bert():
    path = real_file("keras2-bilstm-not-bert.weights.h5")
    fails(run_cli("inspect", path), 2, str(path), "not a bert4keras BERT", "Embedding-Token")
    for args in (("audit", path), ("verify", path), ("convert", path, "unused", "--to", "hf")):
        fails(cli(*args), 2, str(path), "not a bert4keras BERT", "Embedding-Token")


def test_hdf5_files_that_are_not_bert(tmp_path):
    plain = tmp_path / "data.h5"
    with h5py.File(plain, "w") as f:
        f["x"] = np.zeros(3)
    fails(cli("inspect", plain), 2, str(plain), "HDF5", "layer_names", "not a Keras weights file")

    keras_not_bert = tmp_path / "classifier.h5"
    with h5py.File(keras_not_bert, "w") as f:
        f.attrs["layer_names"] = [b"dense_1"]
        group = f.create_group("dense_1")
        group.attrs["weight_names"] = [b"dense_1/kernel:0", b"dense_1/bias:0"]
        group["dense_1/kernel:0"] = np.zeros((4, 2), np.float32)
        group["dense_1/bias:0"] = np.zeros(2, np.float32)
    fails(cli("audit", keras_not_bert), 2, str(keras_not_bert), "dense_1", "Embedding-Token")

    keras3 = tmp_path / "model.weights.h5"
    with h5py.File(keras3, "w") as f:
        f.create_group("layers/dense/vars")["0"] = np.zeros((2, 2), np.float32)
    fails(cli("inspect", keras3), 2, str(keras3), "Keras 3")


def test_not_a_checkpoint_at_all(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    fails(cli("inspect", path), 2, str(path), "not a checkpoint bertconv reads")
    empty = tmp_path / "empty"
    empty.mkdir()
    fails(cli("inspect", empty), 2, str(empty), "holds no checkpoint", "model.safetensors")


# --- what a path is, said as it is (issue 26) -------------------------------------------------------

TIED = FIXTURES / "runtime" / "pretraining"


def sharded(directory: Path) -> Path:
    """The tied fixture as a two-shard checkpoint whose second shard is for the test to make."""
    directory.mkdir()
    shutil.copy(TIED / "config.json", directory)
    shutil.copy(TIED / "model.safetensors", directory / "model-00001-of-00002.safetensors")
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    return directory / "model-00002-of-00002.safetensors"


@pytest.mark.parametrize("kind, said", [("fifo", "is a FIFO (named pipe), not a regular file"),
                                        ("directory", "is a directory, not a file"), ("absent", "does not exist")])
def test_a_shard_that_is_not_a_file_is_said_to_be_what_it_is(tmp_path, kind, said):
    shard = sharded(tmp_path / "ckpt")
    if kind == "fifo":
        os.mkfifo(shard)
    elif kind == "directory":
        shard.mkdir()
    fails(cli("audit", tmp_path / "ckpt"), 2, "model.safetensors.index.json",
          f"shard 'model-00002-of-00002.safetensors' listed in the weight_map {said}")


def test_a_directory_whose_checkpoint_is_a_fifo_says_so(tmp_path):
    directory = tmp_path / "ckpt"
    directory.mkdir()
    shutil.copy(TIED / "config.json", directory)
    os.mkfifo(directory / "model.safetensors")
    fails(cli("audit", directory), 2, "model.safetensors is a FIFO (named pipe), not a regular file")


def test_a_destination_whose_parent_is_a_file_says_so(tmp_path):
    (tmp_path / "afile").write_text("")
    output = fails(cli("convert", TIED, tmp_path / "afile" / "out", "--to", "hf"), 2,
                   f"parent {tmp_path / 'afile'} is a file, not a directory")
    assert "does not exist" not in output


def test_one_foreign_entry_is_one_entry_that_is(tmp_path):
    destination = tmp_path / "out"
    assert cli("convert", TIED, destination, "--to", "hf").exit_code == 0
    (destination / "stray").write_text("")
    fails(cli("convert", TIED, destination, "--to", "hf", "--force"), 2, "holds 1 entry that is not part")


def test_a_linked_vocab_txt_is_a_tokenizer_file_on_both_sides(tmp_path):
    """A Hugging Face cache's snapshot links every file: its vocab.txt is carried into the output;
    a vocab.txt link in an earlier output is replaced (the link, never what it points to)."""
    source = tmp_path / "snapshot"
    source.mkdir()
    for name in ("config.json", "model.safetensors", "vocab.txt"):
        (source / name).symlink_to(TIED / name)
    destination = tmp_path / "out"
    assert cli("convert", source, destination, "--to", "hf").exit_code == 0
    assert (destination / "vocab.txt").read_bytes() == (TIED / "vocab.txt").read_bytes()
    assert not (destination / "vocab.txt").is_symlink()
    (destination / "vocab.txt").unlink()
    elsewhere = tmp_path / "vocab-elsewhere.txt"
    shutil.copy(TIED / "vocab.txt", elsewhere)
    (destination / "vocab.txt").symlink_to(elsewhere)
    result = cli("convert", TIED, destination, "--to", "hf", "--force")
    assert result.exit_code == 0, result.stderr
    assert not (destination / "vocab.txt").is_symlink() and elsewhere.read_bytes() == (TIED / "vocab.txt").read_bytes()


@pytest.mark.parametrize("target", ["bert4keras", "hf-tf"])
def test_a_file_size_limit_is_one_line_and_nothing_left(tmp_path, target):
    """Under `ulimit -f` the HDF5 writers' OSError carries HDF5's whole report; the message is one line."""
    import subprocess
    import sys
    from conftest import ROOT
    limit = "import resource; resource.setrlimit(resource.RLIMIT_FSIZE, (40960, 40960)); "
    code = limit + "from bertconv.cli import main; main()"
    proc = subprocess.run([sys.executable, "-c", code, "convert", str(TIED), str(tmp_path / "out"), "--to", target],
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "file too large" in proc.stderr and "errno" not in proc.stderr
    assert list(tmp_path.iterdir()) == []
