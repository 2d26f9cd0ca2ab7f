"""keras-hub's DeBERTa-v3 presets (`DebertaV3MaskedLM`), both ways.

fixtures/keras_hub/deberta_v3 was saved by keras-hub 0.32 itself with its outputs beside it
(fixtures/make_kerashub_fixtures.py); the tests marked `kerashub` load what bertconv writes with
keras-hub 0.32 (.cache/kerashub-venv: tests/kerashub_process.py).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import h5py
import numpy as np
import pytest

from bertconv import formats
from bertconv.checks.audit import audit
from bertconv.conversion import convert
from bertconv.errors import BadInput
from bertconv.formats.keras_hub import deberta as hub_deberta
from bertconv.runtime.disentangled import relative_index
from conftest import FIXTURES, run_in_process
from kerashub_process import kerashub, load, relative_rows
from test_keras_hub import KERAS_HUB, LOGITS_ATOL, PRESET_ATOL, _inputs, bits, masked_logits

PRESET = KERAS_HUB / "deberta_v3"
V3 = FIXTURES / "deberta" / "v3"
#: keras-hub's MaskedLMHead normalizes with 1e-5 where transformers' DeBERTa head takes layer_norm_eps (1e-7).
HEAD = ("mlm_layer_norm_eps",)
#: What keras-hub loads: transformers' two head layouts, and keras-hub's own preset through transformers.
SOURCES = {"hf-cls-predictions": V3 / "masked_lm", "hf-lm-predictions": V3 / "lm_predictions",
           "keras-hub-through-hf": None}
#: (bucket_size, max_sequence_length): DeBERTa-v3's own (256, 512), and settings where keras-hub
#: rounds a far bucket apart.
BUCKET_CASES = [(256, 512), (128, 256), (64, 512), (4, 16)]


def _datasets(path: Path) -> dict[str, np.ndarray]:
    found = {}
    with h5py.File(path) as f:
        f.visititems(lambda n, o: found.update({n: o[()]}) if isinstance(o, h5py.Dataset) and "optimizer" not in n
                     else None)
    return found


# --- reading what keras-hub saved -----------------------------------------------------------------


def test_the_preset_is_read_with_what_keras_hub_computes():
    tree = formats.read(PRESET)
    config = tree.config
    assert config.model_type == "deberta-v2" and tree.heads.mlm
    assert (config.relative_attention, config.share_att_key, config.relative_embedding_norm,
            config.position_biased_input, config.pos_att_type) == (True, True, True, False, ("c2p", "p2c"))
    assert (config.position_buckets, config.max_relative_positions, config.max_position_embeddings) == (4, 16, 16)
    assert (config.hidden_act, config.layer_norm_eps, config.mlm_layer_norm_eps, config.type_vocab_size) == \
        ("gelu", 1e-7, 1e-5, 0)
    report = audit(tree)
    assert report["ok"], report["problems"]
    metadata = json.loads((PRESET / "metadata.json").read_text())["parameter_count"]
    assert report["parameters"] == metadata + sum(p.numel for p in tree if p.name.startswith("mlm."))


def test_logits_equal_keras_hubs_own():
    """Measured: 1.4e-6 on logits of magnitude 2.6 (7 tokens, bucket_size 4: log buckets reached)."""
    tree = formats.read(PRESET)
    inputs = dict(np.load(PRESET / "inputs.npz"))
    reference = dict(np.load(PRESET / "logits.npz"))
    ours = masked_logits(tree, inputs)
    valid = inputs["padding_mask"].astype(bool)
    np.testing.assert_allclose(ours["sequence_output"][valid], reference["sequence_output"][valid], atol=LOGITS_ATOL)
    np.testing.assert_allclose(ours["mlm_logits"], reference["mlm_logits"], atol=LOGITS_ATOL)


def test_round_trip_through_hugging_face_keeps_every_stored_value(tmp_path):
    tree = formats.read(PRESET)
    convert(tree, tmp_path / "hf", "hf", accept_loss=HEAD)
    hf = formats.read(tmp_path / "hf")
    for param in tree:
        assert np.array_equal(bits(hf[param.name].tensor.read()), bits(param.tensor.read())), param.name
    convert(hf, tmp_path / "kh", "keras-hub", accept_loss=HEAD)
    for file in ("model.weights.h5", "task.weights.h5"):
        source, written = _datasets(PRESET / file), _datasets(tmp_path / "kh" / file)
        assert set(source) <= set(written), file
        for name, values in source.items():
            assert np.array_equal(bits(values), bits(written[name])), (file, name)
    assert formats.read(tmp_path / "kh").config == tree.config
    spm = (PRESET / "assets" / "tokenizer" / "vocabulary.spm").read_bytes()
    assert (tmp_path / "kh" / "assets" / "tokenizer" / "vocabulary.spm").read_bytes() == spm


# --- what keras-hub cannot hold -------------------------------------------------------------------


def test_a_deberta_v2_with_position_projections_is_refused_naming_the_field(tmp_path):
    result = run_in_process("convert", FIXTURES / "deberta" / "v2" / "masked_lm", tmp_path / "out", "--to", "keras-hub",
                     "--accept-loss", "mlm_layer_norm_eps", "--accept-loss", "hidden_act")
    assert result.exit_code == 2 and "share_att_key" in result.stderr and "DebertaV3Backbone" in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("field, value", [("relative_embedding_norm", False), ("position_biased_input", True),
                                          ("relative_attention", False), ("position_buckets", 0)])
def test_what_the_backbone_has_no_place_for_is_refused(field, value, tmp_path):
    tree = formats.read(V3 / "masked_lm")
    changed = replace(tree, config=replace(tree.config, **{field: value}))
    with pytest.raises(BadInput, match=field):
        formats.TARGETS["keras-hub"].write(changed, tmp_path / "out", options=None)


@pytest.mark.parametrize("key, value, field", [("pos_att_type", "c2p", "pos_att_type"),
                                               ("max_relative_positions", 32, "max_relative_positions")])
def test_a_computation_keras_hub_fixes_otherwise_is_refused_unless_accepted(key, value, field, tmp_path):
    source = Path(shutil.copytree(V3 / "masked_lm", tmp_path / "source"))
    config = json.loads((source / "config.json").read_text())
    config[key] = value
    (source / "config.json").write_text(json.dumps(config))
    refused = run_in_process("convert", source, tmp_path / "out", "--to", "keras-hub",
                             "--accept-loss", "mlm_layer_norm_eps")
    assert refused.exit_code == 2 and field in refused.stderr and not (tmp_path / "out").exists()
    accepted = run_in_process("convert", source, tmp_path / "out", "--to", "keras-hub",
                              "--accept-loss", "mlm_layer_norm_eps", "--accept-loss", field)
    assert accepted.exit_code == 0 and f"accepted loss: {field}" in accepted.stdout + accepted.stderr


def test_far_buckets_keras_hub_rounds_apart_are_noted():
    tree = formats.read(PRESET)
    assert hub_deberta.caveats(tree) == []
    wider = replace(tree.config, position_buckets=128, max_relative_positions=256, max_position_embeddings=256)
    notes = hub_deberta.caveats(replace(tree, config=wider))
    assert len(notes) == 1 and "-255" in notes[0]


# --- keras-hub loads what bertconv writes ----------------------------------------------------------


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """Each source written as a preset, and keras-hub's loading of it."""
    root = tmp_path_factory.mktemp("deberta")
    out = {}
    for name, source in SOURCES.items():
        if source is None:
            convert(formats.read(PRESET), root / f"{name}-hf", "hf", accept_loss=HEAD)
            source = root / f"{name}-hf"
        tree = formats.read(source)
        result = convert(tree, root / name, "keras-hub", accept_loss=HEAD)
        if name == "keras-hub-through-hf":
            tree = formats.read(PRESET)
        inputs = _inputs(tree.config.vocab_size)
        np.savez(root / f"{name}-inputs.npz", **inputs)
        info, outputs = load(root / name, root / f"{name}-inputs.npz", root / f"{name}-out.npz")
        out[name] = {"source": tree, "written": formats.read(root / name), "inputs": inputs, "notes": result.notes,
                     "info": info, "outputs": outputs}
    return out


