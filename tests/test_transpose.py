"""The transpose (bertconv/transposes.py): bit for bit numpy's `.T`, whatever the shape, dtype or
strides of its input, by OpenBLAS' somatcopy or by tiles, on one thread or split between two;
somatcopy's two ways of changing bits (a signalling NaN made quiet, denormals flushed by the
thread) never reach the output."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest

from bertconv import transposes
from bertconv.transposes import TRANSPOSE_TILE_COLUMNS, TRANSPOSE_TILE_ROWS, transpose

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


def numpy_carries_openblas() -> bool:
    """Whether this NumPy was built with the OpenBLAS its wheels carry (`scipy-openblas`)."""
    blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    return str(blas.get("name", "")).startswith("scipy-openblas")


@pytest.fixture(params=["openblas", "tiles"])
def way(request, monkeypatch):
    """Run the test with OpenBLAS' somatcopy where NumPy carries it, then with tiles alone."""
    if request.param == "tiles":
        monkeypatch.setattr(transposes, "_somatcopy", lambda: None)
    elif not numpy_carries_openblas():
        pytest.skip("this NumPy carries no OpenBLAS: every transpose goes by tiles")
    return request.param


@pytest.fixture(params=["one thread", "two threads"])
def threads(request, monkeypatch, way):
    """Run the test with the one-thread path, then with every transpose split in two (each way)."""
    if request.param == "two threads":
        monkeypatch.setattr(transposes, "TRANSPOSE_TWO_THREADS_BYTES", 0)
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
    monkeypatch.setattr(transposes, "TRANSPOSE_TWO_THREADS_BYTES", 1 << 16)
    copied = []  # (thread name, first output row, end)
    original = transposes._transpose_columns

    def recording(array, out, first, end):
        copied.append((threading.current_thread().name, first, end))
        original(array, out, first, end)

    monkeypatch.setattr(transposes, "_transpose_columns", recording)
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
    monkeypatch.setattr(transposes, "TRANSPOSE_TWO_THREADS_BYTES", 0)
    original = transposes._transpose_columns

    def failing_second_half(array, out, first, end):
        if first > 0:
            raise MemoryError("helper half failed")
        original(array, out, first, end)

    monkeypatch.setattr(transposes, "_transpose_columns", failing_second_half)
    with pytest.raises(MemoryError, match="helper half failed"):
        transpose(values((4, 10), np.float32))


#: float32 bit patterns somatcopy's `1.0 * a` could change: signalling NaNs (each sign, payloads
#: low and high), quiet NaNs with payloads, denormals (smallest and largest), zeros and infinities.
SPECIAL_BITS = [0x7F800001, 0xFF800001, 0x7FBFFFFF, 0x7FA00000, 0x7FC00001, 0xFFC12345, 0x00000001, 0x80000001,
                0x007FFFFF, 0x807FFFFF, 0x00000000, 0x80000000, 0x7F800000, 0xFF800000]


def with_special_values(shape: tuple[int, int], at: list[tuple[int, int]]) -> np.ndarray:
    array = values(shape, np.uint32)
    for (row, column), bits in zip(at, SPECIAL_BITS * len(at)):
        array[row, column] = bits
    return array.view(np.float32)


