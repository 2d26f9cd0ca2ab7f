"""A DistilBERT converted --to tf and --to bert4keras is written as the BERT that computes the same
(bertconv/conversion.py): checked by bert4keras itself, which builds that BERT from the Google TF
checkpoint or loads the bert4keras weights file, against transformers' DistilBERT on the source.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from bertconv import formats
from bertconv.checks.diff import diff
from bertconv.conversion import convert
from bertconv.formats.keras import bert4keras_write
from bertconv.runtime import NumpyBert
from conftest import FIXTURES, run_in_process
from test_hf_tf_flax_families import FLAX, TF

os.environ.setdefault("TF_KERAS", "1")  # bert4keras on tf.keras, as its fixtures are made
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# bert4keras hands one TruncatedNormal instance to every layer; tf-keras warns about it each time.
pytestmark = pytest.mark.filterwarnings("ignore:The initializer TruncatedNormal is unseeded:UserWarning")

#: (the DistilBERT, its PyTorch files transformers loads): transformers 5's own, and 4.57's TF and
#: Flax files beside 4.57's own conversion of them to PyTorch.
SOURCES = [(FIXTURES / "family_hf" / "distilbert" / "masked_lm",) * 2,
           (FIXTURES / "family_hf" / "distilbert" / "sinusoidal",) * 2,
           (TF / "distilbert" / "masked_lm", TF / "distilbert" / "masked_lm" / "pt"),
           (FLAX / "distilbert" / "masked_lm", FLAX / "distilbert" / "masked_lm" / "pt")]
#: bert4keras (TensorFlow, float32) against transformers (torch, float32), on logits of order 1.
ATOL = 1e-5


def inputs(vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Token ids (no 0: bert4keras masks token 0) and token types of both kinds, which DistilBERT
    ignores and its BERT's all-zero rows add nothing for."""
    rng = np.random.default_rng(11)
    return rng.integers(1, vocab_size, size=(2, 9)), rng.integers(0, 2, size=(2, 9))


def distilbert_logits(directory, tokens) -> np.ndarray:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = transformers.DistilBertForMaskedLM.from_pretrained(directory).float().eval()
    with torch.no_grad():
        ids = torch.from_numpy(tokens)
        return model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.numpy()


def bert4keras_logits(config_path, tokens, segments, *, checkpoint=None, weights=None) -> np.ndarray:
    pytest.importorskip("tensorflow")
    pytest.importorskip("bert4keras")
    from bert4keras.models import build_transformer_model

    model = build_transformer_model(str(config_path), None if checkpoint is None else str(checkpoint),
                                    with_mlm="linear")
    if weights is not None:
        model.load_weights(str(weights))
    # predict's computation, called eagerly: no tf.function traced per model
    return np.asarray(model([tokens, segments], training=False))


@pytest.mark.parametrize("source, pytorch", SOURCES, ids=lambda p: "-".join(p.parts[-3:]))
def test_the_bert_written_computes_the_distilberts_logits_in_bert4keras(tmp_path, source, pytorch):
    tree = formats.read(source)
    tokens, segments = inputs(tree.config.vocab_size)
    expected = distilbert_logits(pytorch, tokens)
    convert(tree, tmp_path / "tf", "tf")
    convert(tree, tmp_path / "b4k", "bert4keras")
    from_tf = bert4keras_logits(tmp_path / "tf" / "bert_config.json", tokens, segments,
                                checkpoint=tmp_path / "tf" / "bert_model.ckpt")
    from_b4k = bert4keras_logits(tmp_path / "b4k" / "bert_config.json", tokens, segments,
                                 weights=tmp_path / "b4k" / bert4keras_write.WEIGHTS_FILE)
    assert np.abs(from_tf - expected).max() <= ATOL
    assert np.abs(from_b4k - expected).max() <= ATOL


@pytest.mark.parametrize("target", ["tf", "bert4keras"])
@pytest.mark.parametrize("source, pytorch", SOURCES[:2], ids=lambda p: "-".join(p.parts[-3:]))
def test_the_bert_read_back_is_the_distilbert_under_bert_names(tmp_path, source, pytorch, target):
    """The same tensors bit for bit, BERT's model type, two all-zero token-type rows, no pooler; our
    runtime on the re-read file computes transformers' DistilBERT logits."""
    tree = formats.read(source)
    result = convert(tree, tmp_path / "out", target)
    assert any("the BERT that computes the same" in note for note in result.notes)
    written = formats.read(tmp_path / "out")
    assert written.config.model_type == "bert" and written.config.type_vocab_size == 2
    assert not written.heads.pooler and written.heads.mlm and not written.heads.nsp
    assert not written["embeddings.token_type"].tensor.read().any()
    assert sorted(set(written.params) - set(tree.params)) == ["embeddings.token_type"]
    for param in tree:
        assert np.array_equal(param.tensor.read(), written[param.name].tensor.read()), param.name
    assert not diff(tree, written)["identical"]  # the model types differ: diff says so
    tokens, segments = inputs(tree.config.vocab_size)
    ours = NumpyBert(written)(tokens, segments, np.ones_like(tokens)).mlm_logits
    assert np.abs(ours - distilbert_logits(pytorch, tokens)).max() <= ATOL
    config = json.loads(next((tmp_path / "out").glob("*config.json")).read_text())
    assert config["type_vocab_size"] == 2 and "model_type" not in config


def test_every_target_now_writes_a_distilbert_and_a_refusal_still_names_the_targets_that_do(tmp_path):
    """Since keras-hub writes DistilBERT presets, no target refuses a DistilBERT: each either holds
    its names or writes it as the BERT that computes the same. A family a target cannot hold is
    still refused naming the targets that can (here ESM-2, whose positions are computed)."""
    from bertconv import formats

    assert all("distilbert" in fmt.families or name in ("tf", "bert4keras") for name, fmt in formats.TARGETS.items())
    result = run_in_process("convert", FIXTURES / "prenorm" / "esm" / "masked_lm", tmp_path / "out",
                            "--to", "keras-hub")
    assert result.exit_code == 2 and "convert it --to hf or --to onnx" in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()
