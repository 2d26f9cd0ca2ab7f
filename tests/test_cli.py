"""The command line as a user runs it: exit codes, JSON keys, atomic outputs, clear errors."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from conftest import FIXTURES, run_in_process

HF = FIXTURES / "hf"
AUDIT_KEYS = {"format", "config", "parameters", "expected_parameters", "components", "heads", "ignored", "ok"}


def test_audit_json_keys_and_exit_zero(cli):
    result = cli("audit", HF / "pretraining", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert AUDIT_KEYS <= set(report)
    assert report["format"] == "hf-safetensors"
    assert set(report["config"]) >= {"vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size",
                                     "max_position_embeddings", "type_vocab_size"}
    assert report["heads"] == {"pooler": True, "mlm": True, "nsp": True, "sop": False, "rtd": False, "contact": False}
    assert all(set(c) >= {"name", "parameters", "expected"} for c in report["components"])


def test_audit_with_a_config_that_disagrees_exits_one(cli, tmp_path):
    config = json.loads((HF / "pretraining" / "config.json").read_text())
    config["intermediate_size"] = 64
    wrong = tmp_path / "config.json"
    wrong.write_text(json.dumps(config))
    result = cli("audit", HF / "pretraining", "--config", wrong)
    assert result.exit_code == 1
    assert "intermediate" in result.stdout and "FAILED" in result.stdout


def test_inspect_lists_every_tensor(cli):
    result = cli("inspect", HF / "pretraining_bin", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    names = {t["name"] for t in report["tensors"]}
    assert "cls.predictions.decoder.weight" in names
    decoder = next(t for t in report["tensors"] if t["name"] == "cls.predictions.decoder.weight")
    assert decoder["shared_with"] == "embeddings.word" and decoder["shape"] == [99, 32]


def test_missing_path_exits_two_with_its_name(cli, tmp_path):
    result = cli("audit", tmp_path / "nope")
    assert result.exit_code == 2 and "nope" in result.stderr and "does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def test_directory_with_two_checkpoints_is_refused_by_name(cli, tmp_path):
    """Two checkpoints that are not one model in transformers' formats (those are read as
    transformers reads them: tests/test_hub_cache_formats.py): which one is meant is not known."""
    (tmp_path / "config.json").write_bytes((HF / "pretraining" / "config.json").read_bytes())
    for name in ("first.safetensors", "second.safetensors"):
        (tmp_path / name).write_bytes((HF / "pretraining" / "model.safetensors").read_bytes())
    result = cli("audit", tmp_path)
    assert result.exit_code == 2
    assert "first.safetensors" in result.stderr and "second.safetensors" in result.stderr


def _digest(path: Path) -> tuple[str, int]:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest(), max(os.stat(f).st_mtime_ns for f in files)


def test_convert_is_atomic_refuses_existing_destination_and_leaves_input_untouched(cli, tmp_path):
    source = HF / "pretraining_bin"
    before = _digest(source)
    out = tmp_path / "out"
    assert cli("convert", source, out, "--to", "hf").exit_code == 0
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    second = cli("convert", source, out, "--to", "hf")
    assert second.exit_code == 2 and "--force" in second.stderr
    assert cli("convert", source, out, "--to", "hf", "--force").exit_code == 0
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporaries left behind
    assert _digest(source) == before


def test_convert_refuses_to_overwrite_its_own_input(cli, tmp_path):
    source = tmp_path / "model"
    source.mkdir()
    for name in ("model.safetensors", "config.json"):
        (source / name).write_bytes((HF / "pretraining" / name).read_bytes())
    result = cli("convert", source, source, "--to", "hf", "--force")
    assert result.exit_code == 2 and "which this conversion reads" in result.stderr
    assert (source / "model.safetensors").exists()


def test_unknown_flag_is_usage_error(cli):
    result = cli("audit", HF / "pretraining", "--bogus")
    assert result.exit_code == 2 and "usage: bertconv audit" in result.stderr and "--bogus" in result.stderr


def test_help_lists_every_command_with_the_first_line_of_its_docstring():
    import importlib

    from bertconv.cli import COMMANDS

    result = run_in_process("--help")
    assert result.exit_code == 0
    for name, (module, summary) in COMMANDS.items():
        assert summary == importlib.import_module(f"bertconv.commands.{module}").command.__doc__.split("\n")[0]
        assert f"{name}" in result.stdout and summary in result.stdout
        details = run_in_process(name, "--help")
        assert details.exit_code == 0 and details.stdout.startswith(f"usage: bertconv {name}")
    assert run_in_process().exit_code == 2


def test_options_may_come_before_between_and_after_the_paths():
    a, b = HF / "pretraining", HF / "masked_lm"
    expected = run_in_process("audit", a, b, "--json", "--jobs", "1").stdout
    assert run_in_process("audit", "--json", a, "-j", "1", b).stdout == expected
    assert len(expected.splitlines()) == 2


def test_usage_errors_name_the_option_and_exit_two():
    for args, named in [(["audit", HF / "pretraining", "--jobs", "0"], "--jobs"),
                        (["diff", HF / "pretraining", HF / "pretraining", "--atol", "nan"], "--atol"),
                        (["convert", HF / "pretraining", "out", "--to", "nope"], "--to"),
                        (["convert", HF / "pretraining", "out"], "--to"),
                        (["convert", HF / "pretraining", "out", "--to", "hf", "--max-shard-size", "5XB"],
                         "--max-shard-size"),
                        (["audit", HF / "pretraining", "--config", HF / "pretraining"], "--config"),
                        (["nope"], "COMMAND")]:
        result = run_in_process(*args)
        assert result.exit_code == 2 and named in result.stderr and "usage: bertconv" in result.stderr, args


def test_minilm_real_encoder_only_model(cli, minilm):
    result = cli("audit", minilm, "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["heads"] == {"pooler": True, "mlm": False, "nsp": False, "sop": False, "rtd": False, "contact": False}
    assert report["config"]["hidden_size"] == 384 and report["config"]["num_hidden_layers"] == 6
    assert report["parameters"] == report["expected_parameters"] == 22_713_216
    assert [i["name"] for i in report["ignored"]] == ["embeddings.position_ids"]


def test_progress_bar_only_for_large_work_on_a_terminal(monkeypatch):
    from bertconv.commands import common

    with common.byte_progress("x", common.PROGRESS_MIN_BYTES, quiet=False) as advance:
        assert advance is None  # pytest's stderr is not a terminal
    monkeypatch.setattr(common.sys.stderr, "isatty", lambda: True)
    with common.byte_progress("x", common.PROGRESS_MIN_BYTES - 1, quiet=False) as advance:
        assert advance is None
    with common.byte_progress("x", common.PROGRESS_MIN_BYTES, quiet=True) as advance:
        assert advance is None
    with common.byte_progress("x", common.PROGRESS_MIN_BYTES, quiet=False) as advance:
        advance(common.PROGRESS_MIN_BYTES)
