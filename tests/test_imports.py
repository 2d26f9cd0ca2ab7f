"""Header-only commands import only what they use: no h5py unless the file is HDF5, no NumPy
where no tensor data is read, no rich where nothing is drawn, no click at all (the command line is
argparse's; click's import alone took as long as the interpreter's start-up). Each is checked in a
fresh process."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
import tomllib

import pytest

from conftest import FIXTURES, ROOT, run_cli
from format_fixtures import FUZZ_OF, fixture_paths

from bertconv import transposes
from bertconv.formats.registry import FORMATS
from bertconv.lazy import module_name

HEAVY = ("numpy", "h5py", "rich", "torch", "msgpack", "click", "cramjam")
#: What reading a torch checkpoint needs and a safetensors file does not.
TORCH_CONTAINER = ("pickle", "bertconv.containers.torch_pickle", "bertconv.containers.zip_archive")
#: zipfile, with the shutil, bz2, lzma and threading it imports (4.8-8 ms): bertconv's own reader
#: reads the archives torch writes (`containers/zip_archive.py`).
ZIPFILE = ("zipfile",)
#: What writing an output needs (its threads, O_DIRECT blocks, early writeback) and looking a repo
#: id up in the Hugging Face cache: a header-only command on a file needs neither.
WRITING_AND_CACHE = ("threading", "bertconv.containers.direct_output", "bertconv.containers.writeback",
                     "bertconv.formats.hf.cache")
#: The format modules, as the registry names them; a command imports only those whose container
#: its path may be.
FORMAT_MODULES = tuple(sorted(module_name(entry.module) for entry in FORMATS))
#: What a dataclass costs at import: `dataclasses` (and the `inspect`, `ast` and `dis` it imports)
#: and the methods it compiles per class. bertconv's value types are records (`bertconv.records`),
#: real dataclasses only once somebody asks.
DATACLASS_MACHINERY = ("dataclasses", "inspect")
#: 3.6-6.7 ms of every command's start-up; bertconv's annotations do without it at run time.
TYPING = ("typing",)
#: `copy` and the `weakref` it imports: 1.4 ms, for a deep copy no report's JSON needs.
COPY = ("copy", "weakref")
#: ctypes (3.5 ms) and the byte comparison it serves (`checks/same_bytes.py`), which only a tree
#: that stores copies of a parameter, or a diff, needs.
CTYPES = ("ctypes", "bertconv.checks.same_bytes")
#: TF's bundle reader (with google_crc32c), which only a path that may be a bundle needs.
TF_BUNDLE_CONTAINER = "bertconv.containers.tensorflow.bundle"

_RUN = """
import contextlib, io, json, sys
from bertconv.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main(sys.argv[1:])
    except SystemExit as exit:
        status = exit.code
