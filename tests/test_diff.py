"""`bertconv diff`: canonical-space comparison across formats, bit-exact or within a tolerance."""

from __future__ import annotations

import json
import shutil
import struct
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertconv import formats
from bertconv.checks import arrays
from bertconv.checks.arrays import chunk_indices, compare_arrays
from bertconv.checks.diff import diff
from bertconv.conversion import convert
from bertconv.dtypes import FLOAT16, FLOAT32
from bertconv.tensor import ArrayTensor
from bertconv.transposes import transpose
from bertconv.tree import ParameterTree

from conftest import FIXTURES, run_in_process

HF = FIXTURES / "hf"
VERIFY = FIXTURES / "verify"
EXIT_OK, EXIT_DIFFERENT = 0, 1
#: The tensor and [out, in] element whose lowest mantissa bit the flipped-bit tests flip; its
#: canonical (kernel, [in, out]) position is the transpose.
FLIPPED_TENSOR = "bert.encoder.layer.1.attention.self.key.weight"
FLIPPED_CANONICAL = "layers.1.attention.key.kernel"
FLIPPED_AT = (4, 9)
#: A tolerance far above one float32 ulp of values near 1 (1.2e-7), far below the values.
SMALL_ATOL = "1e-6"


def with_array(tree: ParameterTree, name: str, array: np.ndarray, dtype=FLOAT32) -> ParameterTree:
    """A copy of `tree` whose parameter `name` holds `array`."""
    params = dict(tree.params)
    params[name] = replace(params[name], tensor=ArrayTensor(array, dtype))
    return replace(tree, params=params)


def destination(tmp_path: Path, target: str, label: str) -> Path:
    """Where a conversion to `target` is written (a file for bert4keras, else a directory)."""
    writes_directory = formats.TARGETS[target].writes_directory
    return tmp_path / (label if writes_directory else f"{label}.h5")


# --- a conversion and its way back are equal -------------------------------------------------


#: Every target bertconv reads back (an export, onnx, is compared by its outputs: tests/test_onnx.py),
#: but keras-hub, whose code fixes numerics a transformers BERT does not compute with (tanh GELU,
#: a head epsilon of 1e-5): converting into it is refused unless accepted, tests/test_keras_hub.py.
READ_BACK = sorted(target for target, fmt in formats.TARGETS.items()
                   if fmt.check_written is None and target != "keras-hub")


@pytest.mark.parametrize("target", READ_BACK)
@pytest.mark.parametrize("fixture", ["pretraining", "pretraining_bin", "bert_model", "bf16"])
def test_conversion_through_every_target_and_back_is_equal(fixture, target, tmp_path):
    source = formats.read(HF / fixture)
    there = destination(tmp_path, target, "there")
    convert(source, there, target)
    back = tmp_path / "back"
    convert(formats.read(there), back, "hf")
    for other in (there, back):
        report = diff(source, formats.read(other))
        assert report["ok"] and report["problems"] == [], report["problems"]
        assert report["only_in_a"] == report["only_in_b"] == []


def test_cli_diff_of_a_conversion_is_empty_and_exits_zero(tmp_path):
    out = tmp_path / "tf"
    assert run_in_process("convert", HF / "pretraining", out, "--to", "tf").exit_code == EXIT_OK
    result = run_in_process("diff", HF / "pretraining", out, "--json")
    assert result.exit_code == EXIT_OK, result.stderr
    report = json.loads(result.stdout)
    assert report["identical"] and report["problems"] == []
    assert {t["name"] for t in report["tensors"]} >= {"embeddings.word", "mlm.output_bias", "nsp.kernel"}


def test_a_tied_copy_stored_on_one_side_only_is_not_a_difference():
    report = diff(formats.read(VERIFY / "complete_tied"), formats.read(VERIFY / "decoder_copy_equal"))
    assert report["identical"] and report["only_in_b"] == []
    decoder = next(t for t in report["tensors"] if t["name"] == "mlm.decoder")
    assert decoder["a"].startswith("not stored") and decoder["b"] == "cls.predictions.decoder.weight"


def test_a_stored_decoder_that_differs_from_the_other_sides_table_is_named():
    result = run_in_process("diff", VERIFY / "complete_tied", VERIFY / "decoder_differs")
    assert result.exit_code == EXIT_DIFFERENT
    line = next(line for line in result.stdout.splitlines() if "mlm.decoder " in line)
    assert "cls.predictions.decoder.weight" in line and "[17, 5]" in line


