"""docs/ARCHITECTURE.md and the Makefile kept true of the code.

- The import levels the page draws (its first code block, one module or package per line,
  indented one level deeper per step down) are the ones the code follows: every module of
  bertconv sits on one line, and imports only from its own level or deeper ones.
- Outside formats/, code reaches formats through the package or the registry only; runtimes and
  checks ask the registry at most.
- Every path the page names exists, and it names every registered format.
- `make fixtures` runs every fixtures/make_*.py.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from bertconv import formats
from conftest import ROOT

PAGE = ROOT / "docs" / "ARCHITECTURE.md"
PACKAGE = ROOT / "bertconv"
#: What code outside formats/ may import from it: the package (resolve, read, TARGETS) and the registry.
#: What the rest of the package may import of formats/: the registry, and the Hugging Face cache,
#: which resolves repo ids to paths for every command.
FORMATS_FACADE = {"bertconv.formats", "bertconv.formats.registry", "bertconv.formats.hf", "bertconv.formats.hf.cache"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def levels() -> dict[str, int]:
    """Module or package name -> its level in the page's diagram (0 at the top)."""
    block = PAGE.read_text().split("```")[1]
    found = {}
    for line in block.splitlines():
        match = re.match(r"^( *)(bertconv/\S+)", line)
        if match:
            name = match.group(2).removesuffix("/").removesuffix(".py").removesuffix("/__init__")
            found[name.replace("/", ".")] = len(match.group(1)) // 2
    return found


def level_of(module: str, table: dict[str, int]) -> int:
    """The level of the longest diagram entry that is `module` or a package holding it."""
    owners = [name for name in table if module == name or module.startswith(name + ".")]
    owners = [name for name in owners if name != "bertconv" or module == "bertconv"]
    if not owners:
        raise AssertionError(f"{module} is on no line of the diagram in {PAGE.name}: place it there")
    return table[max(owners, key=len)]


def imports_of(module: str) -> set[str]:
    """The bertconv modules `module` imports (anywhere in it, lazy imports included)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = base[:len(base) - node.level + 1] if node.level else []
            source = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:  # `from .hf import checkpoint` imports the module bertconv.formats.hf.checkpoint
                found.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in MODULES else source)
    return {name for name in found if name == "bertconv" or name.startswith("bertconv.")}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_never_run_back_up_the_diagram(module):
    table = levels()
    mine = level_of(module, table)
    for imported in imports_of(module):
        assert level_of(imported, table) >= mine, f"{module} (level {mine}) imports {imported}, a level above it"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not m.startswith("bertconv.formats")))
def test_only_formats_import_format_modules(module):
    reached = {name for name in imports_of(module) if name.startswith("bertconv.formats")}
    assert reached <= FORMATS_FACADE, f"{module} imports {reached - FORMATS_FACADE}"
    if module.startswith(("bertconv.runtime", "bertconv.checks")):
        assert reached <= {"bertconv.formats.registry"}, f"{module} imports {reached}"


def test_every_path_the_page_names_exists_and_every_format_is_named():
    text = PAGE.read_text()
    paths = re.findall(r"\b(?:bertconv|tests|fixtures|docs)/[\w/.<>*]*[\w>]", text)
    paths += ["bertconv/" + p for p in re.findall(r"(?<![\w/])((?:commands|formats|runtime|checks|containers)/\w+\.py)", text)]
    named = {path for path in paths if "<" not in path and "*" not in path}  # templates like <name>.py
    assert named, "the page names no files"
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert not missing, f"{PAGE.name} names files that do not exist: {missing}"
    for fmt in formats.FORMATS:
        assert f"`{fmt.target}`" in text, f"{PAGE.name} does not name the format {fmt.target}"
    assert set(levels()) >= {module_name(p) for p in PACKAGE.iterdir()
                             if p.suffix == ".py" or (p / "__init__.py").exists()}


def test_make_fixtures_runs_every_fixture_script():
    recipe = re.search(r"^fixtures:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert recipe, "the Makefile has no fixtures target"
    scripts = {path.name for path in (ROOT / "fixtures").glob("make_*.py")}
    run = set(re.findall(r"fixtures/(make_\w+\.py)", recipe.group(1)))
    assert scripts and scripts == run, f"not run by `make fixtures`: {sorted(scripts - run)}"


#: The size a module or a package folder may grow to before it is split by job (issue 30).
MAX_MODULE_LINES = 500
MAX_FOLDER_MODULES = 15


@pytest.mark.parametrize("script", sorted((ROOT / "fixtures").glob("make_*.py")), ids=lambda path: path.name)
def test_every_name_a_fixture_script_takes_from_bertconv_exists(script):
    """`make fixtures` runs these scripts with TensorFlow and the other libraries, which the suite
    does not run them with: a module or name moved inside bertconv must not break one unseen."""
    import importlib.util

    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "bertconv":
            module = importlib.import_module(node.module)
            missing = [alias.name for alias in node.names
                       if not hasattr(module, alias.name) and importlib.util.find_spec(f"{node.module}.{alias.name}") is None]
            assert not missing, f"{script.name} line {node.lineno}: {node.module} has no {', '.join(missing)}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "bertconv":
                    importlib.import_module(alias.name)


def test_no_module_outgrows_one_job():
    long = {str(path.relative_to(ROOT)): n for path in PACKAGE.rglob("*.py")
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by job): {long}"


def test_no_package_folder_holds_more_than_fifteen_modules():
    crowded = {str(folder.relative_to(ROOT)): n for folder in [PACKAGE, *PACKAGE.rglob("*")]
               if folder.is_dir() and (n := len(list(folder.glob("*.py")))) > MAX_FOLDER_MODULES}
    assert not crowded, f"folders over {MAX_FOLDER_MODULES} modules (group them): {crowded}"
