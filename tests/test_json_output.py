"""The one shape of every `--json` output: each command's JSON Schema (bertconv/schemas/) against
real outputs on every registered fixture, the error object of exit 2, and the JSON Lines of a
run over many checkpoints."""

from __future__ import annotations

import functools
import json
import shutil
from importlib.resources import files
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from bertconv import families, formats
from bertconv.config import BertConfig
from bertconv.errors import BertconvError
from bertconv.commands import output
from bertconv.commands.batch import checkpoints_below
from bertconv.formats.registry import FORMATS

from conftest import FIXTURES, Result, requires, run_cli, run_in_process
from format_fixtures import fixture_paths

COMMANDS = ("inspect", "audit", "verify", "diff", "convert", "fill-mask")
CHECKPOINT_KEYS = ("path", "format", "family", "config", "heads", "ignored")
REGISTERED = [path for fmt in FORMATS for path in fixture_paths(fmt, FIXTURES)]
#: The commands whose output has the same shape for every checkpoint of a format and family: run
#: on one fixture of each (format, family) pair, not on all of them (convert writes, diff reads
#: every value twice, fill-mask runs the model).
PER_KIND = ("diff", "convert", "fill-mask")
HF = FIXTURES / "hf" / "pretraining"
TRAINED = FIXTURES / "trained" / "hf"  # with a vocab.txt: fill-mask runs
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def _registry() -> Registry:
    schemas = [json.loads(f.read_text()) for f in files("bertconv.schemas").iterdir() if f.name.endswith(".json")]
    return Registry().with_resources((s["$id"], Resource.from_contents(s)) for s in schemas)


REGISTRY = _registry()


@functools.cache
def validator(command: str) -> Draft202012Validator:
    return Draft202012Validator(output.schema(command), registry=REGISTRY)


def assert_valid(command: str, obj: dict, where: str = "") -> None:
    errors = [f"{e.json_path}: {e.message[:200]}" for e in validator(command).iter_errors(obj)]
    assert not errors, (where, errors)
    assert obj["bertconv"]["schema"] == output.schema_id(command)


def status_of(obj: dict) -> int:
    """The exit status an object stands for (an error may also be a check that failed, exit 1:
    fill-mask on a checkpoint without an MLM head)."""
    return EXIT_BAD_INPUT if "error" in obj else EXIT_OK if obj["ok"] else EXIT_FAILED


@pytest.mark.parametrize("command", COMMANDS)
def test_schema_files_are_draft_2020_12_and_named_by_the_stamp(command):
    schema = output.schema(command)
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == output.schema_id(command)


def test_the_schema_names_every_family_and_every_config_field():
    """A new family or BertConfig field must reach the schema that --json output is held to."""
    checkpoint = json.loads(files("bertconv.schemas").joinpath("common.json").read_text())["$defs"]
    assert set(checkpoint["checkpoint"]["properties"]["family"]["enum"]) == set(families.FAMILIES)
    summary = BertConfig(vocab_size=2, hidden_size=4, num_hidden_layers=1, num_attention_heads=1,
                         intermediate_size=4, max_position_embeddings=4, type_vocab_size=2).summary()
    assert set(summary) <= set(checkpoint["config"]["properties"])


def test_the_schemas_reject_a_report_that_breaks_the_shape():
    report = json.loads(run_in_process("audit", HF, "--json").stdout)
    assert_valid("audit", report)
    for broken in ({k: v for k, v in report.items() if k != "family"},
                   {**report, "config": {k: v for k, v in report["config"].items() if k != "provenance"}},
                   {**report, "bertconv": {**report["bertconv"], "schema": output.schema_id("verify")}},
                   {**report, "error": {"message": "both", "path": None}}):
        assert not validator("audit").is_valid(broken)


