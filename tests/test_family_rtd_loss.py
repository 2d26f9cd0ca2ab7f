"""ELECTRA's discriminator loss (replaced-token detection) in the NumPy and torch runtimes.

Checked two ways: the loss step against google-research/electra's `_get_discriminator_output`
computed by TensorFlow on the same logits, and the whole model against transformers 5
`ElectraForPreTraining(labels=...)`, which averages over the positions whose attention mask is 1
without Google's 1e-6 in the denominator: the two agree within that epsilon's share.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import FIXTURES
from bertconv import formats
from bertconv.errors import BadInput, CheckFailed
from bertconv.runtime.loss import RTD_LOSS_EPSILON, replaced_token_loss
from bertconv.runtime.numpy_bert import NumpyBert

DISCRIMINATOR = FIXTURES / "family_hf" / "electra" / "discriminator"
GENERATOR = FIXTURES / "family_hf" / "electra" / "generator"
#: fp32 agreement of logits and losses computed by different code.
ATOL = 1e-5


@pytest.fixture(scope="module")
def batch():
    """Three sequences of 11 tokens, two of them padded; labels 0/1 everywhere, padding too."""
    vocab_size = formats.read(DISCRIMINATOR).config.vocab_size
    rng = np.random.default_rng(16)
    ids = rng.integers(5, vocab_size, size=(3, 11))
    mask = np.ones((3, 11), np.int64)
    mask[1, 7:] = 0
    mask[2, 4:] = 0
    return {"ids": ids, "types": np.zeros_like(ids), "mask": mask, "labels": rng.integers(0, 2, size=(3, 11))}


def _model(runtime: str):
    tree = formats.read(DISCRIMINATOR)
    if runtime == "torch":
        pytest.importorskip("torch")
        from bertconv.runtime.torch_bert import TorchBert
        return TorchBert(tree)
    return NumpyBert(tree)


def _google_loss(logits: np.ndarray, labels: np.ndarray, mask: np.ndarray) -> tuple[float, np.ndarray]:
    """google-research/electra `_get_discriminator_output`, run by TensorFlow."""
    tf = pytest.importorskip("tensorflow")
    weights = tf.cast(mask, tf.float32)
    losses = tf.nn.sigmoid_cross_entropy_with_logits(logits=tf.constant(logits),
                                                     labels=tf.cast(labels, tf.float32)) * weights
    per_example = tf.reduce_sum(losses, axis=-1) / (1e-6 + tf.reduce_sum(weights, axis=-1))
    return float(tf.reduce_sum(losses) / (1e-6 + tf.reduce_sum(weights))), per_example.numpy()


@pytest.mark.parametrize("runtime", ["numpy", "torch"])
def test_loss_is_googles_on_the_models_logits(batch, runtime):
    model = _model(runtime)
    result = model.replaced_token_loss(batch["ids"], batch["types"], batch["mask"], batch["labels"])
    logits = np.asarray(model(batch["ids"], batch["types"], batch["mask"]).rtd_logits, dtype=np.float32)
    expected, per_example = _google_loss(logits, batch["labels"], batch["mask"])
    assert abs(float(result.loss) - expected) < ATOL
    np.testing.assert_allclose(np.asarray(result.per_example), per_example, atol=ATOL, rtol=0)
    assert np.asarray(result.per_token).shape == (3, 11)


@pytest.mark.parametrize("runtime", ["numpy", "torch"])
@pytest.mark.parametrize("masked", [True, False])
def test_loss_matches_transformers_electra_for_pretraining(batch, runtime, masked):
    torch = pytest.importorskip("torch")
    from transformers import ElectraForPreTraining

    reference = ElectraForPreTraining.from_pretrained(DISCRIMINATOR).eval()
    mask = batch["mask"] if masked else None
    with torch.no_grad():
        out = reference(input_ids=torch.tensor(batch["ids"]), token_type_ids=torch.tensor(batch["types"]),
                        attention_mask=None if mask is None else torch.tensor(mask),
                        labels=torch.tensor(batch["labels"]))
    model = _model(runtime)
    ours = model.replaced_token_loss(batch["ids"], batch["types"], mask, batch["labels"])
    real = batch["mask"].astype(bool) if masked else np.ones_like(batch["mask"], bool)
    logits = np.asarray(model(batch["ids"], batch["types"], mask).rtd_logits)
    np.testing.assert_allclose(logits[real], out.logits.numpy()[real], atol=ATOL, rtol=0)
    # transformers: mean over the attended positions; Google adds 1e-6 to their count.
    tokens = int(real.sum())
    assert abs(float(ours.loss) - float(out.loss)) <= ATOL + float(out.loss) * RTD_LOSS_EPSILON / tokens


def test_padding_is_weighted_out_whatever_its_label():
    logits = np.array([[2.0, -1.0, 0.5]], np.float32)
    mask = np.array([[1, 1, 0]])
    a = replaced_token_loss(logits, np.array([[1, 0, 0]]), mask)
    b = replaced_token_loss(logits, np.array([[1, 0, 1]]), mask)
    assert float(a.loss) == float(b.loss) and a.per_token[0, 2] != b.per_token[0, 2]
    # A batch of padding alone has loss 0, not 0/0.
    assert float(replaced_token_loss(logits, np.zeros((1, 3), int), np.zeros((1, 3), int)).loss) == 0.0


def test_labels_must_be_zero_or_one_and_shaped_like_the_ids(batch):
    model = NumpyBert(formats.read(DISCRIMINATOR))
    with pytest.raises(BadInput, match="only 0"):
        model.replaced_token_loss(batch["ids"], batch["types"], batch["mask"], batch["labels"] * 2)
    with pytest.raises(BadInput, match="shape"):
        model.replaced_token_loss(batch["ids"], batch["types"], batch["mask"], batch["labels"][:, :5])


def test_a_model_without_the_rtd_head_refuses_the_loss(batch):
    with pytest.raises(CheckFailed, match="replaced-token-detection head"):
        NumpyBert(formats.read(GENERATOR)).replaced_token_loss(batch["ids"], batch["types"], batch["mask"],
                                                               batch["labels"])


def test_the_denominator_adds_electras_epsilon():
    """One token of logit 0: log 2 over (1 + 1e-6), in float64 so the epsilon shows."""
    result = replaced_token_loss(np.zeros((1, 1)), np.ones((1, 1), int), np.ones((1, 1), int))
    assert abs(float(result.loss) - np.log(2.0) / (1.0 + 1e-6)) < 1e-15
