"""The NumPy and torch runtimes against transformers' BertForPreTraining, and Google's losses
against the same formula written in TensorFlow.

Fixtures: fixtures/runtime/ (tiny V99 H32 A4 I37 P40 T2 L2, every parameter random; see
fixtures/make_runtime_fixtures.py), a bert-base-size random model built here, the MiniLM model's
real trained weights when present.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES
from bertconv import load
from bertconv.errors import BadInput, CheckFailed
from bertconv.runtime import Numerics, NumpyBert
from bertconv.runtime.numerics import (
    BERT4KERAS_MASK_ADDER, DTYPE_MIN, GELU_ERF, GELU_TANH, GELU_TANH_CUBIC, GELU_TANH_SCALE, GOOGLE_MASK_ADDER,
    LAYER_NORM_EPS, MLM_LOSS_EPSILON,
)
from bertconv.runtime.numpy_bert import erf, gelu_erf, gelu_tanh

RUNTIME = FIXTURES / "runtime"
TIED, UNTIED, ENCODER_ONLY = RUNTIME / "pretraining", RUNTIME / "untied", RUNTIME / "encoder_only"

#: Tolerances the issue sets: absolute, on prediction logits, NSP logits and pooled output.
TINY_ATOL = 1e-5
BASE_ATOL = 1e-4
RUNTIMES_ATOL = 1e-5
#: Native bfloat16 against transformers in bfloat16: both round to 8 mantissa bits, in different
#: orders; 0.25 is 8 ulps at the fixture's |logits| of about 5 (measured: 0.0625).
BF16_ATOL = 0.25
#: Loss parity with Google's formula in TensorFlow: relative.
LOSS_RTOL = 1e-6
#: Our erf against the standard library's, on a grid.
ERF_ATOL = 1e-9
#: Our float32 GELU against the exact value (float64 from math.erf): half an ulp of values up to 6.
GELU_EXACT_ATOL = 2.5e-7
#: Each GELU against torch's float32 one. torch computes 1 + erf(x / sqrt 2) in float32, which
#: cancels for negative x: it is itself up to 1.0e-6 from the exact value near x = -3.4.
GELU_ATOL = 2e-6
#: The tanh and erf GELUs differ by this much at least somewhere on [-6, 6] (the true maximum
#: difference is about 4.7e-4, near |x| = 2).
GELU_FORMS_DIFFER = 1e-4


def make_batch(vocab_size: int, type_vocab_size: int, batch: int = 3, seq_len: int = 11, seed: int = 0):
    """ids, token types and a mask with two padded rows (one padded after 3 tokens)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab_size, (batch, seq_len))
    types = rng.integers(0, type_vocab_size, (batch, seq_len))
    mask = np.ones((batch, seq_len), dtype=np.int64)
    if batch > 1:
        mask[1, seq_len * 2 // 3:] = 0
    if batch > 2:
        mask[2, 3:] = 0
    return ids, types, mask


def hf_model(directory: Path, **kwargs):
    transformers = pytest.importorskip("transformers")
    return transformers.BertForPreTraining.from_pretrained(directory, attn_implementation="eager", **kwargs).eval()


def hf_outputs(model, ids, types, mask) -> dict[str, np.ndarray]:
    """transformers' sequence output, pooled output, prediction and NSP logits, as float32 arrays."""
    torch = pytest.importorskip("torch")
    with torch.no_grad():
        encoded = model.bert(input_ids=torch.tensor(ids), token_type_ids=torch.tensor(types),
                             attention_mask=torch.tensor(mask))
        mlm, nsp = model.cls(encoded.last_hidden_state, encoded.pooler_output)
    return {"sequence": encoded.last_hidden_state, "pooled": encoded.pooler_output, "mlm": mlm, "nsp": nsp}


def as_numpy(x) -> np.ndarray:
    return x.detach().float().numpy() if hasattr(x, "detach") else np.asarray(x)


def max_differences(out, reference: dict) -> dict[str, float]:
    ours = {"sequence": out.sequence_output, "pooled": out.pooled_output, "mlm": out.mlm_logits,
            "nsp": out.nsp_logits}
    return {k: float(np.abs(as_numpy(ours[k]) - as_numpy(reference[k])).max()) for k in ours}


def torch_bert(tree, numerics=None, **kwargs):
    pytest.importorskip("torch")
    from bertconv.runtime import TorchBert
    return TorchBert(tree, numerics, **kwargs)


# --- parity with transformers ---------------------------------------------------------------


@pytest.mark.parametrize("fixture", [TIED, UNTIED], ids=["tied", "untied"])
def test_numpy_matches_transformers_on_tiny(fixture):
    tree = load(fixture)
    model = NumpyBert(tree)
    assert model.decoder == ("mlm.decoder" if fixture is UNTIED else "embeddings.word")
    batch = make_batch(tree.config.vocab_size, tree.config.type_vocab_size)
    diffs = max_differences(model(*batch), hf_outputs(hf_model(fixture), *batch))
    assert max(diffs.values()) <= TINY_ATOL, diffs


@pytest.mark.parametrize("fixture", [TIED, UNTIED], ids=["tied", "untied"])
def test_torch_matches_transformers_and_numpy_on_tiny(fixture):
    tree = load(fixture)
    batch = make_batch(tree.config.vocab_size, tree.config.type_vocab_size)
    ours = torch_bert(tree)(*batch)
    diffs = max_differences(ours, hf_outputs(hf_model(fixture), *batch))
    assert max(diffs.values()) <= TINY_ATOL, diffs
    numpy_out = NumpyBert(tree)(*batch)
    between = max_differences(ours, {"sequence": numpy_out.sequence_output, "pooled": numpy_out.pooled_output,
                                     "mlm": numpy_out.mlm_logits, "nsp": numpy_out.nsp_logits})
    assert max(between.values()) <= RUNTIMES_ATOL, between


@pytest.fixture(scope="module")
def bert_base(tmp_path_factory) -> Path:
    """A bert-base-size BertForPreTraining (L12 H768 A12 I3072 V30522 P512), random, LayerNorms
    included, saved as model.safetensors."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                                     intermediate_size=3072, max_position_embeddings=512, type_vocab_size=2)
    model = transformers.BertForPreTraining(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "LayerNorm" in name:
                param.add_(0.1 * torch.randn_like(param))
    directory = tmp_path_factory.mktemp("bert-base")
    model.save_pretrained(directory)
    return directory


def test_runtimes_match_transformers_on_bert_base(bert_base):
    tree = load(bert_base)
    batch = make_batch(tree.config.vocab_size, tree.config.type_vocab_size, batch=1, seq_len=16)
    reference = hf_outputs(hf_model(bert_base), *batch)
    numpy_out, torch_out = NumpyBert(tree)(*batch), torch_bert(tree)(*batch)
    for out in (numpy_out, torch_out):
        diffs = max_differences(out, reference)
        assert max(diffs.values()) <= BASE_ATOL, diffs
    between = max_differences(torch_out, {"sequence": numpy_out.sequence_output, "pooled": numpy_out.pooled_output,
                                          "mlm": numpy_out.mlm_logits, "nsp": numpy_out.nsp_logits})
    assert max(between.values()) <= BASE_ATOL, between


def test_encoder_matches_transformers_on_real_trained_weights(minilm):
    """MiniLM-L6 (H384, a real trained encoder without heads): the encoder alone."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tree = load(minilm)
    model = NumpyBert(tree)
    assert not (model.heads.mlm or model.heads.nsp)
    ids, types, mask = make_batch(tree.config.vocab_size, tree.config.type_vocab_size, seq_len=24)
    reference = transformers.BertModel.from_pretrained(minilm, attn_implementation="eager").eval()
    with torch.no_grad():
        expected = reference(input_ids=torch.tensor(ids), token_type_ids=torch.tensor(types),
                             attention_mask=torch.tensor(mask)).last_hidden_state.numpy()
    assert np.abs(model.encode(ids, types, mask) - expected).max() <= TINY_ATOL


# --- fp16 / bf16 weights ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
def test_half_precision_weights_are_widened_exactly_in_numpy(tmp_path, dtype_name):
    torch = pytest.importorskip("torch")
    half = hf_model(TIED).to(getattr(torch, dtype_name))
    half.save_pretrained(tmp_path)
    tree = load(tmp_path)
    assert tree["embeddings.word"].tensor.dtype.name == dtype_name
    model = NumpyBert(tree)
    assert all(p.dtype == np.float32 for p in model.params.values())
    widened = hf_model(tmp_path, dtype=torch.float32)  # the same half-precision values, in float32
    batch = make_batch(tree.config.vocab_size, tree.config.type_vocab_size)
    diffs = max_differences(model(*batch), hf_outputs(widened, *batch))
    assert max(diffs.values()) <= TINY_ATOL, diffs


def test_torch_runs_bfloat16_weights_natively(tmp_path):
    torch = pytest.importorskip("torch")
    half = hf_model(TIED).to(torch.bfloat16)
    half.save_pretrained(tmp_path)
    tree = load(tmp_path)
    model = torch_bert(tree, dtype=torch.bfloat16)
    word = model.params["embeddings.word"]
    assert word.dtype == torch.bfloat16
    assert torch.equal(word.view(torch.int16), half.bert.embeddings.word_embeddings.weight.detach().view(torch.int16))
    batch = make_batch(tree.config.vocab_size, tree.config.type_vocab_size)
    with torch.no_grad():
        expected = half(input_ids=torch.tensor(batch[0]), token_type_ids=torch.tensor(batch[1]),
                        attention_mask=torch.tensor(batch[2])).prediction_logits
    ours = model(*batch).mlm_logits
    assert ours.dtype == torch.bfloat16
    assert (ours.float() - expected.float()).abs().max().item() <= BF16_ATOL


# --- numerics: GELU forms, mask adders, defaults per source format --------------------------


def test_erf_matches_the_standard_library():
    x = np.linspace(-9.0, 9.0, 20001)
    expected = np.array([math.erf(v) for v in x])
    assert np.abs(erf(x) - expected).max() <= ERF_ATOL


def test_gelu_forms_differ_and_each_matches_torch():
    torch = pytest.importorskip("torch")
    x = np.linspace(-6.0, 6.0, 12001, dtype=np.float32)
    exact = torch.nn.functional.gelu(torch.from_numpy(x), approximate="none").numpy()
    approximate = torch.nn.functional.gelu(torch.from_numpy(x), approximate="tanh").numpy()
    assert np.abs(gelu_erf(x) - exact).max() <= GELU_ATOL
    exact64 = np.array([0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))) for v in x.astype(np.float64)])
    assert np.abs(gelu_erf(x) - exact64).max() <= GELU_EXACT_ATOL
    assert np.abs(gelu_tanh(x) - approximate).max() <= GELU_ATOL
    assert np.abs(gelu_erf(x) - gelu_tanh(x)).max() >= GELU_FORMS_DIFFER
    # Google's formula, written out from modeling.py `gelu`.
    google = 0.5 * x * (1.0 + np.tanh(GELU_TANH_SCALE * (x + GELU_TANH_CUBIC * x ** 3)))
    assert np.abs(gelu_tanh(x) - google).max() <= GELU_ATOL