def _runs(command: str, fixture: Path, tmp_path: Path) -> list[list]:
    """The command lines of `command` on `fixture`."""
    if command == "diff":
        return [["diff", fixture, fixture, "--json"]]
    if command == "convert":
        return [["convert", fixture, tmp_path / f"{target}-{fixture.parent.name}-{fixture.name}", "--to", target,
                 "--json"] for target in ("hf", "tf")]
    if command == "fill-mask":
        return [["fill-mask", fixture, "the [MASK] sat on [MASK] mat .", "--json", "--top-k", "2"]]
    return [[command, fixture, "--json"]]


@functools.cache
def read_as(fixture: Path) -> tuple[str, str | None]:
    """(family, the path it resolves to) of a fixture, or (its error's type, None): each fixture
    read once in this module, however many checks need these."""
    try:
        tree = formats.read(fixture)
    except BertconvError as error:
        return type(error).__name__, None
    return tree.config.model_type, str(tree.path)


@functools.cache
def audit_alone(fixture: Path) -> Result:
    """`bertconv audit FIXTURE --json` in process: run once, by the sweep and by the parallel run
    whose lines must be these reports."""
    return run_in_process("audit", fixture, "--json")


@functools.cache
def one_fixture_per_format_and_family() -> list[Path]:
    """The first registered fixture of each (format target, family) pair (an unreadable fixture
    is a kind of its own: its error object is what the schema must take)."""
    chosen: dict[tuple[str, str], Path] = {}
    for fmt in FORMATS:
        for path in fixture_paths(fmt, FIXTURES):
            chosen.setdefault((fmt.target, read_as(path)[0]), path)
    return list(chosen.values())


@pytest.mark.parametrize("command", [pytest.param(c, marks=requires("tokenizers") if c == "fill-mask" else ())
                                     for c in COMMANDS])
def test_every_command_on_every_fixture_prints_what_its_schema_says(command, tmp_path):
    """audit, inspect and verify on every registered fixture; the others on one of each kind."""
    seen = set()
    for fixture in one_fixture_per_format_and_family() if command in PER_KIND else REGISTERED:
        for args in _runs(command, fixture, tmp_path):
            result = audit_alone(fixture) if command == "audit" else run_in_process(*args)
            obj = json.loads(result.stdout)
            assert_valid(command, obj, f"{args}: {result.stderr}")
            assert result.exit_code == status_of(obj) or ("error" in obj and result.exit_code == EXIT_FAILED), \
                (args, result.stderr)
            seen.add("error" in obj)
            if "error" not in obj and command != "diff":
                assert obj["path"] == read_as(fixture)[1]
    assert False in seen  # every command reports on fixtures, not only errors


@requires("tokenizers")  # fill-mask's object is one of them
def test_the_checkpoint_fields_are_the_same_in_every_command(tmp_path):
    objects = [json.loads(run_in_process(*args).stdout) for command in COMMANDS
               for args in _runs(command, TRAINED, tmp_path)[:1]]
    objects = [o for command, o in zip(COMMANDS, objects) if command != "diff"] + [objects[3]["a"], objects[3]["b"]]
    first = {key: objects[0][key] for key in CHECKPOINT_KEYS if key != "ignored"}
    assert first["family"] == "bert" and first["config"]["provenance"]["hidden_size"] == "file"
    for obj in objects:
        assert {key: obj[key] for key in first} == first


@pytest.mark.parametrize("command", COMMANDS)
def test_bad_input_prints_an_error_object_and_exits_two(command, tmp_path):
    missing = tmp_path / "absent"
    args = [arg if arg != HF else missing for arg in _runs(command, HF, tmp_path)[0]]
    result = run_in_process(*args)
    assert result.exit_code == EXIT_BAD_INPUT
    obj = json.loads(result.stdout)
    assert_valid(command, obj)
    assert obj["ok"] is False and obj["error"]["path"] == str(missing)
    assert obj["error"]["message"] in result.stderr


