"""Relative positions and causal attention in both runtimes (issue 25, items 1 and 5), against
transformers 4.57's logits stored with the fixtures (fixtures/make_relpos_fixtures.py, run in the
oracle environment) and transformers 5's `BertLMHeadModel` run here."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from bertconv import formats
from bertconv.runtime import NumpyBert, TorchBert

from conftest import FIXTURES

RELPOS = FIXTURES / "relpos"
REFERENCE = np.load(RELPOS / "reference.npz")
NAMES = sorted({key.split(":")[0] for key in REFERENCE.files})
#: float32 logits of the same sums in another order: measured at most 2.9e-6 on these fixtures.
TOLERANCE = 1e-5


def feed(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return tuple(REFERENCE[f"{name}:{key}"] for key in ("input_ids", "token_type_ids", "attention_mask"))


def logits(model, name: str) -> np.ndarray:
    value = model(*feed(name)).mlm_logits
    return np.asarray(value.detach() if hasattr(value, "detach") else value)


def test_the_fixtures_cover_every_variant():
    configs = [formats.read(RELPOS / name).config for name in NAMES]
    assert {c.position_embedding_type for c in configs} == {"absolute", "relative_key", "relative_key_query"}
    assert {c.model_type for c in configs if c.relative_positions} == {"bert", "roberta", "electra", "albert"}
    assert any(c.is_decoder and c.relative_positions for c in configs)


@pytest.mark.parametrize("name", NAMES)
def test_numpy_runtime_computes_as_transformers_4(name):
    reference = REFERENCE[f"{name}:logits"]
    assert np.abs(logits(NumpyBert(formats.read(RELPOS / name)), name) - reference).max() <= TOLERANCE


@pytest.mark.parametrize("name", NAMES)
def test_torch_runtime_computes_as_transformers_4(name):
    pytest.importorskip("torch")
    reference = REFERENCE[f"{name}:logits"]
    assert np.abs(logits(TorchBert(formats.read(RELPOS / name)), name) - reference).max() <= TOLERANCE


@pytest.mark.parametrize("name", ["bert_relative_key_query", "bert_causal", "albert_relative_key_query"])
def test_the_attention_fields_change_the_logits(name):
    """The same tensors read as a bidirectional, absolute-position model compute something else
    (so the tests above would fail on a runtime that ignored either field)."""
    tree = formats.read(RELPOS / name)
    plain = dataclasses.replace(tree.config, position_embedding_type="absolute", is_decoder=False)
    tree_plain = dataclasses.replace(tree, config=plain, params={
        name: param for name, param in tree.params.items() if not name.endswith("distance_embedding")})
    difference = np.abs(logits(NumpyBert(tree_plain), name) - REFERENCE[f"{name}:logits"]).max()
    assert difference > 1e-2


def test_a_causal_model_sees_no_later_token():
    """Changing the last token leaves every earlier position's logits as they were."""
    model = NumpyBert(formats.read(RELPOS / "bert_causal_relative_key"))
    ids, types, mask = feed("bert_causal_relative_key")
    changed = ids.copy()
    changed[0, -1] = (ids[0, -1] + 1) % model.config.vocab_size
    before, after = model(ids[:1], types[:1], mask[:1]).mlm_logits, model(changed[:1], types[:1], mask[:1]).mlm_logits
    np.testing.assert_array_equal(before[0, :-1], after[0, :-1])
    assert np.abs(before[0, -1] - after[0, -1]).max() > 1e-3


@pytest.mark.parametrize("runtime", ["numpy", "torch"])
def test_causal_bert_computes_as_transformers_5_lm_head_model(runtime):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    directory = RELPOS / "bert_causal"
    model = transformers.BertLMHeadModel.from_pretrained(directory).eval()
    assert model.config.is_decoder
    ids, types, mask = feed("bert_causal")
    with torch.no_grad():
        theirs = model(input_ids=torch.from_numpy(ids), token_type_ids=torch.from_numpy(types),
                       attention_mask=torch.from_numpy(mask)).logits.numpy()
    ours = logits((NumpyBert if runtime == "numpy" else TorchBert)(formats.read(directory)), "bert_causal")
    assert np.abs(ours - theirs).max() <= TOLERANCE


def test_transformers_5_computes_relative_checkpoints_as_absolute_ones():
    """What the note on an hf output says: transformers 5 loads the tables as unexpected and
    computes an absolute-position BERT, which is another model (checked so the note stays true)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if not transformers.__version__.startswith("5."):
        pytest.skip(f"transformers {transformers.__version__} is not 5")
    directory = RELPOS / "bert_relative_key_query"
    assert json.loads((directory / "config.json").read_text())["position_embedding_type"] == "relative_key_query"
    model, info = transformers.BertForMaskedLM.from_pretrained(directory, output_loading_info=True)
    assert any("distance_embedding" in name for name in info["unexpected_keys"])
    ids, types, mask = feed("bert_relative_key_query")
    with torch.no_grad():
        theirs = model.eval()(input_ids=torch.from_numpy(ids), token_type_ids=torch.from_numpy(types),
                              attention_mask=torch.from_numpy(mask)).logits.numpy()
    assert np.abs(theirs - REFERENCE["bert_relative_key_query:logits"]).max() > 1e-2
