"""A `tf_model.h5` whose two stored copies of an embedding weight differ (issue 25, item 3).

transformers 4.x's TFBertForMaskedLM / TFBertForPreTraining store the five embedding weights
under `bert` and again under `mlm___cls`; its loader assigns the `mlm___cls` copies last, into
the one variable, so the model computes with them. bertconv reads those, says in convert which
copy it used and that the other differed, and verify fails naming both with the remedy; inspect,
which reads headers only, says that it did not compare them. The oracle test loads the tampered
files in transformers 4.57 (TensorFlow).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from bertconv import formats
from bertconv.checks.copies import differing_copies
from bertconv.formats.hf import tf as hf_tf
from bertconv.runtime import NumpyBert

from conftest import FIXTURES, run_in_process
from test_hf_tf_flax import LOGITS_ATOL, run_oracle

TF = FIXTURES / "hf_tf"
#: (case, fixture, embedding row whose copy is changed, the group changed): the MLM head's copy
#: of each kind of embedding weight, and the encoder's (which the framework overwrites anyway).
CASES = [
    ("mlm-word", "masked_lm", 0, hf_tf.MLM),
    ("mlm-position", "masked_lm", 2, hf_tf.MLM),
    ("mlm-norm", "masked_lm", 3, hf_tf.MLM),
    ("pretraining-mlm-word", "pretraining", 0, hf_tf.MLM),
    ("bert-word", "masked_lm", 0, hf_tf.BERT),
]


def tampered(tmp_path: Path, case: str) -> Path:
    """A copy of the fixture with one stored copy of one embedding weight changed."""
    _, fixture, row, group = next(c for c in CASES if c[0] == case)
    directory = tmp_path / case
    shutil.copytree(TF / fixture, directory)
    with h5py.File(directory / "tf_model.h5", "r+") as file:
        model = next(iter(file[hf_tf.BERT].keys()))  # tf_bert_for_masked_lm, tf_bert_for_pre_training
        dataset = file[f"{group}/{model}/{hf_tf.EMBEDDING_ROWS[row].name}"]
        values = dataset[...]
        dataset[...] = values + np.random.default_rng(row).standard_normal(values.shape).astype(values.dtype)
    return directory


def stored(directory: Path, group: str, row: int) -> np.ndarray:
    with h5py.File(directory / "tf_model.h5", "r") as file:
        model = next(iter(file[hf_tf.BERT].keys()))
        return file[f"{group}/{model}/{hf_tf.EMBEDDING_ROWS[row].name}"][...]


@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_the_tree_holds_the_mlm_heads_copy_and_the_differing_one_is_named(tmp_path, case):
    _, _, row, group = next(c for c in CASES if c[0] == case)
    directory = tampered(tmp_path, case)
    tree = formats.read(directory)
    canonical = hf_tf.EMBEDDING_ROWS[row].canonical
    assert tree[canonical].source == hf_tf.HELD + hf_tf.EMBEDDING_ROWS[row].name
    assert np.array_equal(tree[canonical].tensor.read(), stored(directory, hf_tf.MLM, row))
    [copy] = differing_copies(tree)
    assert copy.used.name == canonical and copy.overwritten.name == hf_tf.EMBEDDING_ROWS[row].name
    assert not np.array_equal(stored(directory, hf_tf.BERT, row), stored(directory, hf_tf.MLM, row))


@pytest.mark.parametrize("case", ["mlm-word", "mlm-position"])
def test_verify_and_convert_name_the_differing_copy_and_inspect_says_it_did_not_compare(tmp_path, case):
    _, _, row, _ = next(c for c in CASES if c[0] == case)
    directory = tampered(tmp_path, case)
    held, encoder = hf_tf.HELD + hf_tf.EMBEDDING_ROWS[row].name, hf_tf.EMBEDDING_ROWS[row].name
    sentence = f"{encoder} differs from {held}, the other stored copy of {hf_tf.EMBEDDING_ROWS[row].canonical}"
    computes = f"The model computes with {held}, as bertconv reads it"

    inspect = run_in_process("inspect", directory, "--json")  # headers only: it says that it did not compare
    notes = json.loads(inspect.stdout)["notes"]
    assert inspect.exit_code == 0 and not any(sentence in n for n in notes)
    assert any("the 5 overwritten copies listed as ignored were not compared with the copies read" in n
               and "bertconv verify compares their values" in n for n in notes)
    assert "were not compared" in run_in_process("inspect", directory).stdout.replace("\n", " ")

    verify = run_in_process("verify", directory, "--json")
    assert verify.exit_code == 1
    [problem] = json.loads(verify.stdout)["problems"]
    assert sentence in problem and computes in problem and "re-save the file with its copies agreeing" in problem

    converted = run_in_process("convert", directory, tmp_path / "out", "--to", "hf", "--json")
    assert converted.exit_code == 0, converted.stderr
    assert any(sentence in note for note in json.loads(converted.stdout)["notes"])
    out = formats.read(tmp_path / "out")
    canonical = hf_tf.EMBEDDING_ROWS[row].canonical
    assert np.array_equal(out[canonical].tensor.read(), stored(directory, hf_tf.MLM, row))
    assert run_in_process("verify", tmp_path / "out").exit_code == 0  # one copy: nothing left to disagree


def test_agreeing_copies_say_nothing():
    for fixture in ("masked_lm", "pretraining"):
        tree = formats.read(TF / fixture)
        assert len([i for i in tree.ignored if i.copy_of]) == 5 and differing_copies(tree) == []
        assert run_in_process("verify", TF / fixture).exit_code == 0


@pytest.mark.oracle
def test_transformers_4_computes_what_bertconv_reads(tmp_path):
    """TensorFlow loads each tampered file; the values it holds and its logits are bertconv's."""
    directories = [tampered(tmp_path, case) for case, *_ in CASES]
    jobs = [(d, TF / fixture / "logits.npz", tmp_path / f"{case}.npz")
            for d, (case, fixture, *_) in zip(directories, CASES)]
    for (directory, inputs, out), result in zip(jobs, run_oracle(jobs)):
        assert result["missing"] == [] and result["unexpected"] == [], result
        loaded, batch = np.load(out), np.load(inputs)
        tree = formats.read(directory)
        for row in hf_tf.EMBEDDING_ROWS:
            assert np.array_equal(loaded[f"param:{row.name}"], tree[row.canonical].tensor.read()), row.name
        got = NumpyBert(tree)(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]).mlm_logits
        assert np.abs(got - loaded["mlm_logits"]).max() <= LOGITS_ATOL, directory.name