@pytest.mark.parametrize("shape", [(3, 5), (64, 301), (301, 64)], ids=lambda s: "x".join(map(str, s)))
def test_every_float32_bit_pattern_is_kept(shape, threads):
    """Random bits (NaNs of every payload among them) with the patterns somatcopy's arithmetic
    would change put in every corner and the middle: the output is numpy's `.T`, bit for bit."""
    rows, columns = shape
    corners = [(0, 0), (0, columns - 1), (rows - 1, 0), (rows - 1, columns - 1), (rows // 2, columns // 2)]
    array = with_special_values(shape, corners + [(r % rows, (7 * r) % columns) for r in range(20)])
    assert same_bits(transpose(array), np.ascontiguousarray(array.T))


def calls_to_openblas(monkeypatch) -> list[tuple[int, int]]:
    """Record each (rows, columns) somatcopy is asked to copy, the denormal probe left out."""
    real = transposes._somatcopy()
    calls = []

    def recording(order, trans, rows, columns, *rest):
        if (rows, columns) != (1, 2):
            calls.append((rows, columns))
        real(order, trans, rows, columns, *rest)

    monkeypatch.setattr(transposes, "_somatcopy", lambda: recording)
    return calls


def test_openblas_is_found_and_copies_float32_matrices(monkeypatch):
    """Where NumPy carries OpenBLAS, a float32 matrix with contiguous rows goes through somatcopy;
    other dtypes, and rows that are not contiguous, go by tiles."""
    if not numpy_carries_openblas():
        pytest.skip("this NumPy carries no OpenBLAS: every transpose goes by tiles")
    assert transposes._somatcopy() is not None, "NumPy was built with scipy-openblas, but its somatcopy was not found"
    calls = calls_to_openblas(monkeypatch)
    matrix = values((40, 70), np.float32)
    assert same_bits(transpose(matrix), np.ascontiguousarray(matrix.T))
    assert calls == [(40, 70)]
    calls.clear()
    for other in (values((40, 70), np.float16), matrix[:, ::2], matrix[::-1], np.asfortranarray(matrix)):
        assert same_bits(transpose(other), np.ascontiguousarray(other.T))
    assert calls == []


def test_a_signalling_nan_is_copied_again_by_tiles(monkeypatch):
    """somatcopy makes a signalling NaN quiet: the half it copied holds a NaN, and is copied again
    by tiles, exactly; the other half, NaN-free, keeps somatcopy's copy."""
    if not numpy_carries_openblas():
        pytest.skip("this NumPy carries no OpenBLAS: every transpose goes by tiles")
    monkeypatch.setattr(transposes, "TRANSPOSE_TWO_THREADS_BYTES", 0)
    calls = calls_to_openblas(monkeypatch)
    tiled = []
    real_tiles = transposes._tiles
    monkeypatch.setattr(transposes, "_tiles", lambda a, out, first, end: (tiled.append((first, end)),
                                                                          real_tiles(a, out, first, end)))
    array = values((16, 10), np.uint32) & 0xBFFFFFFF  # no NaN: the exponent's top bit cleared
    array[3, 7] = 0x7F800001  # a signalling NaN, in the second half of the columns
    array = array.view(np.float32)
    assert same_bits(transpose(array), np.ascontiguousarray(array.T))
    assert sorted(calls) == [(16, 5), (16, 5)] and tiled == [(5, 10)]


def test_a_thread_that_flushes_denormals_gets_tiles(monkeypatch):
    """On a thread whose floating-point unit flushes denormals to zero (here a somatcopy that
    does so), the probe finds it before any copy, and tiles copy the matrix exactly."""
    if not numpy_carries_openblas():
        pytest.skip("this NumPy carries no OpenBLAS: every transpose goes by tiles")
    real = transposes._somatcopy()
    copied = []

    def flushing(order, trans, rows, columns, alpha, source, lda, target, ldb):
        real(order, trans, rows, columns, alpha, source, lda, target, ldb)
        out = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint32 * (columns * ldb)).from_address(target))
        out[(out & 0x7F800000) == 0] &= 0x80000000  # every denormal made a signed zero
        copied.append((rows, columns))

    monkeypatch.setattr(transposes, "_somatcopy", lambda: flushing)
    array = with_special_values((20, 30), [(1, 2), (5, 6), (7, 8), (9, 10), (11, 12), (13, 14), (15, 16), (17, 18)])
    assert same_bits(transpose(array), np.ascontiguousarray(array.T))
    assert copied == [(1, 2)], "only the probe may go through a flushing somatcopy"


def unaligned(shape: tuple[int, int]) -> np.ndarray:
    """A writable float32 array of `shape` whose values start one byte past an aligned address
    (as a msgpack stream's values may)."""
    buffer = np.zeros(int(np.prod(shape)) * 4 + 1, np.uint8)
    array = np.ndarray(shape, np.float32, buffer=buffer, offset=1)
    assert not array.flags.aligned
    return array


