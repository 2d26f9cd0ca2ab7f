"""A verdict that can be believed, and no data lost (issue 13): each case from the command line,
asserting the exit status, the message, what is left on disk, and that inputs are untouched.

Sections follow the issue: a conversion keeps the computation or refuses; nothing is destroyed
that was not asked for; checks that say "ok" have looked; bad input gets a message.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bertconv import formats
from bertconv.destination.atomic import PARTIAL_MARK, atomic_output
from bertconv.checks.diff import diff
from bertconv.config import COMPUTATION_FIELDS
from bertconv.conversion import convert
from bertconv.errors import BadInput
from conftest import FIXTURES, needs, run_in_a_child, run_in_process

HF = FIXTURES / "hf" / "pretraining"
TF = FIXTURES / "tf" / "full"
TARGETS = ("hf", "tf", "bert4keras")


def digest(path: Path) -> dict[str, str]:
    """sha256 of every file under `path` (or of `path`), with the kinds of what is not a file."""
    if path.is_symlink() or not path.exists():
        return {str(path): "link" if path.is_symlink() else "absent"}
    files = sorted(path.rglob("*")) if path.is_dir() else [path]
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest() if f.is_file() else "dir" for f in files}


def copy_of(source: Path, directory: Path, **config_changes) -> Path:
    """A copy of a fixture directory, its config.json / bert_config.json edited."""
    shutil.copytree(source, directory)
    for name in ("config.json", "bert_config.json"):
        if (directory / name).exists() and config_changes:
            config = json.loads((directory / name).read_text())
            config.update(config_changes)
            (directory / name).write_text(json.dumps(config))
    return directory


def computation(tree) -> dict:
    return {name: getattr(tree.config, name) for name in COMPUTATION_FIELDS}


# --- a conversion keeps the computation, or refuses ------------------------------------------------


#: Configs whose every computation field differs from a default somewhere.
CONFIGS = [
    dict(num_attention_heads=8, layer_norm_eps=1e-5, hidden_act="gelu_new"),
    dict(num_attention_heads=2, layer_norm_eps=1e-12, hidden_act="gelu"),
    dict(num_attention_heads=1, layer_norm_eps=1e-6, hidden_act="relu"),
]


@pytest.mark.parametrize("changes", CONFIGS, ids=["A8-eps1e-5-tanh", "A2-erf", "A1-eps1e-6-relu"])
def test_every_pair_of_formats_round_trips_values_and_config(tmp_path, changes):
    source = formats.read(copy_of(HF, tmp_path / "source", **changes))
    there = {}  # each format's conversion of the source, written once and read by every pair
    for a in TARGETS:
        convert(source, tmp_path / f"{a}-x", a)
        there[a] = formats.read(tmp_path / f"{a}-x")
    for a, b in itertools.product(TARGETS, repeat=2):
        y = tmp_path / f"{a}-{b}-y"
        z = tmp_path / f"{a}-{b}-z"
        convert(there[a], y, b)
        convert(formats.read(y), z, a)
        back = formats.read(z)
        assert computation(back) == computation(there[a]) == computation(source), (a, b)
        report = diff(there[a], back)
        assert report["identical"] and report["ok"], (a, b, report["problems"])
        assert diff(source, back)["identical"], (a, b)


def test_minilm_through_bert4keras_keeps_its_twelve_heads_and_outputs(minilm, tmp_path):
    from bertconv.runtime import NumpyBert

    assert run_in_process("convert", minilm, tmp_path / "b4k", "--to", "bert4keras").exit_code == 0
    result = run_in_process("convert", tmp_path / "b4k", tmp_path / "hf", "--to", "hf")
    assert result.exit_code == 0, result.stderr
    back = formats.read(tmp_path / "hf")
    assert back.config.num_attention_heads == 12
    assert run_in_process("diff", minilm, tmp_path / "hf").exit_code == 0
    ids = np.random.default_rng(0).integers(0, back.config.vocab_size, (2, 9))
    ones, zeros = np.ones_like(ids), np.zeros_like(ids)
    original = NumpyBert(formats.read(minilm))(ids, zeros, ones).sequence_output
    converted = NumpyBert(back)(ids, zeros, ones).sequence_output
    assert np.array_equal(original, converted)


def test_layer_norm_eps_survives_tf_and_back(tmp_path):
    source = copy_of(HF, tmp_path / "source", layer_norm_eps=1e-5)
    assert run_in_process("convert", source, tmp_path / "tf", "--to", "tf").exit_code == 0
    assert run_in_process("convert", tmp_path / "tf", tmp_path / "hf", "--to", "hf").exit_code == 0
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["layer_norm_eps"] == 1e-5


def test_a_field_the_output_cannot_keep_is_refused_unless_accepted(tmp_path):
    source = copy_of(HF, tmp_path / "source", tie_word_embeddings=False)  # untied, but no decoder stored
    before = digest(source)
    result = run_in_process("convert", source, tmp_path / "tf", "--to", "tf")
    assert result.exit_code == 2
    assert "tie_word_embeddings" in result.stderr and "--accept-loss" in result.stderr
    assert not (tmp_path / "tf").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["source"]
    result = run_in_process("convert", source, tmp_path / "tf", "--to", "tf", "--accept-loss", "tie_word_embeddings")
    assert result.exit_code == 0, result.stderr
    assert "accepted loss: tie_word_embeddings is False in the source, True in the output" in result.stderr
    assert digest(source) == before


def test_a_default_written_down_as_a_fact_is_said(tmp_path):
    shutil.copy(HF / "model.safetensors", tmp_path)  # no config: the head count is H / 64
    result = run_in_process("convert", tmp_path / "model.safetensors", tmp_path / "out", "--to", "hf")
    assert result.exit_code == 0, result.stderr
    assert "num_attention_heads = 1 is bertconv's default (no config stated it)" in result.stderr


def test_diff_counts_a_config_difference_as_a_difference(tmp_path):
    other = copy_of(HF, tmp_path / "other", num_attention_heads=8)
    result = run_in_process("diff", HF, other)
    assert result.exit_code == 1
    assert "num_attention_heads is 4 in A (file), 8 in B (file)" in result.stdout
    assert "identical" not in result.stdout
    report = json.loads(run_in_process("diff", HF, other, "--json").stdout)
    assert not report["ok"] and report["config_differences"][0]["field"] == "num_attention_heads"


def _bin_with_extra_heads(directory: Path) -> Path:
    """The HF fixture as a transformers-4-style pytorch_model.bin: a tied decoder stored (sharing
    the embeddings' storage) and three heads BERT pre-training does not define."""
    torch, load_file = needs("torch"), needs("safetensors.torch").load_file

    state = load_file(str(HF / "model.safetensors"))
    state["cls.predictions.decoder.weight"] = state["bert.embeddings.word_embeddings.weight"]
    state["classifier.weight"] = torch.ones(3, 32)
    state["classifier.bias"] = torch.ones(3)
    state["qa_outputs.weight"] = torch.ones(2, 32)
    directory.mkdir()
    torch.save(state, directory / "pytorch_model.bin")
    shutil.copy(HF / "config.json", directory)
    return directory


def test_convert_names_what_it_drops_and_counts_what_it_wrote(tmp_path):
    source = _bin_with_extra_heads(tmp_path / "bin")
    result = run_in_process("convert", source, tmp_path / "out", "--to", "hf", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    header_length = int.from_bytes((tmp_path / "out" / "model.safetensors").read_bytes()[:8], "little")
    header = json.loads((tmp_path / "out" / "model.safetensors").read_bytes()[8:8 + header_length])
    assert sorted(report["output"]["tensors"]) == sorted(k for k in header if k != "__metadata__")
    assert len(report["output"]["tensors"]) == 46 and report["output"]["format"] == "hf"
    ignored = {entry["name"]: entry for entry in report["ignored"]}
    assert set(ignored) == {"classifier.weight", "classifier.bias", "qa_outputs.weight",
                            "cls.predictions.decoder.weight"}
    assert ignored["classifier.weight"]["parameters"] == 96
    assert "tied copy" in ignored["cls.predictions.decoder.weight"]["reason"]
    assert report["output"]["files"] == [str(tmp_path / "out" / n) for n in ("model.safetensors", "config.json")]

    result = run_in_process("convert", source, tmp_path / "text", "--to", "hf")
    assert "46 tensors written" in result.stderr
    assert "not written: ignored 3 entries (163 values; a fine-tuning head" in result.stderr


# --- nothing is destroyed that was not asked for ---------------------------------------------------


@pytest.fixture
def source(tmp_path) -> Path:
    """The HF fixture with tokenizer files beside it, as a real checkpoint directory has."""
    directory = copy_of(HF, tmp_path / "src")
    (directory / "vocab.txt").write_text("".join(f"t{i}\n" for i in range(99)))
    (directory / "tokenizer.json").write_text('{"model": "wordpiece"}')
    (directory / "special_tokens_map.json").write_text('{"unk_token": "[UNK]"}')
    return directory


@pytest.mark.parametrize("spelling", ["symlink", "dotdot", "file-inside", "same-file", "hard-link"])
def test_no_spelling_of_an_input_is_replaced(tmp_path, source, spelling):
    before = digest(source)
    if spelling == "symlink":
        (tmp_path / "alias").symlink_to(source)
        args = (tmp_path / "alias", source)
    elif spelling == "dotdot":
        args = (source / "model.safetensors", source / ".." / "src")
    elif spelling == "file-inside":
        args = (source, source / "vocab.txt")
    elif spelling == "same-file":
        args = (source / "model.safetensors", source / "model.safetensors")
    else:
        os.link(source / "model.safetensors", tmp_path / "link.safetensors")
        args = (source, tmp_path / "link.safetensors")
    result = run_in_process("convert", *args, "--to", "hf", "--force")
    assert result.exit_code == 2, result.stderr
    assert "which this conversion reads" in result.stderr and "Traceback" not in result.stderr
    assert digest(source) == before


def test_a_destination_inside_the_source_or_holding_the_config_is_refused(tmp_path, source):
    result = run_in_process("convert", source, source / "tf", "--to", "tf")
    assert result.exit_code == 2 and "lies inside" in result.stderr
    configs = tmp_path / "configs"
    configs.mkdir()
    shutil.copy(source / "config.json", configs / "config.json")
    before = digest(configs)
    result = run_in_process("convert", source / "model.safetensors", configs, "--to", "hf", "--force",
                     "--config", configs / "config.json")
    assert result.exit_code == 2 and "contains" in result.stderr
    assert digest(configs) == before and not (source / "tf").exists()


def test_force_refuses_a_directory_with_other_content(tmp_path):
    destination = tmp_path / "models"
    (destination / "other-model").mkdir(parents=True)
    (destination / "notes.txt").write_text("my notes")
    before = digest(destination)
    for target in TARGETS:
        result = run_in_process("convert", HF, destination, "--to", target, "--force")
        assert result.exit_code == 2, result.stderr
        assert "not part of the checkpoint" in result.stderr and "notes.txt" in result.stderr
        assert digest(destination) == before


def test_force_replaces_only_a_checkpoint_of_the_same_kind(tmp_path):
    destination = tmp_path / "out"
    assert run_in_process("convert", HF, destination, "--to", "tf").exit_code == 0
    before = digest(destination)
    result = run_in_process("convert", HF, destination, "--to", "hf", "--force")
    assert result.exit_code == 2 and "bert_model.ckpt.index" in result.stderr
    assert digest(destination) == before


def _special_files(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sock = tmp_path / "socket"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock))
    server.close()
    made = {"FIFO": fifo, "socket": sock}
    if os.geteuid() == 0:  # root can make a device node: the /dev/null case, without touching /dev
        device = tmp_path / "null"
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        made["character device"] = device
    return made


def test_force_never_replaces_a_device_fifo_socket_file_or_link(tmp_path):
    targets = _special_files(tmp_path)
    (tmp_path / "plain-file").write_text("not a checkpoint")
    targets["a file"] = tmp_path / "plain-file"
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    targets["symbolic link"] = tmp_path / "link"
    for what, path in targets.items():
        mode = os.lstat(path).st_mode
        result = run_in_process("convert", HF, path, "--to", "bert4keras", "--force")
        assert result.exit_code == 2, (what, result.stderr)
        assert what in result.stderr, (what, result.stderr)
        assert os.lstat(path).st_mode == mode, f"{what} was replaced"
    assert not any(PARTIAL_MARK in p.name for p in tmp_path.iterdir())


def test_the_output_carries_the_source_tokenizer_files(tmp_path, source):
    for target in TARGETS:
        out = tmp_path / f"out-{target}"
        result = run_in_process("convert", source, out, "--to", target)
        assert result.exit_code == 0, result.stderr
        for name in ("vocab.txt", "tokenizer.json", "special_tokens_map.json"):
            assert (out / name).read_bytes() == (source / name).read_bytes(), (target, name)


def test_a_destination_that_appears_meanwhile_is_left_whole(tmp_path):
    destination = tmp_path / "out"
    with pytest.raises(BadInput, match="appeared while this conversion was writing"):
        with atomic_output(destination, directory=True) as partial:
            (partial / "mine").write_text("this run")
            destination.mkdir()
            (destination / "theirs").write_text("the other run")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert [p.name for p in destination.iterdir()] == ["theirs"]


def test_a_destination_replaced_meanwhile_is_not_replaced_again(tmp_path):
    destination = tmp_path / "out"
    assert run_in_process("convert", HF, destination, "--to", "hf").exit_code == 0
    with pytest.raises(BadInput, match="changed while this conversion was writing"):
        with atomic_output(destination, directory=True, force=True) as partial:
            (partial / "mine").write_text("this run")
            shutil.rmtree(destination)
            destination.mkdir()
            (destination / "theirs").write_text("the other run")
    assert [p.name for p in destination.iterdir()] == ["theirs"]


def test_two_conversions_to_one_destination_one_wins_whole(tmp_path):
    destination = tmp_path / "out"
    command = [sys.executable, "-m", "bertconv.cli", "convert", str(TF), str(destination), "--to", "hf", "-q"]
    runs = [subprocess.Popen(command, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outcomes = sorted((run.wait(timeout=120), run.stderr.read()) for run in runs)
    assert [code for code, _ in outcomes] == [0, 2], outcomes
    assert "already exists" in outcomes[1][1] or "appeared while" in outcomes[1][1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert run_in_process("diff", TF, destination).exit_code == 0


# --- checks that say "ok" have looked --------------------------------------------------------------


def test_verify_fails_on_a_missing_or_truncated_data_file(tmp_path):
    missing = copy_of(TF, tmp_path / "missing")
    (missing / "bert_model.ckpt.data-00000-of-00001").unlink()
    result = run_in_process("verify", missing)
    assert result.exit_code == 1 and "data file does not exist" in result.stdout
    assert run_in_process("verify", missing, "--headers-only").exit_code == 0
    report = json.loads(run_in_process("inspect", missing, "--json").stdout)
    assert report["missing_files"] == [str(missing / "bert_model.ckpt.data-00000-of-00001")]
    assert report["files"] == [str(missing / "bert_model.ckpt.index")]

    truncated = copy_of(TF, tmp_path / "truncated")
    data = truncated / "bert_model.ckpt.data-00000-of-00001"
    os.truncate(data, data.stat().st_size // 2)
    result = run_in_process("verify", truncated)
    assert result.exit_code == 1 and "the file is truncated" in result.stdout


def test_inspect_shows_the_file_shape_with_the_file_name():
    tensors = {t["name"]: t for t in json.loads(run_in_process("inspect", TF, "--json").stdout)["tensors"]}
    nsp = tensors["cls/seq_relationship/output_weights"]
    assert (nsp["shape"], nsp["canonical"], nsp["canonical_shape"]) == ([2, 32], "nsp.kernel", [32, 2])
    tensors = {t["name"]: t for t in json.loads(run_in_process("inspect", HF, "--json").stdout)["tensors"]}
    ffn = tensors["bert.encoder.layer.0.intermediate.dense.weight"]
    assert (ffn["shape"], ffn["canonical_shape"]) == ([37, 32], [32, 37])


def test_training_saves_and_non_tensor_entries_are_read_and_listed(tmp_path):
    torch, load_file = needs("torch"), needs("safetensors.torch").load_file

    state = load_file(str(HF / "model.safetensors"))
    optimizer = {"state": {0: {"exp_avg": torch.zeros(3, 4), "step": 5}}, "param_groups": [{"lr": 0.1}]}
    cases = {
        "nested": {"model": state, "optimizer": optimizer, "epoch": 3},
        "data-parallel": {"state_dict": {f"module.{k}": v for k, v in state.items()}},
        "extras": {**state, "extra_int": 7, "some_list": [1, 2]},
    }
    for name, saved in cases.items():
        (tmp_path / name).mkdir()
        torch.save(saved, tmp_path / name / "pytorch_model.bin")
        shutil.copy(HF / "config.json", tmp_path / name)
        report = json.loads(run_in_process("audit", tmp_path / name, "--json").stdout)
        assert report["ok"] and report["parameters"] == 20495, name
        ignored = {entry["name"]: entry for entry in report["ignored"]}
        if name == "nested":
            assert ignored["optimizer"]["parameters"] == 12 and "beside the model's state dict" in \
                ignored["optimizer"]["reason"]
            assert set(ignored) == {"optimizer", "epoch"}
        elif name == "extras":
            assert {k: v["reason"] for k, v in ignored.items()} == {"extra_int": "not a tensor (int)",
                                                                   "some_list": "not a tensor (list)"}
    (tmp_path / "string").mkdir()
    torch.save({**state, "bert.pooler.dense.bias": "oops"}, tmp_path / "string" / "pytorch_model.bin")
    result = run_in_process("audit", tmp_path / "string" / "pytorch_model.bin", "--heads", "4")
    assert result.exit_code == 2
    assert "'bert.pooler.dense.bias' is a str where a tensor is expected (pooler.bias)" in result.stderr


# --- bad input gets a message, never a hang or a traceback -----------------------------------------


@pytest.mark.parametrize("layers", [10_000, 1_000_000_000])
def test_a_config_claiming_absurd_sizes_is_refused_at_once(tmp_path, layers):
    source = copy_of(HF, tmp_path / "src", num_hidden_layers=layers)
    (source / "vocab.txt").write_text("".join(f"t{i}\n" for i in range(99)))
    for args in (("audit", source), ("verify", source), ("convert", source, tmp_path / "out", "--to", "tf"),
                 ("fill-mask", source, "t1 [MASK]")):
        started = time.monotonic()
        result = run_in_process(*args)
        assert result.exit_code == 2, (args, result.stderr)
        assert f"num_hidden_layers is {layers}" in result.stderr and "Traceback" not in result.stderr
        assert time.monotonic() - started < 30


def test_a_fifo_is_refused_not_read(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    for result in run_in_a_child(("audit", tmp_path / "fifo"), ("audit", HF, "--config", tmp_path / "fifo"),
                                 timeout=60):
        assert result.exit_code == 2 and "FIFO" in result.stderr


def test_output_errors_and_bad_flags_are_messages_not_tracebacks():
    result = run_in_process("diff", HF, HF, "--atol", "nan")
    assert result.exit_code == 2 and "not a finite, non-negative number" in result.stderr
    closed = subprocess.run([sys.executable, "-m", "bertconv.cli", "audit", str(HF), "--json"],
                            stdout=None, stderr=subprocess.PIPE, text=True, preexec_fn=lambda: os.close(1))
    assert closed.returncode == 2 and "standard output is closed" in closed.stderr
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "bertconv.cli", "inspect", str(HF)], stdout=full,
                              stderr=subprocess.PIPE, text=True)
    assert proc.returncode == 2 and "No space left on device" in proc.stderr
    for result in (closed, proc):
        assert "Traceback" not in result.stderr


@pytest.mark.parametrize("field, value", [("hidden_size", "32"), ("num_hidden_layers", True),
                                          ("layer_norm_eps", "1e-12"), ("tie_word_embeddings", "yes")])
def test_a_config_value_of_the_wrong_json_type_is_refused_by_name(tmp_path, field, value):
    source = copy_of(HF, tmp_path / "src", **{field: value})
    result = run_in_process("audit", source)
    assert result.exit_code == 2
    assert f"{field} is {json.dumps(value)}" in result.stderr


def test_heads_flag_never_silently_overrides_a_stated_head_count(tmp_path):
    result = run_in_process("audit", HF, "--heads", "8")
    assert result.exit_code == 2 and "--heads 8 contradicts" in result.stderr and "is 4" in result.stderr
    assert run_in_process("audit", HF, "--heads", "4").exit_code == 0
    shutil.copy(HF / "model.safetensors", tmp_path)  # no config: --heads says what nothing else does
    report = json.loads(run_in_process("audit", tmp_path / "model.safetensors", "--heads", "2", "--json").stdout)
    assert report["config"]["num_attention_heads"] == 2


def test_sharded_output_is_byte_identical_to_save_pretrained(tmp_path):
    transformers = pytest.importorskip("transformers")
    model = transformers.BertForPreTraining.from_pretrained(HF)
    model.save_pretrained(tmp_path / "reference", max_shard_size="10KB")
    result = run_in_process("convert", HF, tmp_path / "ours", "--to", "hf", "--max-shard-size", "10KB")
    assert result.exit_code == 0, result.stderr
    reference = sorted(p.name for p in (tmp_path / "reference").iterdir())
    assert sorted(p.name for p in (tmp_path / "ours").iterdir()) == reference
    assert len([n for n in reference if n.startswith("model-")]) > 2
    for name in reference:
        if name != "config.json":  # transformers writes its own defaults there; ours the fields that compute
            assert (tmp_path / "ours" / name).read_bytes() == (tmp_path / "reference" / name).read_bytes(), name
