"""Pathological JSON in every file bertconv parses as JSON (a config.json, a safetensors header, a
shard index, tokenizer_config.json, tokenizer.json): nested 100,000 deep, or an integer of 5,000
digits (more than Python's 4,300). Each is exit 2 naming the file, the JSON error object with
--json, alone and with --recursive; never a traceback or an "internal error". One parser serves
every reader (`bertconv/json_text.py`)."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from conftest import FIXTURES, run_in_process
from bertconv import json_text

TIED = FIXTURES / "runtime" / "pretraining"
DEPTH = 100_000
DIGITS = 5_000

#: kind -> JSON text of each pathology, as an object (a safetensors header must open with "{").
PATHOLOGIES = {
    "deep": '{"a": ' + "[" * DEPTH + "]" * DEPTH + "}",
    "long integer": '{"a": ' + "9" * DIGITS + "}",
}


def safetensors_with_header(header: str) -> bytes:
    raw = header.encode()
    return struct.pack("<Q", len(raw)) + raw


def checkpoint_with(directory: Path, file: str, text: str) -> Path:
    """The tied fixture with `file` (a name in it or beside it) holding `text`."""
    shutil.copytree(TIED, directory)
    if file == "model.safetensors":
        (directory / file).write_bytes(safetensors_with_header(text))
    elif file == "model.safetensors.index.json":
        (directory / "model.safetensors").rename(directory / "model-00001-of-00001.safetensors")
        (directory / file).write_text(text)
    else:
        (directory / file).write_text(text)
    return directory / file


#: file -> the commands that read it.
READERS = {
    "config.json": [["audit"], ["audit", "--recursive"], ["fill-mask", None, "a [MASK]."]],
    "model.safetensors": [["audit"], ["audit", "--recursive"], ["inspect"]],
    "model.safetensors.index.json": [["audit"], ["audit", "--recursive"], ["inspect"]],
    "tokenizer_config.json": [["fill-mask", None, "a [MASK]."]],
    "tokenizer.json": [["fill-mask", None, "a [MASK]."]],
}
CASES = [(file, kind, command) for file, commands in READERS.items() for kind in PATHOLOGIES for command in commands]


@pytest.mark.parametrize("file, kind, command", CASES,
                         ids=[f"{file}-{kind}-{command[0]}{' -r' * ('--recursive' in command)}"
                              for file, kind, command in CASES])
def test_pathological_json_is_bad_input_naming_the_file(tmp_path, file, kind, command):
    if file.startswith("tokenizer"):
        pytest.importorskip("tokenizers")
    path = checkpoint_with(tmp_path / "ckpt", file, PATHOLOGIES[kind])
    name, *rest = command
    arguments = [name, *(str(tmp_path / "ckpt") if a is None else a for a in rest)]
    if None not in rest:
        arguments.insert(1 + (rest[:1] == ["--recursive"]), str(tmp_path / "ckpt"))
    people = run_in_process(*arguments)
    assert people.exit_code == 2, people.stdout + people.stderr
    said = people.stdout + people.stderr  # --recursive reports each checkpoint's error in its row
    assert str(path) in said and "Traceback" not in said and "internal error" not in said
    assert ("nested too deeply" if kind == "deep" else f"{DIGITS} digits") in said
    machine = run_in_process(*arguments, "--json")
    assert machine.exit_code == 2
    report, _ = json.JSONDecoder().raw_decode(machine.stdout)  # the first object (one line each with -r)
    assert report["ok"] is False and str(path) in report["error"]["message"]
    assert "internal error" not in report["error"]["message"]


def test_the_parser_keeps_what_json_reads():
    assert json_text.loads('{"a": [1, 2.5, -3], "b": {"c": null}}') == {"a": [1, 2.5, -3], "b": {"c": None}}
    assert json_text.loads("-" + "9" * 300) == -int("9" * 300)  # long, but within Python's limit
    with pytest.raises(json.JSONDecodeError, match="Expecting"):
        json_text.loads("[1,")
