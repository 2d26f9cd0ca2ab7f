"""A config that is there but cannot be read (a dangling symlink as a half-downloaded Hugging Face
cache leaves, a FIFO, a directory under the config's name) stops every command with exit 2 naming
it, in text and in --json; skipping it would let the head count fall back to H / 64 (1 head where
the model has 4) and `convert` write that. A FIFO is never opened: the commands run under a
timeout that a blocked read would hit.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, run_in_a_child, run_in_process

#: (format, fixture directory, the config name its reader looks for first)
CHECKPOINTS = [
    ("hf", FIXTURES / "hf" / "masked_lm", "config.json"),
    ("hf-tf", FIXTURES / "hf_tf" / "masked_lm", "config.json"),
    ("hf-flax", FIXTURES / "hf_flax" / "masked_lm", "config.json"),
    ("tf", FIXTURES / "tf" / "full", "bert_config.json"),
    ("tf, the prefix's own name", FIXTURES / "tf" / "full", "bert_model.bert_config.json"),
    ("bert4keras", FIXTURES / "bert4keras" / "v50-mlm", "bert_config.json"),
]
KINDS = ["dangling symlink", "fifo", "directory"]
#: A FIFO is met in a process of its own under a timeout (a blocked open would hang the test run).
FIFO_TIMEOUT = 60
WHY = {"dangling symlink": "is a symlink to ", "fifo": "is a FIFO", "directory": "is a directory"}


def bertconv(kind: str, *runs: tuple) -> list:
    """`bertconv ARGS` for each ARGS of `runs`: in this process, or for a FIFO in a child process
    of their own under a timeout."""
    if kind == "fifo":
        return run_in_a_child(*runs, timeout=FIFO_TIMEOUT)
    return [run_in_process(*args) for args in runs]


def spoil(path: Path, kind: str) -> None:
    """Put an unreadable `kind` of thing at `path` (replacing a config there)."""
    if path.exists() or path.is_symlink():
        path.unlink()
    if kind == "dangling symlink":
        path.symlink_to("../../blobs/0123456789abcdef")  # the target a half-finished download lacks
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()


@pytest.fixture(params=CHECKPOINTS, ids=[c[0] for c in CHECKPOINTS])
def checkpoint(request, tmp_path):
    _, fixture, name = request.param
    directory = tmp_path / "model"
    shutil.copytree(fixture, directory)
    return directory, directory / name


@pytest.mark.parametrize("kind", KINDS)
def test_unreadable_config_stops_every_command(checkpoint, kind, tmp_path):
    directory, config = checkpoint
    spoil(config, kind)
    for result in bertconv(kind, ("inspect", directory), ("audit", directory), ("verify", directory),
                           ("convert", directory, tmp_path / "out", "--to", "hf")):
        output = result.stdout + result.stderr
        assert result.exit_code == 2, output
        assert "Traceback" not in output
        assert f"{config}: {WHY[kind]}" in output, output
        assert "cannot be read" in output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_unreadable_config_in_json(checkpoint, kind):
    directory, config = checkpoint
    spoil(config, kind)
    for result in bertconv(kind, *((command, directory, "--json") for command in ("audit", "verify", "inspect"))):
        assert result.exit_code == 2, result.stdout + result.stderr
        report = json.loads(result.stdout)
        assert report["ok"] is False
        assert report["error"]["path"] == str(config)
        assert WHY[kind] in report["error"]["message"]


def test_config_option_naming_an_unreadable_file(tmp_path):
    """`--config` naming a dangling symlink or a directory: the same refusal, for the library too."""
    from bertconv import formats
    from bertconv.errors import BadInput

    for kind in ("dangling symlink", "directory"):
        config = tmp_path / kind.replace(" ", "_")
        spoil(config, kind)
        result = run_in_process("audit", FIXTURES / "hf" / "masked_lm", "--config", config)
        assert result.exit_code == 2 and str(config) in result.stderr, result.stderr
        with pytest.raises(BadInput, match=WHY[kind]):
            formats.read(FIXTURES / "hf" / "masked_lm", config_path=config)


def test_fifo_named_by_config_option_is_not_opened(tmp_path):
    """The library refuses it too (the command line refuses any special file before reading)."""
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    model = FIXTURES / "family_google" / "fairseq" / "roberta" / "model.pt"
    script = ("import sys; from bertconv import formats; from bertconv.errors import BadInput\n"
              "try: formats.read(sys.argv[1], config_path=sys.argv[2])\n"
              "except BadInput as error: print(error)")
    proc = subprocess.run([sys.executable, "-c", script, str(model), str(fifo)], capture_output=True, text=True,
                          timeout=FIFO_TIMEOUT)
    assert f"{fifo}: is a FIFO" in proc.stdout, proc.stdout + proc.stderr


def test_a_readable_config_further_down_the_list_is_not_reached_past_an_unreadable_one(tmp_path):
    """Google's reader looks for `<prefix>.bert_config.json` before `bert_config.json`: the first
    one there decides, so a broken first one is refused, not passed over for the second."""
    directory = tmp_path / "model"
    shutil.copytree(FIXTURES / "tf" / "full", directory)
    spoil(directory / "bert_model.bert_config.json", "dangling symlink")
    assert (directory / "bert_config.json").is_file()
    result = run_in_process("audit", directory)
    assert result.exit_code == 2 and "bert_model.bert_config.json" in result.stderr, result.stderr