def test_model_gelu_is_selectable_and_each_form_matches_its_reference(tmp_path):
    """The same weights run with erf and with tanh: outputs differ visibly, and each matches
    transformers configured with that form ("gelu" / "gelu_pytorch_tanh")."""
    tree = load(TIED)
    batch = make_batch(tree.config.vocab_size, tree.config.type_vocab_size)
    model = hf_model(TIED)
    model.config.hidden_act = "gelu_pytorch_tanh"
    tanh_model = type(model)(model.config).eval()
    tanh_model.load_state_dict(model.state_dict())
    erf_out = NumpyBert(tree, Numerics(activation=GELU_ERF))(*batch)
    tanh_out = NumpyBert(tree, Numerics(activation=GELU_TANH))(*batch)
    assert np.abs(erf_out.mlm_logits - tanh_out.mlm_logits).max() > 100 * TINY_ATOL
    assert max(max_differences(erf_out, hf_outputs(hf_model(TIED), *batch)).values()) <= TINY_ATOL
    assert max(max_differences(tanh_out, hf_outputs(tanh_model, *batch)).values()) <= TINY_ATOL
    torch_tanh = torch_bert(tree, Numerics(activation=GELU_TANH))(*batch)
    assert max(max_differences(torch_tanh, hf_outputs(tanh_model, *batch)).values()) <= TINY_ATOL