@pytest.mark.parametrize("nbytes", [1000, 3 * 2**20 + 12, 5 * 2**20])
def test_stored_copies_are_compared_to_the_last_byte(tmp_path, monkeypatch, nbytes):
    """Two copies stored as plain bytes are the same only when every byte is: a difference in
    either half (each compared on a thread of its own past two windows, here of 1 MiB), in a
    whole window or in the last partial one, is found, in one file or across two."""
    from bertconv import dtypes
    from bertconv.checks import same_bytes
    from bertconv.tensor import MappedTensor

    monkeypatch.setattr(same_bytes, "BLOCK_BYTES", 2**20)

    def same_stored_bytes(a, b) -> bool:
        return same_bytes.same_stored_bits(a, b, two_threads=True)

    values = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8).tobytes()
    one, other = tmp_path / "one.bin", tmp_path / "other.bin"

    def tensors(changed_at: int | None, across: bool) -> tuple[MappedTensor, MappedTensor]:
        copy = bytearray(values)
        if changed_at is not None:
            copy[changed_at] ^= 0x40
        if across:
            one.write_bytes(values)
            other.write_bytes(b"pad" + bytes(copy))
            return (MappedTensor(one, 0, dtypes.UINT8, (nbytes,)), MappedTensor(other, 3, dtypes.UINT8, (nbytes,)))
        one.write_bytes(b"x" + values + bytes(copy))
        return (MappedTensor(one, 1, dtypes.UINT8, (nbytes,)), MappedTensor(one, 1 + nbytes, dtypes.UINT8, (nbytes,)))

    for across in (False, True):
        assert same_stored_bytes(*tensors(None, across))
        for changed_at in sorted({0, nbytes // 2 - 1, nbytes // 2, min(nbytes // 2 + 2**20, nbytes - 2), nbytes - 1}):
            assert not same_stored_bytes(*tensors(changed_at, across)), (changed_at, across)
    shorter = MappedTensor(one, 1, dtypes.UINT8, (nbytes,))
    one.write_bytes(b"x" + values + values[:-1])  # the second copy runs past the end of the file
    assert not same_stored_bytes(shorter, MappedTensor(one, 1 + nbytes, dtypes.UINT8, (nbytes,)))
