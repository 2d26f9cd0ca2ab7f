"""A Google TF checkpoint with float16 variables (fixtures/tf/fp16, written by TensorFlow's TF1
Saver: make_tf_fixtures.py) converts to Hugging Face and back without a bit changed: the HF file
keeps float16, and TensorFlow reads the TF checkpoint written back as the original's values."""

from __future__ import annotations

import numpy as np
import pytest

from bertconv import formats
from bertconv.conversion import convert
from conftest import FIXTURES

FP16 = FIXTURES / "tf" / "fp16"


def test_tf_fp16_to_hf_and_back_is_bit_exact_and_stays_float16(tmp_path):
    tf = pytest.importorskip("tensorflow")
    source = formats.read(FP16)
    assert {param.tensor.dtype.name for param in source} == {"float16"}
    convert(source, tmp_path / "hf", "hf")
    hf = formats.read(tmp_path / "hf")
    assert {param.tensor.dtype.name for param in hf} == {"float16"}
    convert(hf, tmp_path / "tf", "tf")

    original = tf.train.load_checkpoint(str(FP16 / "bert_model.ckpt"))
    written = tf.train.load_checkpoint(str(tmp_path / "tf" / "bert_model.ckpt"))
    written_names = written.get_variable_to_dtype_map()
    assert set(written_names) == {param.source for param in source}
    for param in source:
        expected = original.get_tensor(param.source)
        got = written.get_tensor(param.source)
        assert got.dtype == expected.dtype == np.float16, param.source
        assert np.array_equal(got.view(np.uint16), expected.view(np.uint16)), param.source
        canonical = hf[param.name].tensor.read()
        assert np.array_equal(canonical.view(np.uint16), param.tensor.read().view(np.uint16)), param.name
