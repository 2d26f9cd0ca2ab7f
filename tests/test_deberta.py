"""DeBERTa-v2/v3 against transformers 5 (fixtures made by it: fixtures/make_deberta_fixtures.py):
both runtimes' logits, the log buckets, the closed form against `num_parameters()`, the two
head layouts (read, noted, written as the default class loads them), DeBERTa-v3's discriminator,
the config keys refused by name, and the formats that cannot hold the model.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from bertconv import formats
from bertconv.errors import BadInput
from bertconv.runtime.disentangled import log_buckets
from bertconv.runtime.numpy_bert import NumpyBert
from conftest import FIXTURES, assert_fill_mask_ranks_as_pipeline, needs, run_in_process

DEBERTA = FIXTURES / "deberta"
V3, V3_LM_PREDICTIONS, DISCRIMINATOR = DEBERTA / "v3" / "masked_lm", DEBERTA / "v3" / "lm_predictions", DEBERTA / "v3" / "discriminator"
V2, V2_MODEL = DEBERTA / "v2" / "masked_lm", DEBERTA / "v2" / "model"
ALL = [V3, V3_LM_PREDICTIONS, DISCRIMINATOR, V2, V2_MODEL]
#: float32 outputs of a 2-layer model: the runtimes measured 1.6e-6 of transformers 5 (logits up to |5.3|).
TOLERANCE = 1e-4
#: 40 tokens: distances up to 39, past the v3 fixture's 8 buckets (log-bucketed beyond 4) and the
#: v2 fixture's max_relative_positions 12 (clamped beyond).
LENGTH = 40


def _ids(value) -> str | None:
    return f"{value.parent.name}-{value.name}" if hasattr(value, "parent") else None


def _batch(tree) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    ids = rng.integers(1, tree.config.vocab_size, size=(2, LENGTH))
    types = rng.integers(0, max(tree.config.type_vocab_size, 1), size=(2, LENGTH))
    attention = np.ones_like(ids)
    attention[1, 30:] = 0
    return ids, types, attention


def _transformers_model(path, **config):
    needs("torch")
    transformers = needs("transformers")
    architectures = json.loads((path / "config.json").read_text()).get("architectures")
    cls = transformers.DebertaV2Model if architectures == ["DebertaV2Model"] else transformers.DebertaV2ForMaskedLM
    loaded = transformers.DebertaV2Config.from_pretrained(path, **config)
    model, info = cls.from_pretrained(path, config=loaded, output_loading_info=True)
    return model.eval(), info


def _reference(path, ids, types, attention, **config) -> np.ndarray:
    torch = needs("torch")
    model, info = _transformers_model(path, **config)
    assert not info["missing_keys"], info
    with torch.no_grad():
        out = model(input_ids=torch.tensor(ids), token_type_ids=torch.tensor(types),
                    attention_mask=torch.tensor(attention))
    return (out.logits if hasattr(out, "logits") else out.last_hidden_state).numpy()


def _loads_intact(path) -> dict:
    """The config that loads `path` with every parameter: its lm_predictions layout needs legacy false."""
    return {"legacy": False} if path in (V3_LM_PREDICTIONS, DISCRIMINATOR) else {}


@pytest.mark.parametrize("path", ALL, ids=_ids)
def test_both_runtimes_compute_transformers_5s_outputs(path):
    tree = formats.read(path)
    ids, types, attention = _batch(tree)
    expected = _reference(path, ids, types, attention, **_loads_intact(path))
    real = attention.astype(bool)  # padding's outputs are never read
    out = NumpyBert(tree)(ids, types, attention)
    got = out.mlm_logits if tree.heads.mlm else out.sequence_output
    assert np.abs(got - expected)[real].max() <= TOLERANCE
    from bertconv.runtime.torch_bert import TorchBert
    out = TorchBert(tree)(ids, types, attention)
    got = (out.mlm_logits if tree.heads.mlm else out.sequence_output).numpy()
    assert np.abs(got - expected)[real].max() <= TOLERANCE


@pytest.mark.parametrize("buckets, max_position", [(256, 512), (8, 64), (8, 6), (256, 1024), (16, 100)])
def test_log_buckets_are_transformers_own(buckets, max_position):
    torch = needs("torch")
    needs("transformers")
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

    distances = np.arange(-5000, 5001)
    expected = make_log_bucket_position(torch.from_numpy(distances), buckets, max_position).long().numpy()
    np.testing.assert_array_equal(log_buckets(distances, buckets, max_position), expected)


@pytest.mark.parametrize("path", ALL, ids=_ids)
def test_closed_form_counts_transformers_parameters(path):
    model, _ = _transformers_model(path, **_loads_intact(path))
    report = json.loads(run_in_process("audit", path, "--json").stdout)
    assert report["ok"], report["problems"]
    assert report["parameters"] == report["expected_parameters"] == model.num_parameters()


@pytest.mark.parametrize("path, layout, intact", [(V3, "cls.predictions.*", True), (V2, "cls.predictions.*", True),
                                                  (V3_LM_PREDICTIONS, "lm_predictions.lm_head.*", True),
                                                  (DISCRIMINATOR, "lm_predictions.lm_head.*", False)], ids=_ids)
def test_verify_names_the_head_layout_and_what_loads_it(path, layout, intact):
    report = json.loads(run_in_process("verify", path, "--json").stdout)
    note = next(note for note in report["notes"] if note.startswith("the MLM head is in"))
    assert f"the MLM head is in the {layout} layout" in note and "DebertaV2ForMaskedLM" in note
    if intact:
        assert "loads intact" in note and "as config.json says" in note
    else:
        assert "newly initialized" in note and 'set "legacy": false' in note
    _, info = _transformers_model(path)  # as transformers 5 loads it with the config beside it
    assert bool(info["missing_keys"]) is not intact


def test_the_discriminator_is_named_and_its_rtd_head_set_aside():
    report = json.loads(run_in_process("verify", DISCRIMINATOR, "--json").stdout)
    assert any("replaced-token-detection discriminator" in note for note in report["notes"])
    tree = formats.read(DISCRIMINATOR)
    aside = sorted(item.name for item in tree.ignored)
    assert aside == sorted(f"mask_predictions.{n}" for n in ("dense.weight", "dense.bias", "LayerNorm.weight",
                                                            "LayerNorm.bias", "classifier.weight", "classifier.bias"))
    assert not any(item.unread for item in tree.ignored) and not tree.heads.rtd and tree.heads.mlm


@pytest.mark.parametrize("path", ALL, ids=_ids)
def test_hf_output_loads_intact_in_the_default_class_with_the_same_outputs(path, tmp_path):
    out = tmp_path / "out"
    result = run_in_process("convert", path, out, "--to", "hf")
    assert result.exit_code == 0, result.stderr
    assert run_in_process("diff", path, out).exit_code == 0
    written = formats.read(out)
    assert not any(note.startswith("the MLM head is in") and "newly initialized" in note for note in written.notes)
    assert written.config.type_vocab_size == formats.read(path).config.type_vocab_size  # no token-type row added
    ids, types, attention = _batch(written)
    np.testing.assert_array_equal(_reference(out, ids, types, attention),
                                  _reference(path, ids, types, attention, **_loads_intact(path)))


@pytest.mark.parametrize("target", ["tf", "bert4keras", "hf-tf", "hf-flax"])  # onnx, keras-hub: test_onnx_deberta, test_keras_hub_deberta
def test_formats_without_the_model_refuse_it(target, tmp_path):
    out = tmp_path / "out"
    result = run_in_process("convert", V3, out, "--to", target)
    assert result.exit_code == 2 and not out.exists()
    assert "would be another model" in result.stderr or "relative_attention" in result.stderr


def _with_config(tmp_path, source, **changes):
    directory = tmp_path / "changed"
    shutil.copytree(source, directory)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, **changes}))
    return directory


def test_the_convolution_of_v2_xlarge_is_refused_by_name(tmp_path):
    directory = _with_config(tmp_path, V2, conv_kernel_size=3, conv_act="gelu")
    result = run_in_process("convert", directory, tmp_path / "out", "--to", "hf")
    assert result.exit_code == 2 and "conv_kernel_size" in result.stderr and not (tmp_path / "out").exists()
    assert run_in_process("audit", directory).exit_code == 0  # read and audited; only computing is refused


@pytest.mark.parametrize("changes, named", [({"embedding_size": 8}, "embedding_size"),
                                            ({"pos_att_type": "p2c|p2p"}, "pos_att_type"),
                                            ({"norm_rel_ebd": "batch_norm"}, "norm_rel_ebd")])
def test_configs_bertconv_does_not_compute_are_refused_on_reading(changes, named, tmp_path):
    with pytest.raises(BadInput, match=named):
        formats.read(_with_config(tmp_path, V3, **changes))


def test_omitted_keys_mean_debertav2configs_defaults(tmp_path):
    directory = tmp_path / "defaults"
    shutil.copytree(V2_MODEL, directory)
    config = json.loads((directory / "config.json").read_text())
    for key in ("layer_norm_eps", "type_vocab_size", "position_biased_input"):
        config.pop(key)
    (directory / "config.json").write_text(json.dumps(config))
    read = formats.read(directory).config
    assert (read.layer_norm_eps, read.type_vocab_size, read.position_biased_input) == (1e-7, 0, True)
    transformers = needs("transformers")
    stated = transformers.DebertaV2Config.from_pretrained(directory)
    assert (stated.layer_norm_eps, stated.type_vocab_size, stated.position_biased_input) == (1e-7, 0, True)


# --- the tokenizer and fill-mask ----------------------------------------------------------------

TEXTS = ("The capital of France is [MASK].", "Zebras  in\tBerlin!!  ", "cats and dogs [MASK] pets",
         "Ünïcode ﬁ café\n\nx", "[CLS] pets [SEP]", " leading space", "")


def test_spm_model_ids_are_transformers_5s():
    transformers = needs("transformers")
    needs("tokenizers")
    from bertconv.runtime.tokenization.select import find, open_tokenizer

    reference = transformers.AutoTokenizer.from_pretrained(V3)
    assert type(reference).__name__ == "DebertaV2Tokenizer"
    ours = open_tokenizer(find(V3))
    assert ours.mask_id == reference.mask_token_id == 50  # after the spm's 50 pieces, as deberta-v3's 128000
    for text in TEXTS:
        assert ours.encode(text).ids == reference(text)["input_ids"], text
    assert ours.encode("the cat", "sat on").ids == reference("the cat", "sat on")["input_ids"]


@pytest.mark.parametrize("settings", [{"do_lower_case": True}, {"split_by_punct": True}, {"add_prefix_space": False}],
                         ids=lambda s: next(iter(s)))
def test_spm_model_settings_are_read_as_transformers_5_reads_them(settings, tmp_path):
    transformers = needs("transformers")
    needs("tokenizers")
    from bertconv.runtime.tokenization.select import open_tokenizer

    directory = tmp_path / "tokenizer"
    directory.mkdir()
    shutil.copy(V3 / "spm.model", directory)
    (directory / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "DebertaV2Tokenizer", **settings}))
    reference = transformers.AutoTokenizer.from_pretrained(directory)
    ours = open_tokenizer(directory / "spm.model")
    for text in TEXTS:
        assert ours.encode(text).ids == reference(text)["input_ids"], (settings, text)


@pytest.mark.parametrize("text", ["The capital of France is [MASK].", "cats and [MASK] are pets"])
def test_fill_mask_ranks_as_transformers_5s_pipeline(text):
    assert_fill_mask_ranks_as_pipeline(V3, text)


def test_terms_named_without_relative_attention_still_scale_the_scores(tmp_path):
    """transformers counts pos_att_type's terms in the scaling, 1 / sqrt(3 D), with relative attention off."""
    directory = _with_config(tmp_path, V2, relative_attention=False)
    tree = formats.read(directory)
    assert tree.config.pos_att_type == ("c2p", "p2c") and not tree.config.relative_attention
    ids, types, attention = _batch(tree)
    expected = _reference(directory, ids, types, attention)
    got = NumpyBert(tree)(ids, types, attention).mlm_logits
    assert np.abs(got - expected)[attention.astype(bool)].max() <= TOLERANCE
    unscaled = _reference(directory, ids, types, attention, pos_att_type=None)
    assert np.abs(unscaled - expected).max() > 1e-2