@pytest.fixture(scope="module")
def keras_hub_rows(tmp_path_factory) -> dict[str, np.ndarray]:
    """keras-hub's relative-position rows for each of `BUCKET_CASES`."""
    return relative_rows(BUCKET_CASES, tmp_path_factory.mktemp("buckets") / "buckets.npz")


@kerashub
@pytest.mark.parametrize("name", list(SOURCES))
def test_keras_hub_loads_the_preset_with_its_head(loaded, name):
    """Every weight loads, and keras-hub's logits are bertconv's on the written preset and on the
    source with the head's epsilon the preset has (the loss accepted: transformers' 1e-7, keras-hub's
    1e-5, which alone moves the logits by up to 1.2e-4). Measured: 1.4e-6 on logits of magnitude 5."""
    case = loaded[name]
    source, written, inputs, info, outputs = (case[k] for k in ("source", "written", "inputs", "info", "outputs"))
    assert info["class"] == "DebertaV3MaskedLM" and info["parameters"] == audit(written)["parameters"]
    if name != "hf-lm-predictions":  # the fixture without spm.model has no tokenizer
        assert info["preprocessor"] == "DebertaV3MaskedLMPreprocessor" and info["vocabulary_size"] is not None
    embeddings = next(v for k, v in outputs.items() if k.endswith("token_embedding/embeddings"))
    assert np.array_equal(bits(embeddings), bits(source["embeddings.word"].tensor.read()))
    np.testing.assert_allclose(outputs["mlm_logits"], masked_logits(written, inputs)["mlm_logits"], atol=PRESET_ATOL)
    accepted = replace(source, config=replace(source.config, mlm_layer_norm_eps=written.config.mlm_layer_norm_eps))
    np.testing.assert_allclose(outputs["mlm_logits"], masked_logits(accepted, inputs)["mlm_logits"], atol=PRESET_ATOL)


@kerashub
@pytest.mark.parametrize("case", [f"{b}_{s}" for b, s in BUCKET_CASES])
def test_relative_rows_are_keras_hubs(keras_hub_rows, case):
    """`keras_hub_index` is keras-hub's own arithmetic; bertconv's runtime (transformers') reads
    the same rows except where `caveats` names the distances."""
    buckets, length = map(int, case.split("_"))
    theirs = keras_hub_rows[case]
    assert np.array_equal(hub_deberta.keras_hub_index(length, buckets, length), theirs)
    config = replace(formats.read(PRESET).config, position_buckets=buckets, max_relative_positions=length,
                     max_position_embeddings=length)
    differ = relative_index(config, length) != theirs
    assert differ.any() == (case in ("128_256", "64_512"))