def test_mask_adders_agree_and_padding_does_not_leak():
    tree = load(TIED)
    ids, types, mask = make_batch(tree.config.vocab_size, tree.config.type_vocab_size)
    outputs = {adder: NumpyBert(tree, Numerics(mask_adder=adder)).encode(ids, types, mask)
               for adder in (GOOGLE_MASK_ADDER, DTYPE_MIN, BERT4KERAS_MASK_ADDER)}
    for adder, out in outputs.items():
        assert np.abs(out - outputs[DTYPE_MIN]).max() <= 1e-6, adder
    changed = ids.copy()
    changed[2, 3:] = (changed[2, 3:] + 1) % tree.config.vocab_size  # other tokens under the padding
    again = NumpyBert(tree).encode(changed, types, mask)
    assert np.abs(again[2, :3] - outputs[DTYPE_MIN][2, :3]).max() <= 1e-6


def with_format(tree, format_name: str, *, hidden_act_stated: bool):
    provenance = {**tree.config.provenance, "hidden_act": "file" if hidden_act_stated else "default"}
    return dataclasses.replace(tree, format=format_name, config=dataclasses.replace(tree.config, provenance=provenance))


def test_numerics_defaults_per_source_format_and_overrides():
    tree = load(TIED)
    assert Numerics.for_tree(tree) == Numerics(GELU_ERF, LAYER_NORM_EPS, DTYPE_MIN)
    google = with_format(tree, "google-tf", hidden_act_stated=False)
    assert Numerics.for_tree(google) == Numerics(GELU_TANH, LAYER_NORM_EPS, GOOGLE_MASK_ADDER)
    bert4keras = with_format(tree, "bert4keras-h5", hidden_act_stated=False)
    assert Numerics.for_tree(bert4keras) == Numerics(GELU_ERF, LAYER_NORM_EPS, BERT4KERAS_MASK_ADDER)
    # A config that states its activation is believed (its reader already read "gelu" as meant).
    stated = dataclasses.replace(google, config=dataclasses.replace(google.config, hidden_act=GELU_ERF))
    stated = with_format(stated, "google-tf", hidden_act_stated=True)
    assert Numerics.for_tree(stated).activation == GELU_ERF
    overridden = Numerics.for_tree(google, activation="relu", layer_norm_eps=1e-5, mask_adder=DTYPE_MIN)
    assert overridden == Numerics("relu", 1e-5, DTYPE_MIN)
    with pytest.raises(BadInput, match="no family with known numerics"):
        Numerics.for_tree(with_format(tree, "no-such-format", hidden_act_stated=False))
    with pytest.raises(BadInput, match="activation 'swish'"):
        Numerics(activation="swish")


