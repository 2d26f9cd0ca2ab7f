"""The public Python API (bertconv.load, inspect, audit, verify, diff, convert, save, fill_mask):
each report's `to_json()` is the command line's `--json` object for the same call, its typed
fields say what that object says, its errors are the exceptions the command line maps to exit
statuses, its docstrings' examples run, and it passes `mypy --strict`."""

from __future__ import annotations

import dataclasses
import doctest
import importlib
import json
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

import bertconv
from bertconv import formats
from bertconv.formats.registry import FORMATS

from conftest import FIXTURES, ROOT, installed, needs, requires, run_in_process
from format_fixtures import fixture_paths

HF = FIXTURES / "hf" / "pretraining"
TRAINED = FIXTURES / "trained" / "hf"  # with a vocab.txt: fill-mask runs
TRAINED_TF = FIXTURES / "trained" / "tf"
#: One fixture of every registered format.
ONE_PER_FORMAT = [next(iter(fixture_paths(fmt, FIXTURES))) for fmt in FORMATS if fixture_paths(fmt, FIXTURES)]
API_MODULES = ("report", "inspect", "audit", "verify", "diff", "convert", "fill_mask")


def cli_json(*args) -> tuple[int, object]:
    """`bertconv ARGS --json`'s exit status and its object(s), stamps removed."""
    result = run_in_process(*args, "--json")
    several = not result.stdout.startswith("{\n")  # JSON Lines: one object a line
    objects = [json.loads(line) for line in result.stdout.splitlines()] if several else [json.loads(result.stdout)]
    for obj in objects:
        del obj["bertconv"]
    return result.exit_code, objects if len(objects) > 1 else objects[0]


def plain(value):
    """A typed field's value as JSON writes it."""
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


def assert_fields_agree(value, obj) -> None:
    """Every field of the (nested) dataclass `value` that `obj` has a key for holds what it holds;
    a nested `Checkpoint` (or `Counts`) stands for the keys it shares with `obj`."""
    for field in dataclasses.fields(value):
        held = getattr(value, field.name)
        if field.name in obj:
            if dataclasses.is_dataclass(held) and isinstance(obj[field.name], Mapping):
                assert_fields_agree(held, obj[field.name])
            elif held and isinstance(held, (tuple, list)) and dataclasses.is_dataclass(held[0]):
                assert len(held) == len(obj[field.name])
                for item, item_obj in zip(held, obj[field.name]):
                    assert_fields_agree(item, item_obj)
            else:
                assert plain(held) == obj[field.name], field.name
        elif dataclasses.is_dataclass(held):  # flattened into obj
            assert_fields_agree(held, obj)


@pytest.mark.parametrize("fixture", ONE_PER_FORMAT, ids=lambda p: p.relative_to(FIXTURES).as_posix())
@pytest.mark.parametrize("command", ["inspect", "audit", "verify"])
def test_a_report_is_the_commands_json_object(command, fixture):
    status, obj = cli_json(command, fixture)
    if "error" in obj:
        with pytest.raises(bertconv.BertconvError) as raised:
            getattr(bertconv, command)(fixture)
        assert str(raised.value) == obj["error"]["message"] and raised.value.exit_status == status
        return
    report = getattr(bertconv, command)(fixture)
    assert report.to_json() == obj and report.command == command
    assert status == (0 if report.ok else 1)
    assert_fields_agree(report, obj)


def test_verify_deep_with_its_probe_is_the_commands_object():
    status, obj = cli_json("verify", TRAINED, "--deep")
    report = bertconv.verify(TRAINED, deep=True)
    assert (status, report.to_json()) == (0, obj)
    assert report.deep is not None and report.mlm_trained.probe is not None
    assert_fields_agree(report, obj)


def test_a_tree_is_read_once_and_taken_by_every_check():
    tree = bertconv.load(HF)
    assert bertconv.audit(tree).to_json() == bertconv.audit(HF).to_json()
    assert bertconv.inspect(tree).to_json() == bertconv.inspect(HF).to_json()
    with pytest.raises(TypeError, match="give a path with them"):
        bertconv.audit(tree, heads=4)


