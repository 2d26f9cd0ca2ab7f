"""A Model Garden BertPretrainerV2 with the pre-training task's `next_sentence` head
(fixtures/tf2/garden-nsp, made by tf-models-official: make_tf2_fixtures.py): its head is read as
the tree's pooler + NSP, values bit for bit TensorFlow's, and the converted model computes the
Garden's own NSP and masked-LM logits."""

from __future__ import annotations

import numpy as np
import pytest

from bertconv import formats
from bertconv.checks.audit import audit
from bertconv.conversion import convert
from bertconv.formats.tensorflow import model_garden as tf2_garden
from conftest import FIXTURES

GARDEN_NSP = FIXTURES / "tf2" / "garden-nsp"
TOLERANCE = 1e-5


def test_the_next_sentence_head_is_the_pooler_and_nsp():
    tree = formats.read(GARDEN_NSP)
    head = "model/classification_heads/0/"
    assert tree["pooler.kernel"].source.startswith(head + "dense/kernel")
    assert tree["nsp.kernel"].source.startswith(head + "out_proj/kernel")
    assert tree["nsp.kernel"].tensor.shape == (tree.config.hidden_size, 2)
    ignored = {i.name.split("/.ATTRIBUTES")[0]: i.reason for i in tree.ignored}
    assert set(ignored) >= {"model/encoder_network/_pooler_layer/kernel", "model/encoder_network/_pooler_layer/bias"}
    assert "does not train" in ignored["model/encoder_network/_pooler_layer/kernel"]
    assert audit(tree)["ok"]


def test_checkpoints_without_the_head_keep_the_encoders_pooler():
    for fixture in ("garden-pretrainer", "garden-model-adam", "garden-encoder"):
        tree = formats.read(FIXTURES / "tf2" / fixture)
        assert "nsp.kernel" not in tree and "_pooler_layer/kernel" in tree["pooler.kernel"].source, fixture


def test_every_value_equals_tensorflows_bit_for_bit():
    tf = pytest.importorskip("tensorflow")
    reader = tf.train.load_checkpoint(str(GARDEN_NSP / "bert_model.ckpt"))
    for param in formats.read(GARDEN_NSP):
        got, expected = param.tensor.read(), reader.get_tensor(param.source)
        assert got.dtype == expected.dtype and np.array_equal(got, expected.reshape(got.shape)), param.source


def test_converted_model_gives_the_gardens_nsp_and_mlm_logits(tmp_path):
    transformers = pytest.importorskip("transformers")
    import torch
    reference = np.load(GARDEN_NSP / "reference.npz")
    inputs = {k: torch.tensor(reference[k].astype(np.int64)) for k in ("input_ids", "attention_mask", "token_type_ids")}
    convert(formats.read(GARDEN_NSP), tmp_path / "hf", "hf")
    model = transformers.BertForPreTraining.from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        out = model(**inputs)
    assert np.max(np.abs(out.seq_relationship_logits.numpy() - reference["nsp_logits"])) <= TOLERANCE
    assert np.max(np.abs(out.prediction_logits.numpy() - reference["mlm_logits"])) <= TOLERANCE


def test_nsp_table_differs_from_the_table_only_in_the_head():
    plain = {row.canonical: row.name for row in tf2_garden.TABLE.rows}
    nsp = {row.canonical: row.name for row in tf2_garden.NSP_TABLE.rows}
    changed = {name for name in nsp if plain.get(name) != nsp[name]}
    assert changed == {"pooler.kernel", "pooler.bias", "nsp.kernel", "nsp.bias"}