print(json.dumps({"status": status, "imported": sorted(m for m in %r if m in sys.modules)}))
""" % (HEAVY + FORMAT_MODULES + TORCH_CONTAINER + WRITING_AND_CACHE + DATACLASS_MACHINERY + TYPING
       + COPY + ZIPFILE + CTYPES + ("importlib.metadata", TF_BUNDLE_CONTAINER),)


def imported_by(*args: str) -> tuple[int, set[str]]:
    """The exit status of `bertconv ARGS` run in a fresh interpreter, and which of HEAVY and of the
    format modules it imported."""
    proc = subprocess.run([sys.executable, "-c", _RUN, *args], capture_output=True, text=True, cwd=ROOT, check=True)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return result["status"], set(result["imported"])


def test_importing_the_cli_imports_none_of_the_heavy_libraries():
    code = f"import bertconv.cli, sys; print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert proc.stdout.strip() == "[]"


def test_importing_the_cli_imports_no_format_module():
    code = f"import bertconv.cli, sys; print(sorted(m for m in {FORMAT_MODULES!r} if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert proc.stdout.strip() == "[]"


#: checkpoint -> the format modules its audit may import: its own, and those of the same container.
#: A legacy torch pickle starts with 0x80, as a msgpack map does, but its next byte is no string
#: key: Flax's reader is not asked. A bare state dict is no training script's save: the readers of fairseq's, fair-esm's and Megatron-LM's saves
#: (a state dict under `model`) are not asked. A Google
#: bundle's keys are variable names, no object paths: the readers of object-based checkpoints (the
#: Model Garden's, a SavedModel's, bert-for-tf2's, bert4keras') are not asked.
AUDITS = {
    "hf/pretraining/model.safetensors": {"bertconv.formats.hf.checkpoint"},
    "hf/pretraining_bin/pytorch_model.bin": {"bertconv.formats.hf.checkpoint"},
    "hf/legacy_bin/pytorch_model.bin": {"bertconv.formats.hf.checkpoint"},
    "tf/full": {"bertconv.formats.tensorflow.google"},
    "tf/full/bert_model.ckpt.index": {"bertconv.formats.tensorflow.google"},
}


@pytest.mark.parametrize("checkpoint", sorted(AUDITS))
def test_audit_reads_headers_without_numpy_h5py_rich_or_other_formats(checkpoint):
    """Printed to a pipe, the report is plain text: no rich. Only the formats of the file's
    container are imported."""
    status, imported = imported_by("audit", str(FIXTURES / checkpoint))
    assert status == 0
    assert not imported & set(HEAVY)
    formats = imported & set(FORMAT_MODULES)
    assert formats <= AUDITS[checkpoint] and formats & AUDITS[checkpoint]
    if checkpoint.endswith(".safetensors"):
        assert not imported & set(TORCH_CONTAINER)
    assert not imported & set(ZIPFILE)


#: The readers of training scripts' torch saves, which a bare state dict does without.
TORCH_SAVE_FORMATS = {"bertconv.formats.fairseq", "bertconv.formats.pytorch.fair_esm",
                      "bertconv.formats.pytorch.megatron_lm"}


@pytest.mark.parametrize("checkpoint, expected", [
    ("family_google/fairseq/roberta/model.pt", "fairseq"),
    ("fair_esm/released/esm2_t2_16_fixture.pt", "fair-esm"),
    ("megatron_lm/v3/release/mp_rank_00/model_optim_rng.pt", "megatron-lm"),
    ("megatron_lm/v0", "megatron-lm"),
])
def test_a_torch_save_with_a_model_entry_asks_the_training_scripts_readers(checkpoint, expected):
    """The other side: a state dict under `model` is asked of the readers of fairseq's, fair-esm's
    and Megatron-LM's saves, the one it is claims it."""
    status, imported = imported_by("audit", str(FIXTURES / checkpoint))
    assert status == 0 and imported & TORCH_SAVE_FORMATS
    result = run_cli("audit", "--json", FIXTURES / checkpoint)
    assert json.loads(result.stdout)["format"] == expected


#: The object-based checkpoints' readers, which a Google bundle does without.
TF_OBJECT_FORMATS = {"bertconv.formats.tensorflow.model_garden", "bertconv.formats.tensorflow.hub_savedmodel",
                     "bertconv.formats.tensorflow.bert_for_tf2", "bertconv.formats.keras.bert4keras_objects"}


@pytest.mark.parametrize("checkpoint", ["tf2/garden-encoder", "tf2/hub-savedmodel", "tf2/bert-for-tf2"])
def test_an_object_keyed_bundle_asks_the_object_checkpoint_readers(checkpoint):
    """The other side: a bundle keyed by object paths is asked of every reader of those, and of
    Google's (which says no)."""
    status, imported = imported_by("audit", str(FIXTURES / checkpoint))
    assert status == 0
    assert TF_OBJECT_FORMATS | {"bertconv.formats.tensorflow.google"} <= imported


@pytest.mark.parametrize("command", ["audit", "inspect"])
@pytest.mark.parametrize("checkpoint", ["hf/pretraining/model.safetensors", "hf/pretraining"])
def test_header_commands_on_a_file_start_no_thread_and_skip_the_hub_cache(command, checkpoint):
    """A file, or a directory that is no repo folder of the cache, is itself, never a repo id: no
    cache lookup; and reading headers writes nothing."""
    status, imported = imported_by(command, str(FIXTURES / checkpoint))
    assert status == 0
    assert not imported & set(WRITING_AND_CACHE)


@pytest.mark.parametrize("command", ["audit", "inspect", "verify"])
def test_header_commands_compile_no_dataclass(command):
    """Their reports, the tree, the config and the registry are records: `dataclasses` and
    `inspect` are not even imported (issue 31: start-up within 3x of the interpreter's)."""
    status, imported = imported_by(command, str(FIXTURES / "hf/pretraining/model.safetensors"))
    assert status == 0
    assert not imported & set(DATACLASS_MACHINERY)


