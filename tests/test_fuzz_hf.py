"""Fuzzing the Hugging Face readers: safetensors headers and torch zip/pickle files."""

from __future__ import annotations

import json
import struct
from collections import Counter
from pathlib import Path

import pytest

from conftest import FIXTURES
from fuzzing import BYTE_KINDS, BYTE_SCHEDULE, check_case, mutations, run_mutants, share_of_cases

HF = FIXTURES / "hf"
#: Cases per reader as shares of CASES (100 by default, `make fuzz`: 20000), never fewer than
#: three rounds of the byte kinds; a case costs about 8 ms (safetensors), 30 ms (torch zip) and
#: 60 ms (legacy torch pickle) with tracemalloc on.
SHARES = {"safetensors": 1.0, "torch zip": 1.0, "legacy torch": 1.0}
#: What the unit suite's short run takes of each.
SHORT = {"safetensors": 30, "torch zip": 15, "legacy torch": 15}

pytestmark = pytest.mark.fuzz  # `make fuzz` selects these with -m fuzz (and BERTCONV_FUZZ_CASES=20000)


def _fuzz(tmp_path: Path, source: Path, name: str, boundaries: list[int], seed: int, cases: int) -> Counter:
    target = tmp_path / name

    def case(mutant) -> str:
        target.write_bytes(mutant.data)
        return check_case(target, f"{source.name} {mutant.label}")

    return run_mutants(mutations(source.read_bytes(), seed, cases, boundaries), BYTE_KINDS, case)


def _cases(reader: str) -> int:
    return share_of_cases(SHARES[reader], at_least=3 * len(BYTE_SCHEDULE), short=SHORT[reader])


def test_safetensors_reader_survives_mutations(tmp_path):
    source = HF / "pretraining" / "model.safetensors"
    data = source.read_bytes()
    (header_length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_length])
    boundaries = [0, 4, 8, 8 + header_length] + [8 + header_length + v["data_offsets"][0]
                                                 for k, v in header.items() if k != "__metadata__"]
    # Concentrate mutations on the header, where the structure is.
    cases = _cases("safetensors")
    outcomes = _fuzz(tmp_path, source, "model.safetensors", boundaries, seed=1, cases=cases)
    assert outcomes["refused"] > 0 and sum(outcomes.values()) == cases


def test_torch_zip_reader_survives_mutations(tmp_path):
    cases = _cases("torch zip")
    outcomes = _fuzz(tmp_path, HF / "pretraining_bin" / "pytorch_model.bin", "pytorch_model.bin", [0, 4, 30], seed=2,
                     cases=cases)
    assert outcomes["refused"] > 0 and sum(outcomes.values()) == cases


def test_legacy_torch_reader_survives_mutations(tmp_path):
    cases = _cases("legacy torch")
    outcomes = _fuzz(tmp_path, HF / "legacy_bin" / "pytorch_model.bin", "pytorch_model.bin", [0, 2, 11], seed=3,
                     cases=cases)
    assert outcomes["refused"] > 0 and sum(outcomes.values()) == cases


def _header_mutant(tmp_path: Path, edit) -> Path:
    data = (HF / "pretraining" / "model.safetensors").read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    edit(header)
    text = json.dumps(header).encode()
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + data[8 + length:])
    return path


NAME = "bert.embeddings.word_embeddings.weight"


@pytest.mark.parametrize("label,edit", [
    ("absurd shape", lambda h: h[NAME].update(shape=[2**40, 2**40])),
    ("negative dim", lambda h: h[NAME].update(shape=[-99, 32])),
    ("offsets past end", lambda h: h[NAME].update(data_offsets=[0, 2**62])),
    ("wrong dtype", lambda h: h[NAME].update(dtype="Q7")),
    ("dtype size mismatch", lambda h: h[NAME].update(dtype="F16")),
    ("not an object", lambda h: h.update({NAME: 3})),
    ("float dims", lambda h: h[NAME].update(shape=[99.0, 32])),
])
def test_structured_safetensors_header_damage_is_refused_with_the_tensor_named(tmp_path, label, edit):
    path = _header_mutant(tmp_path, edit)
    assert check_case(path, label) == "refused"
    from bertconv import formats
    from bertconv.errors import BadInput
    with pytest.raises(BadInput) as error:
        formats.read(path)
    assert str(path) in str(error.value)
    assert NAME in str(error.value) or "data" in str(error.value)


def test_duplicate_names_in_a_safetensors_header_are_refused(tmp_path):
    data = (HF / "pretraining" / "model.safetensors").read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    text = data[8:8 + length].decode().rstrip()
    entry = text[text.index('"bert.embeddings.LayerNorm.bias"'):].split("},", 1)[0] + "}"
    duplicated = text[:-1] + "," + entry + "}"
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(duplicated)) + duplicated.encode() + data[8 + length:])
    assert check_case(path, "duplicate name") == "refused"