def test_google_checkpoint_runs_with_google_numerics():
    tree = load(FIXTURES / "tf" / "full")
    model = NumpyBert(tree)
    assert model.numerics == Numerics(GELU_TANH, LAYER_NORM_EPS, GOOGLE_MASK_ADDER)
    ids, types, mask = make_batch(tree.config.vocab_size, tree.config.type_vocab_size)
    assert np.isfinite(model(ids, types, mask).mlm_logits).all()


# --- Google's losses, against the formula written in TensorFlow ------------------------------


def google_losses_in_tensorflow(model: NumpyBert, sequence_output, positions, label_ids, label_weights,
                                nsp_labels) -> tuple[float, float]:
    """run_pretraining.py `get_masked_lm_output` and `get_next_sentence_output`, in TF ops, on
    the encoder output and the head weights of `model`."""
    tf = pytest.importorskip("tensorflow")
    p = {k: tf.constant(v) for k, v in model.params.items()}
    batch, seq_len, hidden = sequence_output.shape
    eps = model.numerics.layer_norm_eps

    def gelu(x):
        if model.numerics.activation == GELU_TANH:  # modeling.py `gelu`
            return x * 0.5 * (1.0 + tf.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * tf.pow(x, 3))))
        return 0.5 * x * (1.0 + tf.math.erf(x / np.sqrt(2.0)))

    def layer_norm(x, prefix):
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        return tf.nn.batch_normalization(x, mean, variance, p[f"{prefix}.beta"], p[f"{prefix}.gamma"], eps)

    # gather_indexes
    flat_offsets = tf.reshape(tf.range(0, batch, dtype=tf.int32) * seq_len, [-1, 1])
    flat_positions = tf.reshape(tf.constant(positions, tf.int32) + flat_offsets, [-1])
    flat_sequence = tf.reshape(tf.constant(sequence_output), [batch * seq_len, hidden])
    x = tf.gather(flat_sequence, flat_positions)
    # cls/predictions/transform, then the tied output weights
    x = layer_norm(gelu(tf.matmul(x, p["mlm.transform.kernel"]) + p["mlm.transform.bias"]), "mlm.norm")
    logits = tf.nn.bias_add(tf.matmul(x, p[model.decoder], transpose_b=True), p["mlm.output_bias"])
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    label_ids = tf.reshape(tf.constant(label_ids, tf.int32), [-1])
    label_weights = tf.reshape(tf.constant(label_weights, tf.float32), [-1])
    one_hot_labels = tf.one_hot(label_ids, depth=model.config.vocab_size, dtype=tf.float32)
    per_example_loss = -tf.reduce_sum(log_probs * one_hot_labels, axis=[-1])
    numerator = tf.reduce_sum(label_weights * per_example_loss)
    denominator = tf.reduce_sum(label_weights) + 1e-5
    mlm_loss = numerator / denominator
    # get_next_sentence_output on the pooled output; Google's output_weights is [2, H], the
    # transpose of the canonical nsp.kernel
    pooled = tf.tanh(tf.matmul(tf.constant(sequence_output[:, 0]), p["pooler.kernel"]) + p["pooler.bias"])
    output_weights = tf.transpose(p["nsp.kernel"])
    nsp_logits = tf.nn.bias_add(tf.matmul(pooled, output_weights, transpose_b=True), p["nsp.bias"])
    nsp_log_probs = tf.nn.log_softmax(nsp_logits, axis=-1)
    nsp_one_hot = tf.one_hot(tf.constant(nsp_labels, tf.int32), depth=2, dtype=tf.float32)
    nsp_loss = tf.reduce_mean(-tf.reduce_sum(nsp_one_hot * nsp_log_probs, axis=-1))
    return float(mlm_loss.numpy()), float(nsp_loss.numpy())


