"""docs/recover_tf_flax.md's stranded XLM-R repositories, end to end: transformers 4.57 builds a
TF-only and a Flax-only directory (config, SentencePiece tokenizer files, weights;
tests/oracle_stranded_repo.py), the page's commands run on them exactly as written and print
what the page shows, and its Python then loads each output in transformers 5 with no missing
weights, the logits 4.57 computed and the ids 4.57's tokenizer gave.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
import pytest

import oracle_process
from conftest import FIXTURES, ROOT, run_cli, run_in_process
from test_hf_tf_flax import LOGITS_ATOL

PAGE = ROOT / "docs" / "recover_tf_flax.md"
SECTION = "## A stranded XLM-R repository, end to end"
SENTENCEPIECE = FIXTURES / "family_hf" / "xlm_roberta" / "masked_lm" / "sentencepiece.bpe.model"
#: Where the page's transcript was made (its absolute paths).
PAGE_DIRECTORY = "/tmp/recipe"


def section_blocks(language: str) -> list[str]:
    section = PAGE.read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


def transcript() -> list[tuple[str, list[str]]]:
    """(command, the lines the page shows it printing) for each `$ ` line of the console block."""
    steps: list[tuple[str, list[str]]] = []
    for line in section_blocks("console")[0].splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line.rstrip())
    return steps


@pytest.fixture(scope="module")
def recipe(tmp_path_factory) -> Path:
    """The two directories transformers 4.57 saves, and `expected.npz` beside them."""
    oracle_process.skip_unless_installed()
    pytest.importorskip("sentencepiece")
    transformers = pytest.importorskip("transformers")
    work = tmp_path_factory.mktemp("recipe")
    source = work / "spm"
    source.mkdir()
    (source / SENTENCEPIECE.name).write_bytes(SENTENCEPIECE.read_bytes())
    (source / "config.json").write_text((SENTENCEPIECE.parent / "config.json").read_text())
    # The oracle environment has no sentencepiece: transformers 5 converts the model to tokenizer.json.
    transformers.AutoTokenizer.from_pretrained(source).save_pretrained(work / "tokenizer5")
    directory = (work / "recipe").resolve()
    directory.mkdir()
    oracle_process.run("stranded-repo", SENTENCEPIECE, work / "tokenizer5" / "tokenizer.json", directory)
    return directory


def test_the_pages_commands_print_what_it_shows(recipe):
    steps = transcript()
    assert [command.split()[:2] for command, _ in steps if command.startswith("bertconv")] == [
        ["bertconv", "convert"], ["bertconv", "verify"], ["bertconv", "convert"], ["bertconv", "diff"],
        ["bertconv", "verify"], ["bertconv", "fill-mask"]]
    for command, shown in steps:
        program, *arguments = shlex.split(command)
        if program == "ls":
            assert sorted(path.name for path in (recipe / arguments[0]).iterdir()) == shown, command
            continue
        assert program == "bertconv", command
        result = run_cli(*arguments, cwd=recipe, timeout=300)
        assert result.exit_code == 0, (command, result.stderr)
        printed = [line.rstrip() for line in (result.stdout + result.stderr).replace(str(recipe), PAGE_DIRECTORY)
                   .splitlines()]
        assert printed == shown, command


def test_transformers_5_loads_each_output_with_4_57s_logits_and_tokenizer(recipe, monkeypatch):
    """After the commands: the page's Python, run as written in the recipe's directory, and again
    on the Flax output, against what transformers 4.57 computed from the TF and Flax files."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    monkeypatch.chdir(recipe)
    for command, _ in transcript():
        if command.startswith("bertconv convert"):
            assert run_in_process(*shlex.split(command)[1:], "--force").exit_code == 0
    expected = np.load(recipe / "expected.npz")
    [code] = section_blocks("python")
    for output, framework in (("xlmr-pt", "tf"), ("xlmr-flax-pt", "flax")):
        for carried in ("sentencepiece.bpe.model", "tokenizer.json", "tokenizer_config.json",
                        "special_tokens_map.json"):
            assert (recipe / output / carried).read_bytes() == (recipe / "xlmr-tf" / carried).read_bytes()
        namespace: dict = {}
        with torch.no_grad():
            exec(code.replace('"xlmr-pt"', f'"{output}"'), namespace)  # the page's code, on this output
        _, info = transformers.AutoModelForMaskedLM.from_pretrained(output, output_loading_info=True)
        assert not any(info.values()), info
        ids = namespace["tokenizer"]("Hello world, this is a <mask> test.")["input_ids"]
        assert ids == expected["input_ids"][0].tolist()
        assert np.abs(namespace["logits"].numpy() - expected[framework]).max() <= LOGITS_ATOL, output
