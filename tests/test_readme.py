"""The README against the code: every option each command has is documented, every option and
value the README names exists, its links lead somewhere, the oracle versions it states are the
ones pinned (and installed), and it stays short enough to read."""

from __future__ import annotations

import importlib
import re
from importlib import metadata
from pathlib import Path

import pytest

from bertconv.cli import COMMANDS, _main_parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
#: What the README may hold (issue 30): what the tool does and its tables; the rest is in docs/.
README_MAX_LINES = 350
#: The main parser's own options are documented under this name in the options table.
PROGRAM = "bertconv"


def _section(text: str, heading: str) -> str:
    """The body of the `## heading` section of a Markdown text."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert match, f"README has no '## {heading}' section"
    return match.group(1)


def _table_rows(text: str) -> list[list[str]]:
    """The body rows of every Markdown table in `text`, cells split on unescaped pipes."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not re.match(r"^\|[-| ]+\|$", line):
            rows.append([cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows[1:] if rows else rows  # the header row


def _options_in(cell: str) -> dict[str, list[str] | None]:
    """Option string -> the values the cell lists for it (`--runtime numpy|torch`: ["numpy",
    "torch"]; `--atol X`: None), from each `code span` of a cell that starts with a dash."""
    found = {}
    for span in re.findall(r"`([^`]+)`", cell):
        for flag, value in re.findall(r"(?:^|[\s\[])(--?[a-z][a-z0-9-]*)(?:[ =]([^\s\[\]]+))?", span):
            found[flag] = value.split("|") if value and "|" in value else None
    return found


def _code_options() -> dict[str, dict[str, tuple | None]]:
    """Command -> option string -> its choices (None when free), read from each command's
    `ARGUMENTS` and the main parser: the lists the CLI itself parses with."""
    options = {}
    for name, (module_name, _) in COMMANDS.items():
        module = importlib.import_module(f"bertconv.commands.{module_name}")
        options[name] = {flag: _choices(settings) for flags, settings in module.ARGUMENTS
                         for flag in flags if flag.startswith("-")}
    options[PROGRAM] = {flag: action.choices for action in _main_parser()._actions
                        for flag in action.option_strings if flag not in ("-h", "--help")}
    return options


def _choices(settings: dict) -> tuple | None:
    return tuple(settings["choices"]) if settings.get("choices") is not None else None


def _documented_options() -> dict[str, dict[str, list[str] | None]]:
    """Command -> option string -> values, from the README's options table."""
    documented: dict[str, dict] = {}
    for row in _table_rows(_section(README.read_text(), "Options")):
        options, commands = _options_in(row[0]), [name.strip() for name in row[1].split(",")]
        for command in commands:
            documented.setdefault(command, {}).update(options)
    return documented


def test_every_option_of_every_command_is_documented():
    code, documented = _code_options(), _documented_options()
    undocumented = sorted(f"{command} {flag}" for command, flags in code.items() for flag in flags
                          if flag not in documented.get(command, {}))
    assert not undocumented, f"options missing from the README's options table: {undocumented}"


def test_every_documented_option_exists():
    code, documented = _code_options(), _documented_options()
    unknown = sorted(f"{command} {flag}" for command, flags in documented.items() for flag in flags
                     if flag not in code.get(command, {}))
    assert not unknown, f"the README's options table names options the CLI does not have: {unknown}"


def test_documented_values_are_the_choices_the_cli_accepts():
    code, documented = _code_options(), _documented_options()
    for command, flags in documented.items():
        for flag, values in flags.items():
            if values is not None:
                assert code[command][flag] is not None, f"README lists values for {command} {flag}, which takes any"
                assert sorted(values) == sorted(code[command][flag]), f"{command} {flag}"


def test_the_commands_table_has_every_command_and_only_real_options():
    rows = _table_rows(_section(README.read_text(), "Commands"))
    synopses = {re.match(r"`bertconv ([a-z-]+)", row[0]).group(1): row[0] for row in rows}
    assert sorted(synopses) == sorted(COMMANDS)
    code = _code_options()
    for command, synopsis in synopses.items():
        for flag, values in _options_in(synopsis).items():
            assert flag in code[command], f"the commands table gives {command} an option it does not have: {flag}"
            if values is not None:
                assert sorted(values) == sorted(code[command][flag]), f"{command} {flag}"


def test_a_new_option_without_documentation_fails(monkeypatch):
    """The check reads the code's lists: an option added to a command shows up as undocumented."""
    from bertconv.commands import audit
    from bertconv.commands.arguments import option

    monkeypatch.setattr(audit, "ARGUMENTS", (*audit.ARGUMENTS, option("--brand-new", action="store_true")))
    with pytest.raises(AssertionError, match="audit --brand-new"):
        test_every_option_of_every_command_is_documented()


def test_readme_is_short_and_its_links_lead_somewhere():
    text = README.read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    for page in DOCS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if not re.match(r"[a-z]+://", target):
                assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"


# --- versions --------------------------------------------------------------------------------

#: The libraries whose versions the docs state, as the docs name them -> as pip names them.
STAMPED = {"transformers": "transformers", "torch": "torch", "TensorFlow": "tensorflow-cpu",
           "tensorflow-cpu": "tensorflow-cpu", "tf-keras": "tf-keras", "bert4keras": "bert4keras",
           "tokenizers": "tokenizers", "safetensors": "safetensors", "sentencepiece": "sentencepiece"}


def _pins() -> dict[str, set[str]]:
    """pip name -> the exact versions pinned (`name==X`) in pyproject.toml and the Makefile (two
    environments may pin one library: transformers 5 in .venv, 4.x in the oracle venv)."""
    pins: dict[str, set[str]] = {}
    for path in (ROOT / "pyproject.toml", ROOT / "Makefile"):
        for name, version in re.findall(r"([A-Za-z0-9_.-]+)==([0-9][0-9A-Za-z.]*)", path.read_text()):
            pins.setdefault(name.lower(), set()).add(version)
    return pins


def test_every_version_the_docs_state_is_pinned():
    """"transformers 5.24.0", "transformers 4.57", "TensorFlow 2.21" or "transformers 5": each a
    pinned version or a prefix of one."""
    pins, stated = _pins(), {}
    for page in DOCS:
        for name, version in _stamps(page.read_text()):
            pinned = pins.get(STAMPED[name], set())
            assert any(f"{pin}.".startswith(f"{version}.") for pin in pinned), \
                f"{page.name} says {name} {version}; pinned: {sorted(pinned) or 'nothing'}"
            stated.setdefault(STAMPED[name], set()).add(version)
    assert {"5.24.0", "4.57.6"} <= stated["transformers"]  # the README states both oracles' versions


def _stamps(text: str) -> list[tuple[str, str]]:
    """(library as named, version) for each "library 1.2.3" (or "library==1.2.3") in `text`."""
    names = "|".join(map(re.escape, STAMPED))
    return re.findall(rf"(?<![\w-])({names})[ =]+v?(\d+(?:\.\d+)*)", text)


def test_a_stamp_that_is_not_pinned_is_found():
    assert _stamps("torch 2.13.0+cpu, transformers 5.23.0; TensorFlow 2.21 and transformers 4.x") == [
        ("torch", "2.13.0"), ("transformers", "5.23.0"), ("TensorFlow", "2.21"), ("transformers", "4")]


@pytest.mark.parametrize("library", ["transformers", "torch", "tokenizers", "safetensors", "tensorflow-cpu",
                                     "tf-keras", "bert4keras", "sentencepiece"])
def test_the_oracles_installed_are_the_pinned_versions(library):
    """The suite checks against the library versions the project pins, not whatever is there."""
    try:
        installed = metadata.version(library)
    except metadata.PackageNotFoundError:
        pytest.skip(f"{library} is not installed")
    assert installed.split("+")[0] in _pins()[library]
