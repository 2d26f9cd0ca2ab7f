"""The format registry as data: every entry complete, consistent and true of its fixtures.

What derives from the entries (sniffing order, targets, numerics, messages, the fixtures other
tests run on) is only as good as the entries; these tests hold each entry to what it declares.
"""

from __future__ import annotations

import dataclasses
import inspect
from types import SimpleNamespace

import pytest

from bertconv import formats
from bertconv.errors import BadInput
from bertconv.formats.registry import SNIFF_ORDER, Output, Specificity, by_specificity
from bertconv.runtime.numerics import FAMILY_DEFAULTS, family_of
from conftest import FIXTURES, needs, run_in_process
from format_fixtures import FIXTURES_OF, FUZZ_OF, fixture_paths
from fuzzing import check_case

FORMATS = [pytest.param(fmt, id=fmt.target) for fmt in formats.FORMATS]
#: The formats bertconv reads: every one but the exports it runs and refuses to read (onnx).
READ_FORMATS = [pytest.param(fmt, id=fmt.target) for fmt in formats.FORMATS if fmt.check_written is None]
EXPORTS = [pytest.param(fmt, id=fmt.target) for fmt in formats.FORMATS if fmt.check_written is not None]
FIXTURE_CASES = [pytest.param(fmt, path, id=str(path.relative_to(FIXTURES)))
                 for fmt in formats.FORMATS for path in fixture_paths(fmt, FIXTURES)]


def test_targets_and_reader_names_belong_to_one_entry_each():
    targets = [fmt.target for fmt in formats.FORMATS]
    names = [name for fmt in formats.FORMATS for name in fmt.names]
    assert len(set(targets)) == len(targets) and len(set(names)) == len(names)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_reader_format_name_maps_to_its_entry_and_a_family_with_numerics(fmt):
    assert fmt.names and fmt.numerics in FAMILY_DEFAULTS
    for name in fmt.names:
        assert formats.format_named(name) is fmt
        assert family_of(name) == fmt.numerics


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_module_provides_what_the_entry_declares(fmt):
    for function in ("sniff", "candidates", "read"):
        assert callable(getattr(fmt.module, function)), f"{fmt.module.__name__} has no {function}()"
    # `model` picks one of the models a file holds, for the formats that declare them.
    expected = {"path", "config_path", "num_heads"} | ({"model"} if fmt.models else set())
    assert set(inspect.signature(fmt.read).parameters) == expected
    assert hasattr(fmt.module, "write") == (fmt.output is not None), \
        "a format writes (has an output) exactly when its module has write()"
    if fmt.output is not None:
        assert inspect.signature(fmt.write).parameters["options"].kind is inspect.Parameter.KEYWORD_ONLY
        assert fmt.writes_directory == (fmt.output is Output.DIRECTORY)
    assert fmt.description.startswith("a ")
    exports = fmt.check_written is not None  # written and run, never read: nothing to read or fuzz
    assert bool(FIXTURES_OF.get(fmt.target) and FUZZ_OF.get(fmt.target)) != exports and (fmt.compare_outputs is not None) == exports


@pytest.mark.parametrize("fmt", EXPORTS)
def test_an_export_is_written_and_its_reader_refuses_it(fmt, tmp_path):
    """An export (onnx) writes a directory its sniffer claims and its reader refuses, exit 2."""
    out = tmp_path / "out"
    needs(fmt.target)  # the export's package (onnx), an optional extra
    fmt.write(formats.read(FIXTURES / "hf" / "pretraining"), _directory(out), options=_options())
    found, exact = formats.resolve(out)
    assert found is fmt and fmt.sniff(exact) in fmt.names
    with pytest.raises(BadInput, match="export target, not a checkpoint bertconv reads"):
        formats.read(out)


def _directory(path):
    path.mkdir()
    return path


def _options():
    from bertconv.conversion import WriteOptions

    return WriteOptions()


