"""brightmart/albert_zh checkpoints: read, audited, run, written back, refused where they cannot go.

The fixture (fixtures/make_albert_zh_fixtures.py) is made by a port of brightmart's own graph
code in tf.compat.v1, and `reference.npz` holds what that graph computes: values are checked
against TensorFlow's checkpoint reader, outputs against the graph's.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from conftest import FIXTURES, run_in_process
from bertconv import formats
from bertconv.checks.audit import audit
from bertconv import families
from bertconv.config import expected_components
from bertconv.conversion import convert
from bertconv.errors import BadInput
from bertconv.runtime.numpy_bert import NumpyBert

ALBERT_ZH = FIXTURES / "albert_zh"
TF_DIR = ALBERT_ZH / "tf"
PREFIX = TF_DIR / "albert_model.ckpt"
#: fp32 tolerance of logits against brightmart's TensorFlow graph.
LOGITS_ATOL = 1e-5


@pytest.fixture(scope="module")
def reference():
    return dict(np.load(ALBERT_ZH / "reference.npz"))


def test_values_are_tensorflows_bit_for_bit_under_brightmarts_names():
    tf = pytest.importorskip("tensorflow")
    reader = tf.train.load_checkpoint(str(PREFIX))
    tree = formats.read(TF_DIR)
    assert {p.source for p in tree} == set(reader.get_variable_to_shape_map())
    for param in tree:
        expected = reader.get_tensor(param.source)
        if param.source == "cls/seq_relationship/output_weights":
            expected = expected.T
        got = param.tensor.read()
        assert got.dtype == expected.dtype and np.array_equal(got, expected), param.source
    assert tree["embeddings.word_projection.kernel"].source == "bert/embeddings/word_embeddings_2"
    assert tree["layers.0.ffn.output.kernel"].source == "bert/encoder/layer_shared/output/dense/kernel"


def test_config_states_the_word_only_projection_and_one_shared_layer():
    config = formats.read(TF_DIR).config
    assert config.model_type == "albert" and families.member(config) == "albert_zh"
    assert config.word_projection and not config.embedding_projection
    assert (config.embedding_width, config.summed_width, config.hidden_size) == (20, 28, 28)
    assert config.stored_layers == 1 and config.layer_schedule() == [0, 0, 0]
    assert config.hidden_act == "gelu_tanh"  # brightmart's gelu is the tanh form
    assert config.provenance["word_projection"] == "format"


def test_audit_gives_the_closed_form_which_equals_tensorflows_count():
    tf = pytest.importorskip("tensorflow")
    tree = formats.read(TF_DIR)
    report = audit(tree)
    assert report["ok"], report["problems"]
    stored = sum(int(np.prod(shape)) for _, shape in tf.train.list_variables(str(PREFIX)))
    assert report["parameters"] == report["expected_parameters"] == stored
    assert report["heads"] == {"pooler": True, "mlm": True, "nsp": False, "sop": True, "rtd": False, "contact": False}
    components = expected_components(tree.config, tree.heads)
    V, E, H, P, T = 99, 20, 28, 33, 2
    assert components["embeddings.word"] == V * E and components["embeddings.word_projection"] == E * H
    assert components["embeddings.position"] == P * H and components["embeddings.token_type"] == T * H
    assert components["mlm.transform"] == H * H + H and "embeddings.projection" not in components


@pytest.mark.parametrize("runtime", ["numpy", "torch"])
def test_outputs_match_brightmarts_graph(reference, runtime):
    tree = formats.read(TF_DIR)
    if runtime == "torch":
        pytest.importorskip("torch")
        from bertconv.runtime.torch_bert import TorchBert
        model = TorchBert(tree)
    else:
        model = NumpyBert(tree)
    ids, types, mask = reference["input_ids"], reference["segment_ids"], reference["input_mask"]
    out = model(ids, types, mask)
    real = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(out.sequence_output)[real], reference["sequence_output"][real],
                               atol=LOGITS_ATOL, rtol=0)
    np.testing.assert_allclose(np.asarray(out.sop_logits), reference["sop_logits"], atol=LOGITS_ATOL, rtol=0)
    logits = np.asarray(model.masked_lm_logits(ids, types, mask, reference["masked_lm_positions"]))
    np.testing.assert_allclose(logits.reshape(-1, 99), reference["mlm_logits"], atol=LOGITS_ATOL, rtol=0)
    loss = model.pretraining_loss(ids, types, mask, reference["masked_lm_positions"], reference["masked_lm_ids"],
                                  reference["masked_lm_weights"], reference["sentence_order_labels"])
    assert abs(float(loss.mlm) - float(reference["masked_lm_loss"])) < LOGITS_ATOL
    assert abs(float(loss.nsp) - float(reference["sentence_order_loss"])) < LOGITS_ATOL


def test_the_mlm_head_maps_back_through_the_projection(reference):
    """Without the transposed projection the logits would not even have the decoder's width."""
    model = NumpyBert(formats.read(TF_DIR))
    hidden = model.encode(reference["input_ids"], reference["segment_ids"], reference["input_mask"])[:, 1]
    p = model.params
    transformed = model._layer_norm(model._activation(model._dense(hidden, "mlm.transform")), "mlm.norm")
    by_hand = transformed @ p["embeddings.word_projection.kernel"].T @ p["embeddings.word"].T + p["mlm.output_bias"]
    np.testing.assert_allclose(model.mlm_logits(hidden), by_hand, atol=1e-6, rtol=0)