#: Three sequences, M = 4 slots each; the last slots of rows 0 and 2 are padding (position 0,
#: id 0, weight 0), as create_pretraining_data.py writes them.
POSITIONS = np.array([[1, 4, 6, 0], [2, 3, 5, 6], [1, 2, 0, 0]])
LABEL_WEIGHTS = np.array([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]], dtype=np.float32)
NSP_LABELS = np.array([0, 1, 1])


@pytest.mark.parametrize("activation", [GELU_ERF, GELU_TANH])
def test_losses_match_googles_formula_in_tensorflow(activation):
    tree = load(TIED)
    ids, types, mask = make_batch(tree.config.vocab_size, tree.config.type_vocab_size)
    label_ids = np.where(LABEL_WEIGHTS > 0, np.random.default_rng(1).integers(1, 99, POSITIONS.shape), 0)
    numerics = Numerics(activation=activation, mask_adder=GOOGLE_MASK_ADDER)
    model = NumpyBert(tree, numerics)
    expected_mlm, expected_nsp = google_losses_in_tensorflow(
        model, model.encode(ids, types, mask), POSITIONS, label_ids, LABEL_WEIGHTS, NSP_LABELS)
    runtimes = [model, torch_bert(tree, numerics)]
    for runtime in runtimes:
        losses = runtime.pretraining_loss(ids, types, mask, POSITIONS, label_ids, LABEL_WEIGHTS, NSP_LABELS)
        assert float(losses.mlm) == pytest.approx(expected_mlm, rel=LOSS_RTOL)
        assert float(losses.nsp) == pytest.approx(expected_nsp, rel=LOSS_RTOL)
        assert float(losses.total) == pytest.approx(expected_mlm + expected_nsp, rel=LOSS_RTOL)