@pytest.mark.parametrize("options", [[], ["--atol", "1e-3"], ["--outputs"]], ids=["bits", "atol", "outputs"])
def test_a_diff_report_is_the_commands_object(options):
    status, obj = cli_json("diff", TRAINED_TF, TRAINED, *options)
    keywords = {"atol": 1e-3} if "--atol" in options else {"outputs": True} if "--outputs" in options else {}
    report = bertconv.diff(TRAINED_TF, TRAINED, **keywords)
    assert report.to_json() == obj and report.equal is report.ok is True and status == 0
    assert_fields_agree(report, obj)
    assert (report.outputs is not None) == ("--outputs" in options) == (report.tensors_ok is not None)


def test_a_diff_that_differs_is_not_equal():
    status, obj = cli_json("diff", TRAINED, FIXTURES / "trained" / "hf_untied")
    report = bertconv.diff(TRAINED, FIXTURES / "trained" / "hf_untied")
    assert report.to_json() == obj and status == 1 and not report.equal
    with pytest.raises(bertconv.CheckFailed, match="diff failed: "):
        report.require_ok()


@pytest.mark.parametrize("target", sorted(formats.TARGETS))
def test_convert_takes_every_registered_target_and_reports_as_the_command(target, tmp_path):
    if target == "onnx":
        needs("onnx")
    destination = tmp_path / "out"
    # keras-hub's code fixes its head's activation and epsilon: a Google BERT goes there only so.
    accepted = ("mlm_hidden_act", "mlm_layer_norm_eps") if target == "keras-hub" else ()
    report = bertconv.convert(TRAINED_TF, destination, to=target, accept_loss=accepted)
    assert report.output.format == target and report.ok
    assert all(path.exists() for path in report.output.files)
    shutil.rmtree(destination) if destination.is_dir() else destination.unlink()
    status, obj = cli_json("convert", TRAINED_TF, destination, "--to", target,
                           *(arg for name in accepted for arg in ("--accept-loss", name)))
    assert (status, report.to_json()) == (0, obj)
    assert_fields_agree(report, obj)


def test_save_writes_a_tree_and_refuses_to_replace_without_force(tmp_path):
    tree = bertconv.load(TRAINED_TF)
    first = bertconv.save(tree, tmp_path / "hf", to="hf", max_shard_size="1KB")
    assert len([f for f in first.output.files if f.suffix == ".safetensors"]) > 1  # sharded at 1 KB
    with pytest.raises(bertconv.BadInput):
        bertconv.save(tree, tmp_path / "hf", to="hf")
    assert bertconv.save(tree, tmp_path / "hf", to="hf", force=True).ok
    with pytest.raises(ValueError, match="is not a size"):
        bertconv.save(tree, tmp_path / "other", to="hf", max_shard_size="5 parsecs")


@requires("tokenizers")
def test_fill_mask_reports_are_the_commands_objects():
    texts = ["the [MASK] sat on [MASK] mat .", "no mask", "[MASK] dog"]
    status, objects = cli_json("fill-mask", TRAINED, *texts, "--top-k", "2")
    reports = bertconv.fill_mask(TRAINED, texts, top_k=2)
    assert [r.to_json() for r in reports] == objects and status == 2
    assert [r.ok for r in reports] == [True, False, True] and reports[1].error is not None
    for report, obj in zip(reports, objects):
        if report.ok:
            assert_fields_agree(report, obj)
        else:  # the error object: the checkpoint's path, the text and the message
            assert (report.error, report.index, report.text) == (obj["error"]["message"], obj["index"], obj["text"])
    with pytest.raises(bertconv.BadInput, match="no \\[MASK\\]"):
        reports[1].require_ok()
    one = bertconv.fill_mask(TRAINED, texts[0], top_k=2)
    assert one.to_json() == cli_json("fill-mask", TRAINED, texts[0], "--top-k", "2")[1]
    with pytest.raises(bertconv.BadInput, match="no \\[MASK\\]"):
        bertconv.fill_mask(TRAINED, "no mask")


def test_errors_are_the_exceptions_the_command_line_maps_to_its_exit_statuses(tmp_path):
    with pytest.raises(bertconv.BadInput) as raised:
        bertconv.audit(tmp_path / "absent")
    assert raised.value.exit_status == 2 and raised.value.path == str(tmp_path / "absent")
    with pytest.raises(bertconv.CheckFailed) as failed:
        bertconv.fill_mask(FIXTURES / "hf" / "bert_model", "a [MASK]")
    assert failed.value.exit_status == 1
    assert issubclass(bertconv.BadInput, bertconv.BertconvError) and issubclass(bertconv.CheckFailed,
                                                                                bertconv.BertconvError)


