"""`checks.same_bytes`: the bit-equality `diff` shows from two files' bytes, without NumPy.

It may say True only when every bit is equal and what reading checks has passed; False sends the
pair to NumPy's comparison (`checks.arrays`), which then describes it.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import google_crc32c
import numpy as np
import pytest

from bertconv import formats
from bertconv.checks import same_bytes
from bertconv.checks.diff import stand_in
from bertconv.conversion import convert
from bertconv.dtypes import FLOAT16, FLOAT32
from bertconv.errors import BadInput
from bertconv.tensor import ArrayTensor, MappedTensor, TransposedTensor
from bertconv.transposes import transposes_at_addresses

from conftest import FIXTURES, run_in_process

HF = FIXTURES / "hf" / "masked_lm"
#: Every target bertconv reads back, but keras-hub (its conversions are refused unless a loss is
#: accepted: tests/test_keras_hub.py).
READ_BACK = sorted(target for target, fmt in formats.TARGETS.items()
                   if fmt.check_written is None and target != "keras-hub")
#: (BLOCK_BYTES, WINDOW_BYTES): blocks read, or windows mapped (a tensor at least a window long is
#: mapped), smaller than one value, not a multiple of a row, and larger than the tensor.
SIZES = [(4, 8 << 20), (100, 8 << 20), (8 << 20, 4), (8 << 20, 100), (8 << 20, 8 << 20)]
SHAPE = (5, 7)

needs_openblas = pytest.mark.skipif(not transposes_at_addresses(),
                                    reason="this NumPy carries no OpenBLAS: a transposed pair is left to NumPy")


class Checked(MappedTensor):
    """A tensor whose reading checks its bytes' CRC32C, as a TF bundle's: the CRC32Cs a copy hands
    its check are kept in `crcs`."""

    def __init__(self, path: Path, offset: int, dtype, shape):
        super().__init__(path, offset, dtype, shape)
        self.crcs: list[int] = []

    def copy_span(self):
        return None

    def checked_copy_span(self):
        return self.path, self.offset, self.crcs.append


def stored(tmp_path: Path, array: np.ndarray, name: str, *, lead: int = 16) -> tuple[Path, int]:
    """`array`'s bytes written at byte `lead` of a new file."""
    path = tmp_path / name
    path.write_bytes(b"\xa5" * lead + np.ascontiguousarray(array).tobytes() + b"\x5a" * 8)
    return path, lead


def layouts(tmp_path: Path, canonical: np.ndarray, *, lead: int = 16) -> dict[str, MappedTensor | TransposedTensor]:
    """`canonical` [R, C] stored as it is, as a checked copy, and transposed ([C, R], read as its
    transpose), each in its own file."""
    dtype = FLOAT16 if canonical.dtype == np.float16 else FLOAT32
    path, offset = stored(tmp_path, canonical, "as_is", lead=lead)
    checked_path, checked_offset = stored(tmp_path, canonical, "checked", lead=lead)
    transposed_path, transposed_offset = stored(tmp_path, canonical.T, "transposed", lead=lead)
    rows, columns = canonical.shape
    return {"as_is": MappedTensor(path, offset, dtype, (rows, columns)),
            "checked": Checked(checked_path, checked_offset, dtype, (rows, columns)),
            "transposed": TransposedTensor(MappedTensor(transposed_path, transposed_offset, dtype, (columns, rows)))}


def special_values(shape: tuple[int, int], seed: int = 0) -> np.ndarray:
    """Random float32 values with a denormal, both zeros and both infinities among them."""
    values = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    flat = values.reshape(-1)
    flat[:5] = np.array([0x00000001, 0x80000000, 0, 0x7F800000, 0xFF800000], np.uint32).view(np.float32)
    return values


PAIRS = [("as_is", "as_is"), ("as_is", "checked"), ("checked", "transposed"), ("transposed", "as_is"),
         ("transposed", "transposed")]


@needs_openblas
@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("lead", [16, 17])
@pytest.mark.parametrize("a, b", PAIRS)
def test_equal_bits_are_shown_equal_and_the_checked_sides_crc32c_is_its_bytes(tmp_path, monkeypatch, sizes, lead, a, b):
    monkeypatch.setattr(same_bytes, "BLOCK_BYTES", sizes[0])
    monkeypatch.setattr(same_bytes, "WINDOW_BYTES", sizes[1])
    canonical = special_values(SHAPE)
    tensors = layouts(tmp_path, canonical, lead=lead)
    assert same_stored_bits_either_way(tensors[a], tensors[b])
    if "checked" in (a, b):
        assert set(tensors["checked"].crcs) == {google_crc32c.value(canonical.tobytes())}


def same_stored_bits_either_way(a, b) -> bool:
    forward, backward = same_bytes.same_stored_bits(a, b), same_bytes.same_stored_bits(b, a)
    assert forward == backward
    return forward