def test_targets_are_the_formats_that_write_and_convert_offers_them_all(monkeypatch):
    assert set(formats.TARGETS) == {fmt.target for fmt in formats.FORMATS if fmt.output is not None}
    monkeypatch.setenv("COLUMNS", "200")  # argparse wraps help to the terminal's width
    help_text = run_in_process("convert", "--help").stdout
    assert f"--to {{{','.join(sorted(formats.TARGETS))}}}" in help_text  # the choices argparse accepts
    for target, fmt in formats.TARGETS.items():
        assert f"{target} (a {fmt.output.value})" in help_text


@pytest.mark.parametrize("fmt", READ_FORMATS)
def test_every_registered_format_has_fixtures_that_read_with_its_reader(fmt):
    """Each fixture resolves to its entry's format and reads; and, since it is read here anyway,
    holds no entry nobody names: optimizer slots, steps, buffers, task heads and the other model
    of an ELECTRA pre-training checkpoint are named by the formats' skips."""
    paths = fixture_paths(fmt, FIXTURES)
    assert paths, f"no fixture matches {FIXTURES_OF.get(fmt.target)}"
    names_read = set()
    for path in paths:
        found, exact = formats.resolve(path)
        assert found is fmt, f"{path} resolves to {found.target}, its entry says {fmt.target}"
        tree = found.read(exact)  # what `formats.read(path)` reads, without resolving again
        names_read.add(tree.format)
        assert not [i.name for i in tree.ignored if i.unread], path
    assert names_read == set(fmt.names), "every reader name the entry declares comes out of a fixture"


@pytest.mark.parametrize("fmt", READ_FORMATS)
def test_every_fuzz_fixture_reads_whole_as_its_format(fmt):
    for fixture in FUZZ_OF.get(fmt.target, ()):
        path = FIXTURES / fixture
        assert path.is_file() and formats.resolve(path)[0] is fmt
        assert check_case(path, fixture) == "ok"


@pytest.mark.parametrize("fmt,path", FIXTURE_CASES)
def test_the_most_specific_claim_on_every_fixture_is_its_own_formats_alone(fmt, path):
    """What makes `resolve` independent of registry order: of the formats whose sniffer (or, for
    a directory, `candidates`) claims a fixture, exactly one is the most specific, its own."""
    _, exact = formats.resolve(path)
    if path.is_dir():
        claims = [f for f in formats.FORMATS if exact in f.candidates(path)]
    else:
        claims = [f for f in formats.FORMATS if f.sniff(exact)]
    top = max(f.specificity for f in claims)
    assert [f for f in claims if f.specificity == top] == [fmt]


def test_sniffers_are_tried_most_specific_first():
    order = [fmt.specificity for fmt in SNIFF_ORDER]
    assert order == sorted(order, reverse=True) and set(SNIFF_ORDER) == set(formats.FORMATS)


def test_what_resolve_says_it_expected_is_every_registered_format(tmp_path):
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    for path in (tmp_path, tmp_path / "notes.txt"):
        with pytest.raises(BadInput) as error:
            formats.resolve(path)
        for fmt in formats.FORMATS:
            assert fmt.description in str(error.value)


def test_a_format_added_after_a_broader_sniffer_of_its_container_still_wins(monkeypatch):
    """A Keras-based format listed after bert4keras (which claims every Keras HDF5) gets its
    files: resolve goes by specificity, not by the entries' order."""
    h5 = FIXTURES / "bert4keras" / "v50-mlm" / "bert4keras_model.h5"
    narrower = SimpleNamespace(sniff=lambda path: "keras-narrower" if path == h5 else None,
                               candidates=lambda directory: [], read=None)
    added = dataclasses.replace(formats.FORMATS[0], target="narrower", module=narrower, names=("keras-narrower",),
                                specificity=Specificity.CONTENT, output=None)
    monkeypatch.setattr(formats, "SNIFF_ORDER", by_specificity((*formats.FORMATS, added)))
    assert formats.resolve(h5)[0] is added
    other = FIXTURES / "bert4keras" / "v50-pool" / "bert4keras_model.h5"
    assert formats.resolve(other)[0].target == "bert4keras"