def test_reports_are_frozen_and_their_json_a_fresh_copy():
    report = bertconv.audit(HF)
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.ok = False  # type: ignore[misc]
    report.to_json()["config"]["hidden_size"] = 0
    assert report.to_json()["config"]["hidden_size"] == report.checkpoint.config["hidden_size"] == 32
    with pytest.raises(TypeError):
        report.checkpoint.config["hidden_size"] = 0  # type: ignore[index]


def test_a_reports_json_copy_shares_nothing_that_can_change():
    from bertconv.api.report import json_copy

    report = bertconv.inspect(HF)
    first = report.to_json()
    first["tensors"][0]["shape"].append(7)
    first["config"]["provenance"].clear()
    assert report.to_json() != first and report.to_json() == bertconv.inspect(HF).to_json()
    value = {"a": [1, {"b": (2.5, None, [True])}], "odd": {3}, "text": "x"}
    copied = json_copy(value)
    assert copied == value and type(copied["a"][1]["b"]) is tuple
    assert copied["a"] is not value["a"] and copied["a"][1]["b"][2] is not value["a"][1]["b"][2]
    assert copied["odd"] is not value["odd"]  # not JSON: deep-copied all the same


def test_the_apis_defaults_are_the_librarys():
    from bertconv.api import diff, fill_mask
    from bertconv.checks.arrays import BIT_EXACT
    from bertconv.checks.outputs import OUTPUTS_ATOL
    from bertconv.runtime.fill_mask import BATCH_SIZE

    assert (diff.BIT_EXACT, diff.OUTPUTS_ATOL) == (BIT_EXACT, OUTPUTS_ATOL)
    assert fill_mask.BATCH_SIZE == BATCH_SIZE


def test_importing_bertconv_imports_neither_the_api_nor_a_format():
    """Each name is imported when first asked for, and only its own module: `audit` does not
    bring in what `fill_mask` needs."""
    code = ("import sys, bertconv; before = sorted(m for m in sys.modules if m.startswith('bertconv.'))\n"
            "bertconv.audit; print(before, sorted(m for m in sys.modules if m.startswith('bertconv.api')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    before, after = proc.stdout.strip().split("] [")
    assert before == "[]" or before.strip("[]'") == "bertconv.version"
    assert after.strip("[]").replace("'", "").split(", ") == ["bertconv.api", "bertconv.api.audit",
                                                              "bertconv.api.report"]


def test_every_exported_name_is_there():
    for name in bertconv.__all__:
        assert getattr(bertconv, name) is not None, name
    with pytest.raises(AttributeError):
        bertconv.no_such_name  # noqa: B018


@pytest.mark.parametrize("module", API_MODULES)
def test_the_docstrings_examples_run(module, tmp_path):
    if module == "fill_mask" and not installed("tokenizers"):
        pytest.skip("fill_mask's example needs tokenizers (pip install 'bertconv[fill-mask]')")
    tested = importlib.import_module(f"bertconv.api.{module}")
    examples = [test for test in doctest.DocTestFinder().find(tested, globs={"bertconv": bertconv,
                                                                              "FIXTURES": FIXTURES, "tmp": tmp_path})
                if test.examples]
    assert examples, f"bertconv.api.{module} has no example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in examples:
        runner.run(test)
    assert runner.failures == 0, f"{runner.failures} example(s) of bertconv.api.{module} failed (printed above)"


def test_every_public_function_has_an_example():
    for name in ("load", "inspect", "audit", "verify", "diff", "convert", "save", "fill_mask"):
        assert ">>> " in getattr(bertconv, name).__doc__, name


@requires("mypy")
def test_the_public_api_passes_mypy_strict():
    # mypy's incremental cache (kept in the untracked .cache/, out of the working tree) checks again
    # only what changed: the first run takes some 14 s of CPU, the next ones under 1 s.
    proc = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
                           "--cache-dir", str(ROOT / ".cache" / "mypy"), "bertconv/api", "bertconv/__init__.py"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