@pytest.mark.parametrize("command", ["audit", "inspect", "verify"])
@pytest.mark.parametrize("checkpoint", sorted(AUDITS))
def test_header_commands_import_no_typing_nor_copy(command, checkpoint):
    """Annotations are strings (`from __future__ import annotations`), typing's names are
    imported under `if TYPE_CHECKING:` and the abstract collections from `collections.abc`:
    `typing` itself took 3.6-6.7 ms of every command (issue 31). NumPy imports both: verify of a
    TF bundle, which reads its head's values through NumPy, has them that way only."""
    status, imported = imported_by(command, str(FIXTURES / checkpoint))
    assert status in (0, 1)
    if command != "verify" or not checkpoint.startswith("tf/"):
        assert "numpy" not in imported
    assert not imported & set(TYPING + COPY) or "numpy" in imported


@pytest.mark.parametrize("command, checkpoint", [
    *((command, "hf/pretraining/model.safetensors") for command in ("audit", "inspect", "verify")),
    *((command, "hf_tf/pretraining/tf_model.h5") for command in ("audit", "inspect")),
])
def test_header_commands_compare_no_stored_copies(command, checkpoint):
    """`verify` compares a parameter's stored copies (a `tf_model.h5`'s embeddings) with
    `same_bytes`, which a file storing none never loads; `audit` and `inspect` read headers only,
    also of a `tf_model.h5` that stores the embeddings twice, so the comparison never starts."""
    status, imported = imported_by(command, str(FIXTURES / checkpoint))
    assert status == 0
    assert not imported & set(CTYPES)


def test_a_repo_id_is_still_looked_up_in_the_hub_cache(tmp_path, monkeypatch):
    """The other side: a path that does not exist, spelled as a repo id, goes to the cache."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    status, imported = imported_by("audit", "no-such-org/no-such-model")
    assert status == 2
    assert "bertconv.formats.hf.cache" in imported


@pytest.mark.parametrize("checkpoint", ["hf/pretraining/model.safetensors", "trained/hf"])
def test_plain_verify_judges_the_head_without_numpy(checkpoint):
    """Plain verify reads the head's sign tensors as bytes (`LazyTensor.read_bytes`), so a
    safetensors file is verified, trained-head checks included, with no NumPy."""
    status, imported = imported_by("verify", str(FIXTURES / checkpoint))
    assert status == 0
    assert not imported & set(HEAVY)


def test_audit_json_draws_nothing_and_imports_nothing_heavy():
    """Nor importlib.metadata (and its zipfile): the stamp's version is bertconv.__version__."""
    status, imported = imported_by("audit", "--json", str(FIXTURES / "hf/pretraining/model.safetensors"))
    assert (status, imported) == (0, {"bertconv.formats.hf.checkpoint"})


def test_the_stamped_version_is_the_installed_packages():
    from importlib import metadata

    import bertconv
    from bertconv.commands import output

    assert output.version() == bertconv.__version__ == metadata.version("bertconv")


def test_on_a_terminal_the_report_is_drawn_with_rich(monkeypatch):
    """The other side of plain text: styles where they show (forced here, as on a terminal)."""
    monkeypatch.setenv("FORCE_COLOR", "1")
    proc = subprocess.run([sys.executable, "-c", _RUN, "audit", str(FIXTURES / "hf/pretraining/model.safetensors")],
                          capture_output=True, text=True, cwd=ROOT, check=True)
    assert "rich" in json.loads(proc.stdout.strip().splitlines()[-1])["imported"]


def test_the_plain_report_is_what_rich_prints_to_a_pipe():
    from io import StringIO

    from rich.console import Console

    from bertconv.commands.common import Table, plain

    table = Table("name", "count", "")
    table.add_row("[bold]embeddings[/]", "1,024", "[green]ok[/]")
    table.add_row("escaped \\[not a tag]", "7", "[red]MISMATCH[/]")
    drawn = StringIO()
    Console(file=drawn, width=200, highlight=False, soft_wrap=True).print(table.rich())
    assert "\n".join(table.lines()) == drawn.getvalue().rstrip("\n")
    assert plain("[red]problem:[/] a\\[b] c") == "problem: a[b] c"