@needs_openblas
@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("a, b", PAIRS)
def test_one_flipped_bit_anywhere_is_not_shown_equal(tmp_path, monkeypatch, sizes, a, b):
    monkeypatch.setattr(same_bytes, "BLOCK_BYTES", sizes[0])
    monkeypatch.setattr(same_bytes, "WINDOW_BYTES", sizes[1])
    canonical = special_values(SHAPE)
    ours = layouts(tmp_path, canonical)
    for position in range(canonical.size):
        for bit in (0, 31):
            flipped = canonical.copy()
            flipped.reshape(-1).view(np.uint32)[position] ^= np.uint32(1 << bit)
            directory = tmp_path / f"{position}_{bit}"
            directory.mkdir()
            assert not same_stored_bits_either_way(ours[a], layouts(directory, flipped)[b]), (position, bit)


@needs_openblas
def test_a_nan_in_a_kernel_stored_transposed_on_one_side_is_left_to_numpy(tmp_path):
    """OpenBLAS' copy would make a signalling NaN quiet, so it cannot show such bits equal."""
    canonical = special_values(SHAPE)
    canonical.view(np.uint32)[2, 3] = 0x7FA00001  # a signalling NaN
    tensors = layouts(tmp_path, canonical)
    assert not same_stored_bits_either_way(tensors["transposed"], tensors["as_is"])
    assert same_stored_bits_either_way(tensors["as_is"], tensors["checked"])
    assert same_stored_bits_either_way(tensors["transposed"], tensors["transposed"])


def test_what_is_not_stored_verbatim_or_not_alike_is_left_to_numpy(tmp_path):
    canonical = special_values(SHAPE)
    tensors = layouts(tmp_path, canonical)
    (tmp_path / "halves").mkdir()
    halves = layouts(tmp_path / "halves", canonical.astype(np.float16))
    assert not same_stored_bits_either_way(ArrayTensor(canonical, FLOAT32), tensors["as_is"])  # not in a file
    assert not same_stored_bits_either_way(halves["as_is"], tensors["as_is"])  # two dtypes
    assert not same_stored_bits_either_way(halves["transposed"], halves["as_is"])  # a float16 transpose
    assert same_stored_bits_either_way(halves["as_is"], halves["checked"])
    other_shape = MappedTensor(tensors["as_is"].path, tensors["as_is"].offset, FLOAT32, SHAPE[::-1])
    assert not same_stored_bits_either_way(other_shape, tensors["as_is"])


def test_a_failing_check_raises_as_reading_would(tmp_path):
    canonical = special_values(SHAPE)
    tensors = layouts(tmp_path, canonical)

    def corrupt(crc: int) -> None:
        raise BadInput(f"crc32c 0x{crc:08x}")

    tensors["checked"].checked_copy_span = lambda: (tensors["checked"].path, tensors["checked"].offset, corrupt)
    with pytest.raises(BadInput, match="crc32c"):
        same_bytes.same_stored_bits(tensors["as_is"], tensors["checked"])


@pytest.fixture(scope="module")
def conversions(tmp_path_factory) -> dict[str, Path]:
    """The masked-LM fixture converted to every target read back."""
    root = tmp_path_factory.mktemp("conversions")
    written = {}
    for target in READ_BACK:
        written[target] = root / (target if formats.TARGETS[target].writes_directory else f"{target}.h5")
        convert(formats.read(HF), written[target], target)
    return written


@needs_openblas
@pytest.mark.parametrize("target", READ_BACK)
def test_every_tensor_of_a_conversion_is_shown_equal_from_its_bytes(conversions, target):
    """What `diff` of a conversion against its source compares without NumPy: every pair, in
    each target's layouts (a TF bundle's checked bytes, a msgpack stream's odd ones, HDF5's)."""
    source, converted = formats.read(HF), formats.read(conversions[target])
    kinds = set()
    for name in source.params:
        a, b = stand_in(source, name).param.tensor, stand_in(converted, name).param.tensor
        assert same_bytes.same_stored_bits(a, b), name
        kinds.add(isinstance(a, TransposedTensor) == isinstance(b, TransposedTensor))
    assert kinds == {True} if target == "hf" else {True, False}


def test_a_corrupt_tensor_is_bad_input_even_where_its_bytes_equal_the_other_sides(conversions, tmp_path):
    """The same byte flipped in a safetensors file and in a TF bundle: equal bytes, but the
    bundle's CRC32C no longer holds, so diff stops (exit 2) naming the tensor, as reading it would."""
    hf, tf = tmp_path / "hf", tmp_path / "tf"
    shutil.copytree(HF, hf)
    shutil.copytree(conversions["tf"], tf)
    name = "embeddings.word"
    in_tf, in_hf = formats.read(tf)[name], formats.read(hf)[name]
    data_path, data_offset, _ = in_tf.tensor.checked_copy_span()
    flip_byte(tf / Path(data_path).name, data_offset + 100)
    flip_byte(hf / "model.safetensors", safetensors_offset(hf / "model.safetensors", in_hf.source) + 100)
    result = run_in_process("diff", hf, tf)
    assert result.exit_code == 2, result.stdout + result.stderr
    assert in_tf.source in result.stderr and "crc32c" in result.stderr


def flip_byte(path: Path, offset: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0x01
    path.write_bytes(bytes(raw))


def safetensors_offset(path: Path, tensor: str) -> int:
    raw = path.read_bytes()
    (header_length,) = struct.unpack("<Q", raw[:8])
    return 8 + header_length + json.loads(raw[8:8 + header_length])[tensor]["data_offsets"][0]