def test_untied_decoder_bias_survives_conversion(tmp_path):
    source = formats.read(VERIFY / "untied")
    convert(source, tmp_path / "out", "hf")
    assert diff(source, formats.read(tmp_path / "out"))["ok"]


# --- a single flipped bit ----------------------------------------------------------------------


def flip_lowest_bit(directory: Path, tensor: str, at: tuple[int, int]) -> None:
    """Flip the lowest mantissa bit of one float32 element of `tensor` in model.safetensors."""
    path = directory / "model.safetensors"
    raw = bytearray(path.read_bytes())
    (header_length,) = struct.unpack("<Q", raw[:8])
    entry = json.loads(raw[8:8 + header_length])[tensor]
    assert entry["dtype"] == "F32"
    columns = entry["shape"][1]
    offset = 8 + header_length + entry["data_offsets"][0] + 4 * (at[0] * columns + at[1])
    raw[offset] ^= 0x01  # little-endian: the first byte holds the lowest mantissa bits
    path.write_bytes(bytes(raw))


@pytest.fixture
def flipped(tmp_path) -> Path:
    copy = tmp_path / "flipped"
    shutil.copytree(HF / "masked_lm", copy)
    flip_lowest_bit(copy, FLIPPED_TENSOR, FLIPPED_AT)
    return copy


def test_a_flipped_bit_is_found_and_named(flipped):
    result = run_in_process("diff", HF / "masked_lm", flipped, "--json")
    assert result.exit_code == EXIT_DIFFERENT
    report = json.loads(result.stdout)
    assert not report["identical"] and len(report["problems"]) == 1
    entry = next(t for t in report["tensors"] if not t["bit_equal"])
    assert entry["name"] == FLIPPED_CANONICAL and entry["a"] == FLIPPED_TENSOR
    assert entry["first_difference"]["index"] == list(reversed(FLIPPED_AT))
    assert 0 < entry["max_abs_diff"] < 1e-6
    human = run_in_process("diff", HF / "masked_lm", flipped)
    assert human.exit_code == EXIT_DIFFERENT
    assert FLIPPED_CANONICAL in human.stdout and FLIPPED_TENSOR in human.stdout and "[9, 4]" in human.stdout
    assert "DIFFERENT (1 difference(s))" in human.stdout and "Traceback" not in human.stderr, human.stderr


def test_atol_lets_small_differences_pass(flipped):
    result = run_in_process("diff", HF / "masked_lm", flipped, "--atol", SMALL_ATOL, "--json")
    assert result.exit_code == EXIT_OK, result.stdout
    report = json.loads(result.stdout)
    assert report["ok"] and not report["identical"]
    assert run_in_process("diff", HF / "masked_lm", flipped, "--atol", "1e-12").exit_code == EXIT_DIFFERENT


def test_dtype_difference_is_reported_and_values_still_compared():
    result = run_in_process("diff", HF / "pretraining", HF / "fp16", "--json")
    assert result.exit_code == EXIT_DIFFERENT
    report = json.loads(result.stdout)
    assert {d["a"] for d in report["dtype_differences"]} == {"float32"}
    assert {d["b"] for d in report["dtype_differences"]} == {"float16"}
    assert all(0 < t["max_abs_diff"] < 1e-3 for t in report["tensors"])
    assert run_in_process("diff", HF / "pretraining", HF / "fp16", "--atol", "1e-3").exit_code == EXIT_OK


# --- what counts as a difference ---------------------------------------------------------------


@pytest.fixture(scope="module")
def base() -> ParameterTree:
    return formats.read(HF / "masked_lm")


def test_negative_zero_differs_bit_exact_only(base):
    zeros = np.zeros(32, np.float32)
    a = with_array(base, "mlm.transform.bias", zeros)
    b = with_array(base, "mlm.transform.bias", -zeros)
    exact = diff(a, b)
    assert not exact["ok"]
    entry = next(t for t in exact["tensors"] if t["name"] == "mlm.transform.bias")
    assert entry["max_abs_diff"] == 0.0 and entry["first_difference"]["index"] == [0]
    assert diff(a, b, atol=1e-12)["ok"]