@pytest.mark.parametrize("text", ["plain", "a [bold] b", "[/]", "[not a tag", "\\[red]x", "\\\\[red]x", "ends \\",
                                  "ends \\\\", "[#ff0000]hex[/]", "[@click]x", "path/[model]/w.bin", "[1] [a b]", ""])
def test_escape_is_rich_markup_escape(text):
    """`commands.common.escape` escapes as rich does (it exists so that printing to a pipe needs
    no rich): the same markup, printed the same by rich and by `plain` (as the text itself, but for
    rich's own doubling of a trailing backslash)."""
    from io import StringIO

    from rich.console import Console
    from rich.markup import escape as rich_escape

    from bertconv.commands.common import escape, plain

    assert escape(text) == rich_escape(text)
    drawn = StringIO()
    Console(file=drawn, width=200, highlight=False, soft_wrap=True).print(escape(text), end="")
    assert drawn.getvalue() == plain(escape(text))
    assert drawn.getvalue() == text or text.endswith("\\")


def test_registry_entries_state_what_their_modules_say():
    """The registry states names, files and models as values (so that nothing is imported to
    read them); they must be the modules' own."""
    from bertconv import formats

    for fmt in formats.FORMATS:
        module = fmt.module
        declared = getattr(module, "FORMATS", None) or (module.FORMAT,)
        assert fmt.names == tuple(declared), fmt.target
        if hasattr(module, "OWNED_FILES"):
            assert fmt.owned_files == module.OWNED_FILES, fmt.target
        assert fmt.directory_files == getattr(module, "DIRECTORY_FILES", ()), fmt.target
        assert fmt.models == tuple(getattr(module, "MODELS", ())), fmt.target


def _fixture_paths():
    from bertconv import formats

    paths = {path for fmt in formats.FORMATS for path in fixture_paths(fmt, FIXTURES)}
    paths |= {FIXTURES / fixture for fmt in formats.FORMATS for fixture in FUZZ_OF.get(fmt.target, ())}
    paths |= {child for path in list(paths) if path.is_dir() for child in path.iterdir() if child.is_file()}
    return sorted(paths)


def test_container_hints_cover_every_claim_on_every_fixture():
    """`resolve` asks a format not imported yet only when the path may be its container: the hints
    must include the container of every format whose sniffer (or, for a directory, `candidates`)
    claims the path, or a file would resolve differently depending on what was imported before."""
    from bertconv import formats
    from bertconv.formats.registry import CONTAINERS, container_hints

    checked = found_by_name = 0
    for path in _fixture_paths():
        hints = container_hints(path)
        assert hints <= CONTAINERS
        for fmt in formats.FORMATS:
            assert set(fmt.containers) <= CONTAINERS and fmt.containers
            found = fmt.candidates(path) if path.is_dir() else []
            claims = bool(found) if path.is_dir() else bool(fmt.sniff(path))
            if claims:
                checked += 1
                assert not hints.isdisjoint(fmt.containers), f"{path}: {fmt.target} claims it, hints {sorted(hints)}"
            if found and fmt.directory_files:
                assert {candidate.name for candidate in found} <= set(fmt.directory_files), (path, fmt.target)
                assert fmt.may_find_in(path), (path, fmt.target)
                found_by_name += 1
    assert checked > 50 and found_by_name >= 4


#: The readers that look for fixed file names in a directory (`Format.directory_files`), and TF's
#: bundle container.
BY_NAME_AND_BUNDLE = {"bertconv.formats.hf.tf", "bertconv.formats.hf.flax", "bertconv.formats.keras_hub.preset",
                      TF_BUNDLE_CONTAINER}


def test_a_keras_save_asks_no_reader_of_files_it_does_not_hold():
    """A bert4keras directory (its .h5 and bert_config.json) holds no tf_model.h5, flax_model.msgpack,
    keras-hub weights nor TF bundle: those readers are not imported, nor is TF's bundle container
    (bert-for-tf2's reader, which reads both .h5 saves and bundles, lists the latter without it).
    An HDF5 file's first byte (0x89) also starts a msgpack map, but no string key follows it: the
    file itself is not asked of Flax's reader either (the other HDF5 readers judge its content)."""
    status, imported = imported_by("inspect", str(FIXTURES / "bert4keras/v50-pool-nsp-mlm"))
    assert status == 0 and not imported & BY_NAME_AND_BUNDLE
    status, imported = imported_by("inspect", str(FIXTURES / "bert4keras/v50-pool-nsp-mlm/bert4keras_model.h5"))
    assert status == 0 and not imported & {"bertconv.formats.hf.flax", TF_BUNDLE_CONTAINER}
    assert imported_by("audit", str(FIXTURES / "keras_hub/bert"))[1] & BY_NAME_AND_BUNDLE == {
        "bertconv.formats.keras_hub.preset"}
    assert imported_by("audit", str(FIXTURES / "tf2/bert-for-tf2"))[1] & BY_NAME_AND_BUNDLE == {TF_BUNDLE_CONTAINER}