@requires("tokenizers")
def test_fill_mask_of_several_texts_is_one_valid_object_per_text():
    texts = ["the [MASK] sat on [MASK] mat .", "no mask", "[MASK] dog"]
    result = run_in_process("fill-mask", TRAINED, *texts, "--json", "--top-k", "2")
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    assert [obj["text"] for obj in objects] == texts and [obj["index"] for obj in objects] == [0, 1, 2]
    for obj in objects:
        assert_valid("fill-mask", obj)
    assert [status_of(obj) for obj in objects] == [EXIT_OK, EXIT_BAD_INPUT, EXIT_OK]
    assert result.exit_code == EXIT_BAD_INPUT
    assert not validator("fill-mask").is_valid({k: v for k, v in objects[0].items() if k != "index"})


def test_a_usage_error_with_json_is_an_error_object_too():
    result = run_in_process("audit", HF, "--json", "--heads", "0")
    assert result.exit_code == EXIT_BAD_INPUT and "--heads" in result.stderr
    obj = json.loads(result.stdout)
    assert_valid("audit", obj)
    assert "--heads" in obj["error"]["message"] and obj["error"]["path"] is None


# --- many checkpoints at once ------------------------------------------------------------------------


def test_audit_of_every_fixture_in_parallel_is_one_line_each_and_the_worst_status():
    found = checkpoints_below(FIXTURES)
    result = run_cli("audit", FIXTURES, "--recursive", "--jobs", "2", "--json")
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(lines) == len(found)
    for obj in lines:
        assert_valid("audit", obj)
    printed = [obj["path"] for obj in lines]
    assert len(set(printed)) == len(printed)
    assert {read_as(path)[1] for path in REGISTERED} <= set(printed)
    assert result.exit_code == max(status_of(obj) for obj in lines)
    by_path = {obj["path"]: obj for obj in lines}
    for path in REGISTERED:  # a line is the report a run on it alone prints
        alone = json.loads(audit_alone(path).stdout)
        assert by_path[alone["path"] if "error" not in alone else str(path)] == alone

    # The table of the same run: in process, one checkpoint at a time (the workers are proven above).
    table = run_in_process("audit", FIXTURES, "--recursive", "--jobs", "1")
    assert table.exit_code == result.exit_code
    rows = [line for line in table.stdout.splitlines() if line.startswith(str(FIXTURES))]
    assert sorted(row.split()[0] for row in rows) == sorted(printed)


def test_an_unreadable_checkpoint_is_a_row_with_its_error(tmp_path):
    good = tmp_path / "good"
    shutil.copytree(HF, good)
    broken = tmp_path / "broken"
    shutil.copytree(HF, broken)
    (broken / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "README.txt").write_text("no checkpoint here")

    result = run_cli("verify", tmp_path, "--recursive", "--jobs", "2", "--json")
    lines = {obj["path"]: obj for obj in map(json.loads, result.stdout.splitlines())}
    # the directory without a checkpoint is passed over; an error's row is the path it was found at
    assert set(lines) == {str(good / "model.safetensors"), str(broken)}
    assert lines[str(good / "model.safetensors")]["ok"]
    assert lines[str(broken)]["error"]["path"] == str(broken / "model.safetensors")
    for obj in lines.values():
        assert_valid("verify", obj)
    assert result.exit_code == EXIT_BAD_INPUT

    table = run_cli("inspect", good, broken, "--jobs", "2")
    assert table.exit_code == EXIT_BAD_INPUT
    good_row, broken_row = (line for line in table.stdout.splitlines() if line.startswith(str(tmp_path)))
    assert "hf-safetensors" in good_row and "ok" in good_row
    assert "error:" in broken_row and "model.safetensors" in broken_row


def test_a_tree_without_any_checkpoint_is_bad_input(tmp_path):
    (tmp_path / "empty").mkdir()
    result = run_in_process("audit", tmp_path, "--recursive", "--json")
    assert result.exit_code == EXIT_BAD_INPUT and "no checkpoint" in json.loads(result.stdout)["error"]["message"]


def test_one_path_prints_the_full_report_as_before():
    single = run_in_process("audit", HF)
    assert single.exit_code == EXIT_OK and "closed form" in single.stdout and "audit ok" in single.stdout
    assert len(json.loads(run_in_process("audit", HF, "--json").stdout)["components"]) > 1
