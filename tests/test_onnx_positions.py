"""`convert --to onnx` of the families whose positions or layers the graph computes in modules of
its own (formats/onnx/sinusoids.py, layer_kinds.py): RoFormer's rotary pairs (and `rotary_value`),
NEZHA's functional relative positions and ModernBERT's sliding-window, GeGLU, bias-free layers.
Run by onnxruntime 1.31 against the NumPy runtime at lengths past ModernBERT's window and NEZHA's
clipped distance, against transformers 5 (RoFormer, ModernBERT) and transformers 4.57 (NEZHA, in
the oracle environment), in float16 too; DeBERTa is the one family still refused."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bertconv import formats
from bertconv.runtime.numpy_bert import NumpyBert
import oracle_process
from conftest import FIXTURES
from test_onnx import ATOL, ORACLE_ATOL, check_interface, export, onnx, run, transformers_5_logits

from bertconv.formats.onnx import check as onnx_check, graph as onnx_graph  # noqa: E402,I001 (needs the onnx package)

ROFORMER = ["roformer/hf/masked_lm", "roformer/hf/rotary_value", "roformer/bert4keras/mlm"]
NEZHA = ["nezha/hf/masked_lm", "nezha/hf/pretraining", "nezha/bert4keras/mlm"]
MODERNBERT = ["modernbert/masked_lm", "modernbert/biased"]
#: RoFormer-v2: bias-free, RMS norms (keras-hub's with a scale, bert4keras' without), no MLM transform.
ROFORMER_V2 = ["roformer_v2/bert4keras/mlm", "keras_hub/roformer_v2"]
EXPORTED = [*ROFORMER, *NEZHA, *MODERNBERT, *ROFORMER_V2]
#: The transformers 5 fixtures (transformers 5 has no NEZHA: 4.57 computes it, below).
TRANSFORMERS_5 = ["roformer/hf/masked_lm", "roformer/hf/rotary_value", *MODERNBERT]
#: Three rows of 20 tokens, the second padded after 13, the third after 5: past ModernBERT's
#: windows (keys at most 4 and 3 positions away) and NEZHA's clipped distance (K = 6), within
#: every fixture's positions (32 at least).
SHAPE = (3, 20)


def padded_batch(config, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, config.vocab_size, size=SHAPE)
    mask = np.ones(SHAPE, dtype=np.int64)
    mask[1, 13:] = 0
    mask[2, 5:] = 0
    types = np.zeros(SHAPE, dtype=np.int64)
    types[0, 8:] = 1
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}


def numpy_logits(tree, feed: dict[str, np.ndarray]) -> np.ndarray:
    types = feed["token_type_ids"] if tree.config.type_vocab_size else None
    return NumpyBert(tree)(feed["input_ids"], types, feed["attention_mask"]).mlm_logits


@pytest.mark.parametrize("fixture", EXPORTED)
def test_the_export_computes_the_numpy_runtimes_logits_past_the_window_and_the_clipped_distance(fixture, tmp_path):
    tree = formats.read(FIXTURES / fixture)
    out = export(fixture, tmp_path)
    check_interface(tree, out)
    for seed, shape in ((1, SHAPE), (2, (1, 3))):  # and one row shorter than any window or distance
        feed = padded_batch(tree.config, seed)
        feed = {name: values[:shape[0], :shape[1]] for name, values in feed.items()}
        np.testing.assert_allclose(run(out, feed), numpy_logits(tree, feed), rtol=0, atol=ATOL)


def test_the_sliding_window_and_its_rotary_base_are_computed(tmp_path):
    """A ModernBERT whose window covers every key, with one rotary base, computes other logits past
    the window: the export's agreement with the runtime is not that of a model without them."""
    tree = formats.read(FIXTURES / "modernbert" / "masked_lm")
    feed = padded_batch(tree.config)
    got = run(export("modernbert/masked_lm", tmp_path), feed)
    tree.config = replace(tree.config, local_attention=2 * SHAPE[1], local_rope_theta=tree.config.rope_theta)
    assert np.abs(got - numpy_logits(tree, feed)).max() > 1e-2


@pytest.mark.parametrize("fixture", TRANSFORMERS_5)
def test_the_export_computes_transformers_5s_logits(fixture, tmp_path):
    tree = formats.read(FIXTURES / fixture)
    out = export(fixture, tmp_path)
    feed = padded_batch(tree.config, seed=3)
    expected = transformers_5_logits(fixture, feed)
    real = feed["attention_mask"].astype(bool)  # padding's outputs are never read
    assert np.abs(run(out, feed) - expected)[real].max() <= ORACLE_ATOL


@pytest.mark.oracle
def test_the_nezha_export_computes_transformers_4_57s_logits(tmp_path):
    oracle_process.skip_unless_installed("transformers 4.57")
    fixture = FIXTURES / "nezha" / "hf" / "masked_lm"
    feed = padded_batch(formats.read(fixture).config, seed=4)
    inputs, logits = tmp_path / "inputs.npz", tmp_path / "logits.npz"
    np.savez(inputs, **feed)
    [result] = oracle_process.run("relpos", "NezhaForMaskedLM", fixture, inputs, logits)
    assert result["transformers"].startswith("4.57"), result
    expected = np.load(logits)["logits"]
    real = feed["attention_mask"].astype(bool)
    assert np.abs(run(export("nezha/hf/masked_lm", tmp_path), feed) - expected)[real].max() <= ORACLE_ATOL


# --- float16 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", EXPORTED)
def test_float16_exports_are_finite_with_layer_norm_softmax_and_positions_in_float32(fixture, tmp_path):
    tree = formats.read(FIXTURES / fixture)
    config = tree.config
    out = export(fixture, tmp_path, dtype="float16")
    model = onnx.load(out / "model.onnx")
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {value.name: value.type.tensor_type.elem_type for value in inferred.graph.value_info}
    norm = "ReduceMean" if config.rms_norm else "LayerNormalization"  # RoFormer-v2's mean of squares
    guarded = [node for node in model.graph.node if node.op_type in (norm, "Softmax", "Einsum")]
    per_layer = 3 + 2 * (fixture in NEZHA)  # a softmax and 2 norms a layer (NEZHA: and its 2 Einsums)
    # the embeddings' and the head's (RoFormer-v2 has no head norm), the final norm
    norms = 1 + config.mlm_transform + config.final_layer_norm - (not config.first_attention_norm)
    assert len(guarded) == per_layer * config.num_hidden_layers + norms
    for node in guarded:
        assert {types.get(name, onnx.TensorProto.FLOAT) for name in (*node.input, *node.output)} == \
            {onnx.TensorProto.FLOAT}, node.name
    feed = padded_batch(config, seed=5)
    got = run(out, feed)
    expected = numpy_logits(tree, feed)
    assert np.isfinite(got).all()
    difference = float(np.abs(got - expected).max())
    assert 0 < difference <= onnx_check.budget(onnx_graph.Precision.FLOAT16, float(np.abs(expected).max()))