@pytest.mark.parametrize("operand", ["output", "input", "both"])
@pytest.mark.parametrize("shape", [(3, 5), (64, 301), (301, 64)], ids=lambda s: "x".join(map(str, s)))
def test_an_unaligned_operand_goes_through_an_aligned_scratch(operand, shape, monkeypatch, threads):
    """A transpose from or into values at an odd byte is numpy's `.T` bit for bit, special values
    included, with somatcopy (where it is used) only ever given aligned addresses, a strip at a time."""
    monkeypatch.setattr(transposes, "UNALIGNED_STRIP_BYTES", 4 * 64 * 7)  # several strips of each shape
    rows, columns = shape
    expected_input = with_special_values(shape, [(0, 0), (rows - 1, columns - 1), (rows // 2, columns // 3)])
    array = expected_input
    if operand in ("input", "both"):
        array = unaligned(shape)
        array[...] = expected_input
    out = unaligned((columns, rows)) if operand in ("output", "both") else np.zeros((columns, rows), np.float32)
    if way_uses_openblas := transposes._somatcopy() is not None:
        real = transposes._somatcopy()
        addresses = []

        def recording(order, trans, r, c, alpha, source, lda, target, ldb):
            addresses.extend((source, target))
            real(order, trans, r, c, alpha, source, lda, target, ldb)

        monkeypatch.setattr(transposes, "_somatcopy", lambda: recording)
    transposes.transpose_into(array, out)
    assert same_bits(np.ascontiguousarray(out), np.ascontiguousarray(expected_input.T))
    if way_uses_openblas:
        assert addresses and all(address % 4 == 0 for address in addresses)


def test_an_unaligned_output_without_nans_is_copied_by_openblas_alone(monkeypatch):
    if not numpy_carries_openblas():
        pytest.skip("this NumPy carries no OpenBLAS: every transpose goes by tiles")
    monkeypatch.setattr(transposes, "UNALIGNED_STRIP_BYTES", 4 * 768 * 100)
    calls = calls_to_openblas(monkeypatch)
    monkeypatch.setattr(transposes, "_tiles", lambda *_: pytest.fail("copied by tiles"))
    array = (values((768, 300), np.uint32) & 0xBFFFFFFF).view(np.float32)  # no NaN
    out = unaligned((300, 768))
    transposes.transpose_into(array, out)
    assert same_bits(np.ascontiguousarray(out), np.ascontiguousarray(array.T))
    assert calls == [(768, 100), (768, 100), (768, 100)]


def needs_openblas() -> None:
    if not numpy_carries_openblas():
        pytest.skip("this NumPy carries no OpenBLAS: every transpose goes by tiles")


@pytest.mark.parametrize("bits", [0x7FC00000, 0x7F800001, 0xFFC00000, 0xFF800001, 0x7FFFFFFF],
                         ids=["quiet", "signalling", "-quiet", "-signalling", "payload"])
def test_a_nan_is_found_wherever_it_lies(bits):
    """The NaN check after somatcopy (`cblas_sdot` of the copy with itself): every NaN, at every
    position of every length up to a few of OpenBLAS' unrolled blocks and their tails, among
    values whose squares overflow to +inf."""
    needs_openblas()
    for length in range(1, 100):
        for position in range(length):
            copy = np.full(length, 3e38, np.float32)
            copy.view(np.uint32)[position] = bits
            assert transposes._holds_nan(copy.ctypes.data, length), (length, position)
    assert not transposes._holds_nan(np.full(99, -np.inf, np.float32).ctypes.data, 99)


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (64, 301), (301, 64)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("split", [False, True], ids=["one thread", "two threads"])
def test_transpose_at_copies_between_addresses_bit_for_bit(shape, split):
    """`transpose_at`, given bare addresses (a map's and a staging block's), copies numpy's `.T`
    bit for bit, denormals and infinities included, a part of the source's columns too; a NaN in
    the copy (a signalling one would have come out quiet), an address at an odd byte, or rows
    shorter than the columns asked for, say False, for the caller to copy another way."""
    needs_openblas()
    rows, columns = shape
    array = values(shape, np.uint32) & 0xBFFFFFFF  # no NaN: the exponent's top bit cleared
    places = [(0, 0), (rows - 1, columns - 1), (rows // 2, 0), (0, columns // 2), (rows - 1, 0), (0, columns - 1)]
    for (row, column), bits in zip(places, [0x00000001, 0x807FFFFF, 0x7F800000, 0xFF800000, 0x80000000, 0x00400000]):
        array[row, column] = bits  # denormals, infinities, a negative zero
    array = array.view(np.float32)
    threshold = 0 if split else 1 << 40
    out = np.zeros((columns, rows), np.float32)
    assert transposes.transpose_at(array.ctypes.data, rows, columns, columns, out.ctypes.data, two_threads_from=threshold)
    assert same_bits(out, np.ascontiguousarray(array.T))
    if columns > 1:
        part = np.zeros((columns - 1, rows), np.float32)
        assert transposes.transpose_at(array.ctypes.data + 4, rows, columns - 1, columns, part.ctypes.data,
                                       two_threads_from=threshold)
        assert same_bits(part, np.ascontiguousarray(array[:, 1:].T))
    with_nan = array.copy()
    with_nan.view(np.uint32)[rows // 2, columns // 2] = 0x7F800001
    assert not transposes.transpose_at(with_nan.ctypes.data, rows, columns, columns, out.ctypes.data,
                                       two_threads_from=threshold)
    odd = np.zeros(rows * columns * 4 + 4, np.uint8)
    assert not transposes.transpose_at(array.ctypes.data, rows, columns, columns, odd.ctypes.data + 1)
    assert not transposes.transpose_at(array.ctypes.data, rows, columns + 1, columns, out.ctypes.data)


def test_openblas_is_found_without_importing_numpy():
    """A conversion's transposes find OpenBLAS beside NumPy's package without importing NumPy."""
    needs_openblas()
    code = ("import sys; from bertconv import transposes; "
            "print(transposes.transposes_at_addresses(), 'numpy' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.split() == ["True", "False"]