def test_nan_payloads_and_nan_against_a_number(base):
    quiet, payload = np.array([0x7FC00000, 0x7FC00001], np.uint32).view(np.float32)
    values = base["mlm.transform.bias"].tensor.read().copy()
    a = with_array(base, "mlm.transform.bias", np.where(np.arange(32) == 3, quiet, values).astype(np.float32))
    b = with_array(base, "mlm.transform.bias", np.where(np.arange(32) == 3, payload, values).astype(np.float32))
    assert not diff(a, b)["ok"] and diff(a, b, atol=1e-6)["ok"]
    number = with_array(base, "mlm.transform.bias", values)
    report = diff(a, number, atol=1e-6)
    entry = next(t for t in report["tensors"] if t["name"] == "mlm.transform.bias")
    assert not report["ok"] and entry["max_abs_diff"] == "inf" and entry["max_at"] == [3]
    json.dumps(report, allow_nan=False)  # strict JSON: non-finite numbers are strings


def test_shape_and_presence_differences(base):
    other = with_array(base, "mlm.output_bias", np.zeros(98, np.float32))
    report = diff(base, other)
    assert report["shape_differences"] == [{"name": "mlm.output_bias", "a": [99], "b": [98]}]
    encoder = formats.read(HF / "bert_model")
    report = diff(formats.read(HF / "pretraining"), encoder)
    assert {o["name"] for o in report["only_in_a"]} == {
        "mlm.transform.kernel", "mlm.transform.bias", "mlm.norm.gamma", "mlm.norm.beta", "mlm.output_bias",
        "nsp.kernel", "nsp.bias"}
    assert not report["ok"]


def test_float16_against_float32_compares_widened_values(base):
    values = base["mlm.transform.bias"].tensor.read()
    report = diff(base, with_array(base, "mlm.transform.bias", values.astype(np.float16), FLOAT16))
    assert report["dtype_differences"] == [{"name": "mlm.transform.bias", "a": "float32", "b": "float16"}]
    assert not report["ok"] and diff(base, with_array(base, "mlm.transform.bias", values.astype(np.float16),
                                                       FLOAT16), atol=1e-3)["ok"]


# --- streaming ---------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 9), columns=st.integers(1, 9), chunk=st.integers(1, 20),
       transposed=st.booleans(), seed=st.integers(0, 2**16), differences=st.integers(0, 4))
def test_chunked_comparison_matches_whole_array_arithmetic(rows, columns, chunk, transposed, seed, differences):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((rows, columns)).astype(np.float32)
    a = np.ascontiguousarray(a.T).T if transposed else a  # a transposed view, as HF kernels are read
    b = a.copy()
    for _ in range(differences):
        b[rng.integers(rows), rng.integers(columns)] += np.float32(rng.standard_normal())
    covered = np.zeros(a.shape, int)
    for index in chunk_indices(a, chunk):
        covered[index] += 1
        assert covered[index].size <= max(chunk, max(a.shape))
    assert (covered == 1).all()
    original = arrays.CHUNK_ELEMENTS
    arrays.CHUNK_ELEMENTS = chunk
    try:
        result = compare_arrays(a, FLOAT32, b, FLOAT32)
    finally:
        arrays.CHUNK_ELEMENTS = original
    differing = np.argwhere(a.view(np.uint32) != b.view(np.uint32))
    assert result.bit_equal is (len(differing) == 0)
    if len(differing):
        assert result.first_difference == tuple(differing[0])
        assert result.max_abs_diff == float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


def _layout(array: np.ndarray, layout: str) -> np.ndarray:
    """`array`'s values in a stored layout: row-major, the transposed view of a row-major copy of
    its transpose (a Hugging Face kernel read as canonical), or a column block of a wider array."""
    if layout == "transposed":
        return np.ascontiguousarray(array.T).T
    if layout == "column block":
        wider = np.zeros((array.shape[0], array.shape[1] + 3), array.dtype)
        wider[:, 1:-2] = array
        return wider[:, 1:-2]
    return array.copy()


@settings(max_examples=80, deadline=None)
@given(rows=st.integers(1, 9), columns=st.integers(1, 9), seed=st.integers(0, 2**16),
       layout_a=st.sampled_from(["row-major", "transposed", "column block"]),
       layout_b=st.sampled_from(["row-major", "transposed", "column block"]),
       change=st.sampled_from([None, "bit", "negative zero", "nan payload"]))