def test_gathering_first_equals_the_full_logits_at_the_positions():
    tree = load(TIED)
    ids, types, mask = make_batch(tree.config.vocab_size, tree.config.type_vocab_size)
    model = NumpyBert(tree)
    full = model(ids, types, mask).mlm_logits  # [B, S, V]
    gathered = model.masked_lm_logits(ids, types, mask, POSITIONS)  # [B, M, V]
    assert np.abs(gathered - full[np.arange(3)[:, None], POSITIONS]).max() <= 1e-6
    losses = model.pretraining_loss(ids, types, mask, POSITIONS, ids[np.arange(3)[:, None], POSITIONS], LABEL_WEIGHTS)
    log_probs = full - np.log(np.exp(full).sum(-1, keepdims=True))
    per_slot = -np.take_along_axis(log_probs[np.arange(3)[:, None], POSITIONS],
                                   ids[np.arange(3)[:, None], POSITIONS][..., None], -1)[..., 0]
    assert np.abs(losses.mlm_per_slot - per_slot).max() <= 1e-5
    assert losses.nsp is None and losses.total == losses.mlm


def test_all_padding_slots_give_zero_loss_not_nan():
    tree = load(TIED)
    ids, types, mask = make_batch(tree.config.vocab_size, tree.config.type_vocab_size)
    zeros = np.zeros_like(POSITIONS)
    losses = NumpyBert(tree).pretraining_loss(ids, types, mask, zeros, zeros, np.zeros(POSITIONS.shape))
    assert float(losses.mlm) == 0.0
    assert MLM_LOSS_EPSILON == 1e-5


# --- refusals -------------------------------------------------------------------------------


def test_encoder_only_runs_the_encoder_and_refuses_the_loss():
    tree = load(ENCODER_ONLY)
    model = NumpyBert(tree)
    ids, types, mask = make_batch(tree.config.vocab_size, tree.config.type_vocab_size)
    out = model(ids, types, mask)
    assert out.sequence_output.shape == (3, 11, 32)
    assert out.pooled_output is None and out.mlm_logits is None and out.nsp_logits is None
    with pytest.raises(CheckFailed, match="has no MLM head"):
        model.pretraining_loss(ids, types, mask, POSITIONS, POSITIONS, LABEL_WEIGHTS)


def test_a_partial_head_is_refused_naming_what_is_missing():
    tree = load(TIED)
    del tree.params["mlm.norm.beta"]
    with pytest.raises(CheckFailed, match=r"MLM head .* is partial, missing mlm\.norm\.beta"):
        NumpyBert(tree)


def test_a_shape_that_disagrees_with_the_config_names_the_tensor():
    tree = load(TIED)
    tree.config = dataclasses.replace(tree.config, intermediate_size=36)
    with pytest.raises(BadInput, match=r"layers\.0\.ffn\.intermediate\.kernel .* has shape \[32, 37\]"):
        NumpyBert(tree)


@pytest.mark.parametrize("change, message", [
    (lambda ids, types, mask: (ids + 99, types, mask), r"input_ids holds 1\d\d, outside \[0, 99\)"),
    (lambda ids, types, mask: (np.tile(ids, 4), np.tile(types, 4), np.tile(mask, 4)), "position table has 40 rows"),
    (lambda ids, types, mask: (ids, types + 1, mask), r"token_type_ids holds 2, outside \[0, 2\)"),
    (lambda ids, types, mask: (ids, types, mask * 2), "attention_mask must hold only 0"),
    (lambda ids, types, mask: (ids[0], types[0], mask[0]), r"input_ids has shape \[11\]"),
])
def test_bad_inputs_are_named(change, message):
    tree = load(TIED)
    with pytest.raises(BadInput, match=message):
        NumpyBert(tree).encode(*change(*make_batch(99, 2)))
