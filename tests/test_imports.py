"""Header-only commands import only what they use: no h5py unless the file is HDF5, no NumPy
where no tensor data is read, no rich where nothing is drawn (each checked in a fresh process)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib

import pytest

from conftest import FIXTURES, ROOT

HEAVY = ("numpy", "h5py", "rich", "torch")

_RUN = """
import contextlib, io, json, sys
from bertconv.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main(sys.argv[1:])
    except SystemExit as exit:
        status = exit.code
print(json.dumps({"status": status, "imported": sorted(m for m in %r if m in sys.modules)}))
""" % (HEAVY,)


def imported_by(*args: str) -> tuple[int, set[str]]:
    """The exit status of `bertconv ARGS` run in a fresh interpreter, and which of HEAVY it imported."""
    proc = subprocess.run([sys.executable, "-c", _RUN, *args], capture_output=True, text=True, cwd=ROOT, check=True)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return result["status"], set(result["imported"])


def test_importing_the_cli_imports_none_of_the_heavy_libraries():
    code = f"import bertconv.cli, sys; print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize("checkpoint", ["hf/pretraining/model.safetensors", "hf/pretraining_bin/pytorch_model.bin",
                                        "hf/legacy_bin/pytorch_model.bin", "tf/full"])
def test_audit_reads_headers_without_numpy_or_h5py(checkpoint):
    status, imported = imported_by("audit", str(FIXTURES / checkpoint))
    assert status == 0
    assert imported == {"rich"}  # the table it draws


def test_audit_json_draws_nothing_and_imports_nothing_heavy():
    status, imported = imported_by("audit", "--json", str(FIXTURES / "hf/pretraining/model.safetensors"))
    assert (status, imported) == (0, set())


def test_an_hdf5_file_brings_h5py_in():
    """The other side of the lazy import: the checks above can see an import when there is one."""
    status, imported = imported_by("audit", "--json", str(FIXTURES / "bert4keras/v50-pool-nsp-mlm/bert4keras_model.h5"))
    assert status == 0 and {"h5py", "numpy"} <= imported


def test_the_safetensors_library_is_a_test_oracle_not_a_dependency():
    """bertconv's safetensors codec is its own (containers/safetensors_file.py: streaming writes,
    byte offsets, bfloat16); the library is only what the tests check it against."""
    importers = []
    for path in sorted((ROOT / "bertconv").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            if any(name.split(".")[0] == "safetensors" for name in names):
                importers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert importers == []
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.split(">")[0].split("=")[0].strip() == "safetensors"]
    assert any(d.startswith("safetensors") for d in project["optional-dependencies"]["test"])