@pytest.mark.parametrize("command", ["audit", "inspect"])
@pytest.mark.parametrize("checkpoint", ["bert4keras/v50-pool-nsp-mlm/bert4keras_model.h5",
                                        "hf_tf/pretraining/tf_model.h5", "keras_hub/bert/model.weights.h5"])
def test_a_keras_hdf5_file_is_read_without_h5py_or_numpy(command, checkpoint):
    """Keras' files are read by bertconv's own HDF5 reader (containers/hdf5/metadata.py): their
    headers need neither h5py nor NumPy, and the formats' writers (HDF5's writing machinery)
    wait for a conversion."""
    status, imported = imported_by(command, str(FIXTURES / checkpoint))
    assert status == 0
    assert not imported & {"h5py", "numpy", *WRITING_AND_CACHE}


def test_an_hdf5_file_of_a_newer_format_brings_h5py_in(tmp_path):
    """The other side: a file bertconv's own reader leaves to h5py (here HDF5's newest format) is
    read with h5py, and the checks above can see an import when there is one."""
    import h5py

    source = FIXTURES / "bert4keras/v50-pool-nsp-mlm/bert4keras_model.h5"
    path = tmp_path / source.name
    with h5py.File(source, "r") as old, h5py.File(path, "w", libver="latest") as new:
        new.attrs.update(old.attrs)
        for name in old:
            old.copy(old[name], new)
    status, imported = imported_by("audit", "--json", str(path))
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


#: Runs a writer's checks that come before or after its file, on a BERT read from its headers.
_WRITER_CHECKS = """
import sys
from bertconv import formats
from bertconv.formats.keras_hub.write import write_caveats
from bertconv.formats.table import unit_norm_scales
tree = formats.read(sys.argv[1])
unit_norm_scales(tree, "bert4keras")
write_caveats(tree)
print("numpy" in sys.modules)
"""


def test_a_writers_checks_on_a_bert_import_no_numpy():
    """bert4keras' check of RoFormer-v2's norm scales and keras-hub's of DeBERTa's relative
    buckets need NumPy for those models only: imported for a BERT, it held up the output's first
    byte (or its last) on the conversion's main thread, where the writer would import it on a
    helper thread while the file is written."""
    proc = subprocess.run([sys.executable, "-c", _WRITER_CHECKS, str(FIXTURES / "hf" / "pretraining" / "model.safetensors")],
                          capture_output=True, text=True, cwd=ROOT, check=True)
    assert proc.stdout.strip() == "False"


_CONVERSION = """
import sys
from bertconv.cli import main
from bertconv.containers import direct_output, stream
direct_output.DIRECT_MIN_BYTES = 0  # the large-output path and its writer threads, for a small file
stream.TWO_THREAD_TRANSPOSE_BYTES = 0  # every transpose split with the helper thread
try:
    main(sys.argv[1:])
except SystemExit as exit:
    assert exit.code == 0, exit.code
print(sorted(m for m in ("concurrent.futures", "logging", "shutil") if m in sys.modules))
"""


