"""The tiled transpose (bertconv/tensor.py `transpose`): bit for bit numpy's `.T`, whatever the
shape, dtype or strides of its input, on one thread or split between two."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from bertconv import tensor
from bertconv.tensor import TRANSPOSE_TILE_COLUMNS, TRANSPOSE_TILE_ROWS, transpose

#: Odd sizes on both sides of a tile, single rows and columns, and a tile-and-a-bit each way.
SHAPES = [(1, 1), (1, 37), (37, 1), (2, 3), (17, 33), (TRANSPOSE_TILE_ROWS + 1, TRANSPOSE_TILE_COLUMNS + 3),
          (3 * TRANSPOSE_TILE_ROWS - 1, 2 * TRANSPOSE_TILE_COLUMNS + 1), (1, 2 * TRANSPOSE_TILE_COLUMNS + 5),
          (2 * TRANSPOSE_TILE_COLUMNS + 5, 1)]
#: float16 and the uint16 bits bfloat16 is stored as (see dtypes), among others.
DTYPES = [np.float32, np.float16, np.uint16, np.float64, np.int8]


def values(shape: tuple[int, ...], dtype) -> np.ndarray:
    """Distinct bit patterns everywhere (random bytes), so a misplaced element cannot go unseen."""
    raw = np.random.default_rng(sum(shape)).integers(0, 256, size=int(np.prod(shape)) * np.dtype(dtype).itemsize,
                                                     dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


@pytest.fixture(params=["one thread", "two threads"])
def threads(request, monkeypatch):
    """Run the test with the one-thread path, then with every transpose split in two."""
    if request.param == "two threads":
        monkeypatch.setattr(tensor, "TRANSPOSE_TWO_THREADS_BYTES", 0)
    return request.param


def same_bits(got: np.ndarray, expected: np.ndarray) -> bool:
    return got.dtype == expected.dtype and got.shape == expected.shape and got.tobytes() == expected.tobytes()


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_transpose_is_numpys_transpose_bit_for_bit(shape, dtype, threads):
    array = values(shape, dtype)
    out = transpose(array)
    assert same_bits(out, np.ascontiguousarray(array.T))
    assert out.flags.c_contiguous


@pytest.mark.parametrize("view", ["every other row and third column", "a transposed view", "Fortran order",
                                 "reversed rows"])
def test_transpose_of_a_non_contiguous_input(view, threads):
    base = values((2 * TRANSPOSE_TILE_ROWS + 7, 3 * TRANSPOSE_TILE_COLUMNS + 11), np.float32)
    array = {"every other row and third column": base[::2, ::3], "a transposed view": base.T,
             "Fortran order": np.asfortranarray(base), "reversed rows": base[::-1]}[view]
    assert same_bits(transpose(array), np.ascontiguousarray(array.T))


def test_transpose_of_a_memory_map(tmp_path, threads):
    array = values((TRANSPOSE_TILE_ROWS * 3 + 1, TRANSPOSE_TILE_COLUMNS + 9), np.float32)
    array.tofile(tmp_path / "values.bin")
    mapped = np.memmap(tmp_path / "values.bin", mode="r", dtype=np.float32, shape=array.shape)
    out = transpose(mapped)
    assert type(out) is np.ndarray and same_bits(out, np.ascontiguousarray(array.T))


def test_large_transposes_are_split_between_two_threads(monkeypatch):
    """Above the threshold, half of the output rows are copied by the helper thread, the other
    half by the caller; below it, everything by the caller."""
    monkeypatch.setattr(tensor, "TRANSPOSE_TWO_THREADS_BYTES", 1 << 16)
    copied = []  # (thread name, first output row, end)
    original = tensor._transpose_columns

    def recording(array, out, first, end):
        copied.append((threading.current_thread().name, first, end))
        original(array, out, first, end)

    monkeypatch.setattr(tensor, "_transpose_columns", recording)
    large = values((64, 301), np.float32)  # 77 KB
    assert same_bits(transpose(large), np.ascontiguousarray(large.T))
    caller = threading.current_thread().name
    assert sorted((first, end) for _, first, end in copied) == [(0, 150), (150, 301)]
    assert {name for name, _, _ in copied} == {caller, next(n for n, _, _ in copied if n != caller)}
    assert all(name == caller or name.startswith("bertconv-transpose") for name, _, _ in copied)

    copied.clear()
    small = values((8, 301), np.float32)  # 9.6 KB
    assert same_bits(transpose(small), np.ascontiguousarray(small.T))
    assert copied == [(caller, 0, 301)]


def test_an_error_in_the_helper_half_reaches_the_caller(monkeypatch):
    monkeypatch.setattr(tensor, "TRANSPOSE_TWO_THREADS_BYTES", 0)
    original = tensor._transpose_columns

    def failing_second_half(array, out, first, end):
        if first > 0:
            raise MemoryError("helper half failed")
        original(array, out, first, end)

    monkeypatch.setattr(tensor, "_transpose_columns", failing_second_half)
    with pytest.raises(MemoryError, match="helper half failed"):
        transpose(values((4, 10), np.float32))
