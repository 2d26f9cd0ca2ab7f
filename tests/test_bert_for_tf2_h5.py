"""bert-for-tf2 saved with `model.save_weights('bert_model.h5')` (fixtures/tf2/bert-for-tf2-h5,
made by bert-for-tf2 itself: make_tf2_fixtures.py): read through the bert-for-tf2 table, the
audit equal to the layer's own count_params(), every value bit for bit the library's, and the
converted encoder computing the library's own output."""

from __future__ import annotations

import numpy as np
import pytest

from bertconv import formats
from bertconv.checks.audit import audit
from bertconv.containers.hdf5 import keras as keras_h5
from bertconv.conversion import convert
from bertconv.tensor import MappedTensor
from conftest import FIXTURES

H5_DIR = FIXTURES / "tf2" / "bert-for-tf2-h5"
H5 = H5_DIR / "bert_model.h5"
REFERENCE = np.load(H5_DIR / "reference.npz")


def test_the_file_and_its_directory_read_as_bert_for_tf2_under_its_layer():
    for path in (H5, H5_DIR):
        tree = formats.read(path)
        assert tree.format == "tf-bert-for-tf2" and tree.scope == "bert/"
    assert [i.name for i in tree.ignored] == ["classifier/kernel:0", "classifier/bias:0"]


def test_audit_equals_the_layers_count_params():
    report = audit(formats.read(H5))
    assert report["ok"] and report["parameters"] == int(REFERENCE["count_params"])


def test_every_value_is_the_librarys_bit_for_bit():
    tree = formats.read(H5)
    library = {key.removeprefix("weight:"): REFERENCE[key] for key in REFERENCE.files if key.startswith("weight:")}
    assert sorted(param.source for param in tree) == sorted(library)
    for param in tree:
        got, expected = param.tensor.read(), library[param.source]
        assert got.dtype == expected.dtype and np.array_equal(got, expected), param.source


def test_audit_reads_no_tensor_data(monkeypatch):
    def refuse(self):
        raise AssertionError(f"tensor data read: {self}")
    monkeypatch.setattr(MappedTensor, "read", refuse)
    monkeypatch.setattr(keras_h5.H5Tensor, "read", refuse)
    assert audit(formats.read(H5))["ok"]


def test_converted_encoder_matches_bert_for_tf2s_own_output(tmp_path):
    transformers = pytest.importorskip("transformers")
    import torch
    inputs = {k: torch.tensor(REFERENCE[k].astype(np.int64)) for k in ("input_ids", "attention_mask", "token_type_ids")}
    convert(formats.read(H5), tmp_path / "hf", "hf")
    encoder = transformers.BertModel.from_pretrained(tmp_path / "hf", add_pooling_layer=False).eval()
    with torch.no_grad():
        out = encoder(**inputs).last_hidden_state.numpy()
    assert np.max(np.abs(out - REFERENCE["sequence_output"])) <= 1e-5