@pytest.mark.parametrize("source, target, carried", [("tf/full", "hf", ["shutil"]), ("hf/pretraining", "tf", [])])
def test_a_conversion_imports_neither_concurrent_futures_nor_logging_nor_shutil_for_nothing(tmp_path, source, target,
                                                                                             carried):
    """Its writers, loader, checksums and transposes run on `bertconv.threads`: concurrent.futures
    imports logging, 8.5-11.8 ms of the main thread before the output's first byte. shutil (with
    bz2 and lzma) is imported to copy the tokenizer files that travel with the checkpoint
    (tf/full's vocab.txt), and only then."""
    proc = subprocess.run([sys.executable, "-c", _CONVERSION, "convert", str(FIXTURES / source), str(tmp_path / "out"),
                           "--to", target, "--quiet"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == str(carried)


#: What a BERT loses in a keras-hub preset (its GELU is tanh's, its head's activation and norm are
#: the preset's own), accepted here for every target alike.
ACCEPTED_BY_KERAS_HUB = ("hidden_act", "mlm_hidden_act", "mlm_layer_norm_eps", "nsp")

_TRANSPOSING_CONVERSION = """
import sys
from bertconv.cli import main
from bertconv.containers import direct_output
direct_output.DIRECT_MIN_BYTES = int(sys.argv.pop(1))  # 0: the large-output path, for a small file
try:
    main(sys.argv[1:])
except SystemExit as exit:
    assert exit.code == 0, exit.code
print("numpy" in sys.modules)
"""


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "buffered"])
@pytest.mark.parametrize("source, target", [("tf/full", "hf"), ("hf/pretraining", "tf"), ("hf/pretraining", "hf-flax"),
                                            ("hf/pretraining", "keras-hub"), ("family_hf_flax/xlm-roberta/masked_lm", "hf")])
def test_a_conversion_that_transposes_imports_no_numpy(tmp_path, source, target, direct):
    """Every kernel between Hugging Face's [out, in] and TensorFlow's [in, out] is transposed from
    a map of its file by OpenBLAS (`containers/mapped_matrix.py`), the CRC32C of a TF bundle's
    checked on the way: NumPy's import (95 ms, most of it holding the GIL) held up the first
    transposed tensor of every such conversion. Into a large output's staging blocks, a small
    one's buffered file and a msgpack stream's odd bytes alike, and from a msgpack stream's."""
    if importlib.util.find_spec("numpy") is None or not transposes.transposes_at_addresses():
        pytest.skip("this NumPy carries no OpenBLAS: transposes go by NumPy's tiles")
    minimum = "0" if direct else str(1 << 40)
    proc = subprocess.run([sys.executable, "-c", _TRANSPOSING_CONVERSION, minimum, "convert", str(FIXTURES / source),
                           str(tmp_path / "out"), "--to", target, "--quiet",
                           *(f"--accept-loss={field}" for field in ACCEPTED_BY_KERAS_HUB)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "False"


_DIFF = """
import sys
from bertconv.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exit:
    assert exit.code == 0, exit.code
print("numpy" in sys.modules)
"""


@pytest.mark.parametrize("target", ["tf", "hf-flax", "bert4keras"])
def test_a_diff_of_a_conversion_against_its_source_imports_no_numpy(tmp_path, target):
    """Equal tensors are shown equal from the two files' bytes (`checks/same_bytes.py`): NumPy's
    import (95 ms) made a bert-base diff as slow as the conversion it checks."""
    if importlib.util.find_spec("numpy") is None or not transposes.transposes_at_addresses():
        pytest.skip("this NumPy carries no OpenBLAS: transposed kernels are compared by NumPy")
    source = FIXTURES / "hf" / "masked_lm"
    converted = tmp_path / ("out.h5" if target == "bert4keras" else "out")
    subprocess.run([sys.executable, "-m", "bertconv.cli", "convert", str(source), str(converted), "--to", target,
                    "--quiet"], check=True, cwd=ROOT)
    proc = subprocess.run([sys.executable, "-c", _DIFF, "diff", str(source), str(converted), "--json"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "False"


_LAUNCH = """
import os, sys
from bertconv import cli, launch
cli._end_now = lambda status: (print(status, "locale" in sys.modules, file=sys.stderr), os._exit(0))
launch.run()
"""


def test_the_bertconv_process_takes_argparses_messages_as_written_without_locale():
    """In the `bertconv` process (`launch.run`) argparse's messages skip the gettext lookup that
    imported `locale` (3.5-7 ms of every command's start-up) for catalogs Python ships none of."""
    fixture = str(FIXTURES / "hf/pretraining/model.safetensors")
    proc = subprocess.run([sys.executable, "-c", _LAUNCH, "audit", fixture], capture_output=True, text=True, cwd=ROOT)
    assert proc.stderr.splitlines()[-1] == "0 False", proc.stderr
    proc = subprocess.run([sys.executable, "-c", _LAUNCH, "audit", "--jobs"], capture_output=True, text=True, cwd=ROOT)
    assert "bertconv audit: error: argument --jobs/-j: expected one argument" in proc.stderr, proc.stderr
    assert proc.stderr.splitlines()[-1] == "2 False", proc.stderr