def test_same_bits_agrees_with_comparing_every_bit(rows, columns, seed, layout_a, layout_b, change):
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((rows, columns)).astype(np.float32)
    values[0, 0] = 0.0
    values[-1, -1] = np.float32("nan")
    other = values.copy()
    at = (rng.integers(rows), rng.integers(columns))
    if change == "bit":
        other.view(np.uint32)[at] ^= 1
    elif change == "negative zero":
        other[0, 0] = -0.0
    elif change == "nan payload":
        other.view(np.uint32)[-1, -1] ^= 1
    expected = bool(np.array_equal(values.view(np.uint32), other.view(np.uint32)))
    assert arrays.same_bits(_layout(values, layout_a), _layout(other, layout_b)) is expected


def test_a_transposed_view_is_compared_with_one_copy_per_chunk():
    """A Hugging Face kernel (a transposed view) against a TF one: each chunk of one side is
    copied, the other side's chunk is read where it lies."""
    import tracemalloc

    rows, columns = 1024, 2048  # two chunks of 2**20 values (4 MiB): [1024, 1024] column blocks of the TF kernel
    kernel = np.random.default_rng(0).standard_normal((rows, columns)).astype(np.float32)
    chunk_bytes = arrays.CHUNK_ELEMENTS * kernel.itemsize
    hf_view, tf_kernel = np.ascontiguousarray(kernel.T).T, kernel
    tracemalloc.start()
    try:
        assert compare_arrays(hf_view, FLOAT32, tf_kernel, FLOAT32).bit_equal
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1.5 * chunk_bytes, f"peak {peak} bytes: more than one copy of a {chunk_bytes}-byte chunk"


def test_hf_against_tf_compares_stored_layouts_without_whole_transposes(flipped, tmp_path, monkeypatch):
    tf = tmp_path / "tf"
    convert(formats.read(HF / "masked_lm"), tf, "tf")  # TF stores kernels [in, out], HF [out, in]

    chunk = 40  # many chunks of [32, 1] (a kernel is [32, 32]): rows of one side, columns of the other
    chunk_transpose = transpose

    def chunk_only_transpose(array):
        assert array.size <= chunk, f"diff made a whole transpose of a {list(array.shape)} tensor"
        return chunk_transpose(array)

    monkeypatch.setattr("bertconv.transposes.transpose", chunk_only_transpose)
    monkeypatch.setattr(arrays, "CHUNK_ELEMENTS", chunk)
    hf_tree, tf_tree = formats.read(flipped), formats.read(tf)
    canonical = tuple(reversed(FLIPPED_AT))
    for a, b in ((hf_tree, tf_tree), (tf_tree, hf_tree), (hf_tree, formats.read(HF / "masked_lm"))):
        report = diff(a, b)
        differing = [t for t in report["tensors"] if not t["bit_equal"]]
        assert [t["name"] for t in differing] == [FLIPPED_CANONICAL]
        assert differing[0]["first_difference"]["index"] == list(canonical)
        assert differing[0]["max_at"] == list(canonical) and 0 < differing[0]["max_abs_diff"] < 1e-6


@pytest.mark.parametrize("other", ["pretraining", "bert_model"])
def test_progress_callback_receives_every_tensors_bytes(other):
    tree_a, tree_b = formats.read(HF / "pretraining"), formats.read(HF / other)
    advances = []
    diff(tree_a, tree_b, on_tensor=advances.append)
    assert len(advances) == len(set(tree_a.params) | set(tree_b.params))
    assert sum(advances) == sum(p.tensor.nbytes for p in tree_a) + sum(p.tensor.nbytes for p in tree_b)


def test_abs_difference_of_every_pair_of_special_values():
    values = np.array([0.0, -0.0, 1.0, 3.5, np.inf, -np.inf, np.nan], np.float32)
    a, b = np.meshgrid(values, values)
    expected = [0.0 if x == y or (np.isnan(x) and np.isnan(y)) else np.inf if np.isnan(x) or np.isnan(y)
                else abs(float(x) - float(y)) for x, y in zip(a.ravel(), b.ravel())]
    assert arrays._abs_difference(a, b).ravel().tolist() == expected