def test_round_trip_is_bit_exact_and_keeps_brightmarts_names_and_config(tmp_path):
    tf = pytest.importorskip("tensorflow")
    tree = formats.read(TF_DIR)
    convert(tree, tmp_path / "out", "tf")
    back = formats.read(tmp_path / "out")
    assert back.config == tree.config and [p.source for p in back] == [p.source for p in tree]
    written = tf.train.load_checkpoint(str(tmp_path / "out" / "bert_model.ckpt"))
    original = tf.train.load_checkpoint(str(PREFIX))
    for param in tree:
        assert np.array_equal(written.get_tensor(param.source), original.get_tensor(param.source)), param.source
    # brightmart's modeling.py reads config.ln_type and fails without it.
    assert json.loads((tmp_path / "out" / "bert_config.json").read_text())["ln_type"] == "postln"


@pytest.mark.parametrize("target", ["hf", "bert4keras"])
def test_conversion_to_a_format_that_cannot_hold_it_is_refused(tmp_path, target):
    result = run_in_process("convert", TF_DIR, tmp_path / "out", "--to", target)
    assert result.exit_code == 2, result.stdout + result.stderr
    assert "brightmart albert_zh ALBERT" in result.stderr and "word_embeddings_2" in result.stderr
    assert "--to tf" in result.stderr and not (tmp_path / "out").exists()


def test_a_pre_layernorm_config_is_refused(tmp_path):
    directory = tmp_path / "preln"
    shutil.copytree(TF_DIR, directory)
    config = json.loads((directory / "albert_config_tiny.json").read_text())
    (directory / "albert_config_tiny.json").write_text(json.dumps({**config, "ln_type": "preln"}))
    with pytest.raises(BadInput, match="pre-LayerNorm"):
        formats.read(directory)


def test_without_a_config_the_applied_layer_count_is_asked_for_by_what_computes(tmp_path):
    """audit counts brightmart's ALBERT from its tensors (issue 26); verify, which computes,
    asks for the config (tests/test_family_hf.py has every command)."""
    directory = tmp_path / "bare"
    shutil.copytree(TF_DIR, directory)
    (directory / "albert_config_tiny.json").unlink()
    assert run_in_process("audit", directory).exit_code == 0
    result = run_in_process("verify", directory)
    assert result.exit_code == 2 and "--config" in result.stderr and "num_hidden_layers" in result.stderr


def test_verify_says_the_head_is_complete_and_tied():
    result = run_in_process("verify", TF_DIR)
    assert result.exit_code == 0, result.stdout + result.stderr
