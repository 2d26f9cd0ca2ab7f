"""keras-hub presets (keras-hub): read, convert both ways, refuse bad input.

The fixtures (fixtures/make_kerashub_fixtures.py) were saved by keras-hub 0.32 itself, with its
own outputs beside them (`logits.npz`); those need no oracle at test time. The tests marked
`kerashub` load what bertconv writes with keras-hub 0.32 (.cache/kerashub-venv, `make kerashub`)
and skip when that environment is absent.
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
from bertconv.formats.keras_hub import preset as keras_hub
from bertconv.runtime.numpy_bert import NumpyBert
from conftest import FIXTURES, run_in_process
from kerashub_process import kerashub, load

KERAS_HUB = FIXTURES / "keras_hub"
PRESETS = ["bert", "albert", "bert_backbone"]
#: Saved by keras-hub 0.32: the families beyond BERT's, each with its model type.
OTHER_PRESETS = {"roberta": "roberta", "xlm_roberta": "xlm-roberta", "distil_bert": "distilbert",
                 "electra_backbone": "electra"}
#: bertconv's NumPy runtime against keras-hub's own outputs on the fixtures: measured 7.2e-7.
LOGITS_ATOL = 1e-5
#: Written presets loaded by keras-hub against bertconv's runtime on the same files (the issue's bound).
PRESET_ATOL = 1e-4
#: The fields keras-hub's code fixes otherwise than transformers' configs (the head's own).
HEAD_FIELDS = ("--accept-loss", "mlm_hidden_act", "--accept-loss", "mlm_layer_norm_eps")


def masked_logits(tree, inputs) -> dict[str, np.ndarray]:
    segments = inputs["segment_ids"] if tree.config.type_vocab_size > 1 else None
    output = NumpyBert(tree)(inputs["token_ids"], segments, inputs["padding_mask"])
    found = {"sequence_output": output.sequence_output}
    if output.mlm_logits is not None:
        found["mlm_logits"] = np.take_along_axis(output.mlm_logits, inputs["mask_positions"][..., None], axis=1)
    return found


def bits(array) -> np.ndarray:
    array = np.asarray(array)
    return array.view(f"<u{array.dtype.itemsize}")


# --- reading --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PRESETS)
def test_preset_is_read_with_the_family_and_its_fixed_numerics(name):
    tree = formats.read(KERAS_HUB / name)
    assert tree.format == keras_hub.FORMAT
    assert tree.config.model_type == ("albert" if name == "albert" else "bert")
    assert tree.config.hidden_act == "gelu_tanh" and tree.config.layer_norm_eps == 1e-12
    assert tree.config.mlm_layer_norm_eps == (None if name == "bert_backbone" else 1e-5)
    assert tree.config.mlm_hidden_act == ("gelu" if name == "bert" else None)
    assert tree.heads.mlm == (name != "bert_backbone") and tree.heads.pooler


@pytest.mark.parametrize("name", PRESETS)
def test_audit_counts_what_keras_hub_counts(name):
    report = audit(formats.read(KERAS_HUB / name))
    assert report["ok"], report["problems"]
    backbone = json.loads((KERAS_HUB / name / "metadata.json").read_text())["parameter_count"]
    tree = formats.read(KERAS_HUB / name)
    head = sum(p.numel for p in tree if p.name.startswith("mlm."))
    assert report["parameters"] == backbone + head


@pytest.mark.parametrize("name", list(OTHER_PRESETS))
def test_other_families_are_read_with_their_numerics(name):
    """RoBERTa's positions gain the two rows before the padding index, and its one all-zero
    token type: keras-hub's count plus 3 H, those rows being zeros."""
    tree = formats.read(KERAS_HUB / name)
    assert tree.config.model_type == OTHER_PRESETS[name]
    report = audit(tree)
    assert report["ok"], report["problems"]
    metadata = json.loads((KERAS_HUB / name / "metadata.json").read_text())["parameter_count"]
    head = sum(p.numel for p in tree if p.name.startswith("mlm."))
    added = 3 * tree.config.hidden_size if name in ("roberta", "xlm_roberta") else 0
    assert report["parameters"] == metadata + head + added
    if added:
        assert tree.config.position_offset == 2 and tree.config.type_vocab_size == 1
        assert not tree["embeddings.position"].tensor.read()[:2].any()
        assert not tree["embeddings.token_type"].tensor.read().any()
    expected = {"roberta": ("gelu", 1e-5, None, None), "xlm_roberta": ("gelu", 1e-5, None, None),
                "distil_bert": ("gelu", 1e-12, None, 1e-5), "electra_backbone": ("gelu_tanh", 1e-12, None, None)}
    config = tree.config
    assert (config.hidden_act, config.layer_norm_eps, config.mlm_hidden_act, config.mlm_layer_norm_eps) == expected[name]
    assert tree.heads.mlm == (name != "electra_backbone") and tree.heads.pooler == (name == "electra_backbone")


@pytest.mark.parametrize("name", PRESETS + list(OTHER_PRESETS))
def test_logits_equal_keras_hubs_own(name):
    tree = formats.read(KERAS_HUB / name)
    inputs = dict(np.load(KERAS_HUB / name / "inputs.npz"))
    reference = dict(np.load(KERAS_HUB / name / "logits.npz"))
    ours = masked_logits(tree, inputs)
    valid = inputs["padding_mask"].astype(bool)
    np.testing.assert_allclose(ours["sequence_output"][valid], reference["sequence_output"][valid], atol=LOGITS_ATOL)
    if "mlm_logits" in reference:
        np.testing.assert_allclose(ours["mlm_logits"], reference["mlm_logits"], atol=LOGITS_ATOL)


def test_the_heads_own_numerics_are_what_keras_hub_computes():
    """Computed with the encoder's activation and epsilon, BERT's head misses keras-hub's logits
    (by 5.3e-4 on this fixture, 700 times the runtime's own 7.2e-7)."""
    tree = formats.read(KERAS_HUB / "bert")
    inputs = dict(np.load(KERAS_HUB / "bert" / "inputs.npz"))
    reference = np.load(KERAS_HUB / "bert" / "logits.npz")["mlm_logits"]
    plain = replace(tree, config=replace(tree.config, mlm_hidden_act=None, mlm_layer_norm_eps=None))
    assert np.abs(masked_logits(plain, inputs)["mlm_logits"] - reference).max() > 10 * LOGITS_ATOL


# --- converting to every other format ---------------------------------------------------------


def _targets(tree) -> list[str]:
    return [name for name, fmt in formats.TARGETS.items() if tree.config.model_type in fmt.families
            and name != "keras-hub" and fmt.check_written is None]  # an export computes the head as stated


@pytest.mark.parametrize("name", ["bert", "albert"])
def test_converts_to_every_other_format_bit_exact(name, tmp_path):
    tree = formats.read(KERAS_HUB / name)
    for target in _targets(tree):
        destination = tmp_path / target
        with pytest.raises(BadInput) as refused:
            convert(tree, destination, target)
        assert not destination.exists()
        if "mlm_layer_norm_eps" not in str(refused.value):  # the target cannot hold this model at all
            continue
        convert(tree, destination, target, accept_loss=("mlm_hidden_act", "mlm_layer_norm_eps"))
        output = formats.read(destination)
        for param in tree:
            if tree.is_counted(param.name):
                assert np.array_equal(bits(output[param.name].tensor.read()), bits(param.tensor.read())), \
                    (target, param.name)


@pytest.mark.parametrize("name", ["roberta", "xlm_roberta", "distil_bert"])
def test_other_families_convert_to_hugging_face_and_back_bit_exact(name, tmp_path):
    """Every stored value of the preset reaches transformers' files and comes back the same bits;
    RoBERTa's rows before the padding index and its token type are the zeros read."""
    source = KERAS_HUB / name
    tree = formats.read(source)
    accept = ("mlm_layer_norm_eps",) if name == "distil_bert" else ()
    convert(tree, tmp_path / "hf", "hf", accept_loss=accept)
    hf = formats.read(tmp_path / "hf")
    for param in tree:
        if tree.is_counted(param.name):
            assert np.array_equal(bits(hf[param.name].tensor.read()), bits(param.tensor.read())), param.name
    result = convert(hf, tmp_path / "kh", "keras-hub", accept_loss=accept)
    for file in ("model.weights.h5", "task.weights.h5"):
        with h5py.File(source / file) as a, h5py.File(tmp_path / "kh" / file) as b:
            stored = []
            a.visititems(lambda n, o: stored.append(n) if isinstance(o, h5py.Dataset) and "optimizer" not in n else None)
            for dataset in stored:
                assert np.array_equal(bits(a[dataset][()]), bits(b[dataset][()])), (file, dataset)
    assert formats.read(tmp_path / "kh").config == tree.config
    assert not any("token-type row" in note for note in result.notes)  # all zeros: copied, not added


def test_a_roberta_token_type_is_added_to_the_positions(tmp_path):
    """transformers' RoBERTa adds its one token-type row to every token; keras-hub's has none, so
    the preset's position rows are the source's from row 2 plus that row, and the masked
    logits keep within the float32 rounding of the two sums' order."""
    source = _roberta_with_bpe(tmp_path)
    tree = formats.read(source)
    assert tree["embeddings.token_type"].tensor.read().any()
    result = convert(tree, tmp_path / "kh", "keras-hub")
    assert any("token-type row" in note for note in result.notes)
    written = formats.read(tmp_path / "kh")
    positions = tree["embeddings.position"].tensor.read()
    expected = positions[2:] + tree["embeddings.token_type"].tensor.read()[0]
    assert np.array_equal(written["embeddings.position"].tensor.read()[2:], expected)
    inputs = _inputs(tree.config.vocab_size, low=3)
    ours, theirs = masked_logits(tree, inputs), masked_logits(written, inputs)
    np.testing.assert_allclose(theirs["mlm_logits"], ours["mlm_logits"], atol=LOGITS_ATOL)


def test_a_bpe_vocabulary_without_its_merges_is_refused(tmp_path):
    source = _roberta_with_bpe(tmp_path)
    (source / "merges.txt").unlink()
    result = run_in_process("convert", source, tmp_path / "out", "--to", "keras-hub")
    assert result.exit_code == 2 and "vocab.json" in result.stderr and "merges.txt" in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_roberta_with_two_token_types_is_refused(tmp_path):
    tree = formats.read(_roberta_with_bpe(tmp_path))
    wider = replace(tree, config=replace(tree.config, type_vocab_size=2))
    with pytest.raises(BadInput, match="2 token types"):
        formats.TARGETS["keras-hub"].write(wider, tmp_path / "out", options=None)


def _roberta_with_bpe(tmp_path: Path) -> Path:
    """transformers' RoBERTa fixture with the byte-level BPE files keras-hub's tokenizer takes."""
    source = Path(shutil.copytree(FIXTURES / "family_hf" / "roberta" / "masked_lm", tmp_path / "roberta"))
    (source / "tokenizer.json").unlink()
    for name in ("vocab.json", "merges.txt"):
        shutil.copyfile(FIXTURES / "tokenizers" / "roberta_bpe" / name, source / name)
    return source


def _inputs(vocab: int, *, low: int = 0) -> dict[str, np.ndarray]:
    """Two right-padded sequences of 6 with masked positions (ids from `low`: above RoBERTa's pad id)."""
    rng = np.random.default_rng(0)
    return {"token_ids": rng.integers(low, vocab, (2, 6)).astype("int32"),
            "segment_ids": np.array([[0, 0, 0, 1, 1, 1]] * 2, dtype="int32"),
            "padding_mask": np.array([[1] * 6, [1, 1, 1, 1, 0, 0]], dtype="int32"),
            "mask_positions": np.array([[1, 4], [0, 2]], dtype="int32")}


def test_vocabulary_travels_to_hugging_face_and_back(tmp_path):
    convert(formats.read(KERAS_HUB / "bert"), tmp_path / "hf", "hf", accept_loss=("mlm_hidden_act", "mlm_layer_norm_eps"))
    vocab = (KERAS_HUB / "bert" / "assets" / "tokenizer" / "vocabulary.txt").read_bytes()
    assert (tmp_path / "hf" / "vocab.txt").read_bytes() == vocab
    assert not (tmp_path / "hf" / "tokenizer.json").exists()  # keras-hub's, not a Hugging Face tokenizer
    convert(formats.read(tmp_path / "hf"), tmp_path / "kh", "keras-hub",
            accept_loss=("mlm_hidden_act", "mlm_layer_norm_eps"))
    assert (tmp_path / "kh" / "assets" / "tokenizer" / "vocabulary.txt").read_bytes() == vocab


@pytest.mark.parametrize("name", ["bert", "albert", "bert_backbone"])
def test_round_trip_through_hugging_face_keeps_every_stored_value(name, tmp_path):
    source = KERAS_HUB / name
    convert(formats.read(source), tmp_path / "hf", "hf", accept_loss=("mlm_hidden_act", "mlm_layer_norm_eps"))
    convert(formats.read(tmp_path / "hf"), tmp_path / "kh", "keras-hub",
            accept_loss=("mlm_hidden_act", "mlm_layer_norm_eps"))
    for file in ("model.weights.h5", "task.weights.h5"):
        if not (source / file).exists():
            assert not (tmp_path / "kh" / file).exists()
            continue
        with h5py.File(source / file) as a, h5py.File(tmp_path / "kh" / file) as b:
            stored = []
            a.visititems(lambda n, o: stored.append(n) if isinstance(o, h5py.Dataset) and "optimizer" not in n else None)
            for dataset in stored:
                assert np.array_equal(bits(a[dataset][()]), bits(b[dataset][()])), (file, dataset)
    assert formats.read(tmp_path / "kh").config == formats.read(source).config


# --- refusals -----------------------------------------------------------------------------------


def _copy(name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(KERAS_HUB / name, tmp_path / name))


def test_unknown_backbone_key_is_refused_naming_it(tmp_path):
    preset = _copy("bert", tmp_path)
    config = json.loads((preset / "config.json").read_text())
    config["config"]["rotary_max_wavelength"] = 10000
    (preset / "config.json").write_text(json.dumps(config))
    result = run_in_process("audit", preset)
    assert result.exit_code == 2
    assert "config.json" in result.stderr and "rotary_max_wavelength" in result.stderr


def test_a_head_tensor_of_the_wrong_shape_is_refused_naming_it(tmp_path):
    preset = _copy("bert", tmp_path)
    with h5py.File(preset / "model.weights.h5", "r+") as f:
        name = "layers/transformer_encoder_1/_self_attention_layer/query_dense/vars/0"
        del f[name]
        f[name] = np.zeros((8, 4, 2), dtype="float32")
    result = run_in_process("audit", preset)
    assert result.exit_code == 2
    assert "model.weights.h5" in result.stderr and "query_dense/vars/0" in result.stderr and "[8, 2, 4]" in result.stderr


def test_a_mixed_precision_policy_is_refused(tmp_path):
    preset = _copy("bert", tmp_path)
    config = json.loads((preset / "config.json").read_text())
    config["config"]["dtype"]["config"]["name"] = "mixed_float16"
    (preset / "config.json").write_text(json.dumps(config))
    result = run_in_process("audit", preset)
    assert result.exit_code == 2 and "mixed_float16" in result.stderr


def test_a_next_sentence_head_is_refused_unless_its_loss_is_accepted(tmp_path):
    result = run_in_process("convert", FIXTURES / "hf" / "pretraining", tmp_path / "out", "--to", "keras-hub",
                            *HEAD_FIELDS, "--accept-loss", "hidden_act")
    assert result.exit_code == 2 and "--accept-loss nsp" in result.stderr
    assert not (tmp_path / "out").exists()
    accepted = convert(formats.read(FIXTURES / "hf" / "pretraining"), tmp_path / "out", "keras-hub",
                       accept_loss=("hidden_act", "mlm_hidden_act", "mlm_layer_norm_eps", "nsp"))
    assert sorted(i.name for i in accepted.ignored) == ["cls.seq_relationship.bias", "cls.seq_relationship.weight"]
    assert formats.read(tmp_path / "out").heads.mlm and not formats.read(tmp_path / "out").heads.nsp


def test_head_numerics_are_refused_unless_accepted(tmp_path):
    result = run_in_process("convert", FIXTURES / "family_hf" / "albert" / "masked_lm", tmp_path / "out",
                            "--to", "keras-hub")
    assert result.exit_code == 2 and "mlm_layer_norm_eps" in result.stderr
    assert not (tmp_path / "out").exists()


# --- keras-hub loads what bertconv writes -------------------------------------------------------


#: Each source with the fields keras-hub's code computes otherwise (accepted by name): BERT's and
#: ELECTRA's tanh GELU (transformers': erf), the MLM head's epsilon 1e-5 (and BERT's erf GELU head).
SOURCES = {"bert-from-hf": (FIXTURES / "hf" / "masked_lm", HEAD_FIELDS + ("--accept-loss", "hidden_act")),
           # BertForPreTraining: its next-sentence head, which keras-hub has no place for, left out by name
           "bert-pretraining-from-hf": (FIXTURES / "hf" / "pretraining",
                                        HEAD_FIELDS + ("--accept-loss", "hidden_act", "--accept-loss", "nsp")),
           "albert-from-hf": (FIXTURES / "family_hf" / "albert" / "masked_lm", HEAD_FIELDS),
           "bert-from-keras-hub": (KERAS_HUB / "bert", HEAD_FIELDS),
           "albert-from-keras-hub": (KERAS_HUB / "albert", HEAD_FIELDS),
           "roberta-from-hf": (None, ()),
           "xlm-roberta-from-hf": (FIXTURES / "family_hf" / "xlm_roberta" / "masked_lm", ()),
           "distilbert-from-hf": (FIXTURES / "family_hf" / "distilbert" / "masked_lm",
                                  ("--accept-loss", "mlm_layer_norm_eps")),
           "roberta-from-keras-hub": (KERAS_HUB / "roberta", ()),
           "distilbert-from-keras-hub": (KERAS_HUB / "distil_bert", ("--accept-loss", "mlm_layer_norm_eps"))}


@kerashub
@pytest.mark.parametrize("source, accept", list(SOURCES.values()), ids=list(SOURCES))
def test_keras_hub_loads_the_preset_with_its_head(source, accept, tmp_path):
    """Written from a Hugging Face model (and from a preset, through Hugging Face), the preset
    loads in keras-hub's masked-LM task with every weight bit for bit and the outputs that
    bertconv computes for it: the source's own, where keras-hub computes as the source does."""
    source = source or _roberta_with_bpe(tmp_path)
    hf = tmp_path / "hf"
    if source.parent == KERAS_HUB:
        convert(formats.read(source), hf, "hf", accept_loss=tuple(accept[1::2]))
        source = hf
    tree = formats.read(source)
    if accept:
        without = accept[:-2]  # all but the last field accepted: refused, naming it
        refused = run_in_process("convert", source, tmp_path / "refused", "--to", "keras-hub", *without)
        assert refused.exit_code == 2 and accept[-1] in refused.stderr and not (tmp_path / "refused").exists()
    result = run_in_process("convert", source, tmp_path / "preset", "--to", "keras-hub", *accept)
    assert result.exit_code == 0, result.stderr
    written = formats.read(tmp_path / "preset")
    inputs = _inputs(tree.config.vocab_size, low=3 if tree.config.position_offset else 0)
    np.savez(tmp_path / "inputs.npz", **inputs)
    info, loaded = load(tmp_path / "preset", tmp_path / "inputs.npz", tmp_path / "oracle.npz")
    assert info["class"].endswith("MaskedLM")
    assert info["parameters"] + 3 * tree.config.hidden_size * bool(tree.config.position_offset) \
        == audit(written)["parameters"]
    tokenizer_files = {"bert": "vocab.txt", "distilbert": "vocab.txt", "roberta": "merges.txt",
                       "xlm-roberta": "sentencepiece.bpe.model"}
    if (source / tokenizer_files.get(tree.config.model_type, "vocab.txt")).exists():
        assert info["preprocessor"].endswith("MaskedLMPreprocessor") and info["vocabulary_size"] is not None
    embeddings = next(v for k, v in loaded.items() if k.endswith("token_embedding/embeddings"))
    assert np.array_equal(bits(embeddings), bits(tree["embeddings.word"].tensor.read()))
    ours = masked_logits(written, inputs)
    np.testing.assert_allclose(loaded["mlm_logits"], ours["mlm_logits"], atol=PRESET_ATOL)
    if not accept:
        np.testing.assert_allclose(loaded["mlm_logits"], masked_logits(tree, inputs)["mlm_logits"], atol=PRESET_ATOL)


def test_an_onnx_export_computes_the_head_as_keras_hub_does(tmp_path):
    """The head's own activation and epsilon (mlm_hidden_act, mlm_layer_norm_eps) reach the ONNX
    graph: its check against the NumPy runtime passes (it failed by 7e-4 when they did not)."""
    pytest.importorskip("onnxruntime", reason="onnxruntime (a test oracle) is not installed")
    result = convert(formats.read(KERAS_HUB / "bert"), tmp_path / "onnx", "onnx")
    assert (tmp_path / "onnx" / "model.onnx").is_file() and result.tensors


# --- ELECTRA: keras-hub 0.32 has its backbone and no task ----------------------------------------


@pytest.mark.parametrize("model, head", [("generator", "mlm"), ("discriminator", "rtd")])
def test_an_electra_head_is_refused_unless_its_loss_is_accepted(model, head, tmp_path):
    source = FIXTURES / "family_hf" / "electra" / model
    refused = run_in_process("convert", source, tmp_path / "refused", "--to", "keras-hub",
                             "--accept-loss", "hidden_act")
    assert refused.exit_code == 2 and f"--accept-loss {head}" in refused.stderr and "ElectraBackbone" in refused.stderr
    assert not (tmp_path / "refused").exists()
    result = convert(formats.read(source), tmp_path / "preset", "keras-hub", accept_loss=("hidden_act", head))
    assert any(f"the {head} head is not in the preset" in note for note in result.notes)
    assert any(i.reason.startswith("a head the target has no place for") for i in result.ignored)
    written = formats.read(tmp_path / "preset")
    assert not written.heads.mlm and not written.heads.rtd and not (tmp_path / "preset" / "task.json").exists()
    tree = formats.read(source)
    for param in written:
        if param.name in tree:
            assert np.array_equal(bits(param.tensor.read()), bits(tree[param.name].tensor.read())), param.name


def test_an_electra_backbone_preset_round_trips_through_bert4keras(tmp_path):
    """keras-hub's ELECTRA has a pooler, which transformers' has not (refused there, naming it);
    bert4keras holds it, and the preset comes back the same bits."""
    source = KERAS_HUB / "electra_backbone"
    refused = run_in_process("convert", source, tmp_path / "hf", "--to", "hf")
    assert refused.exit_code == 2 and "pooler" in refused.stderr
    convert(formats.read(source), tmp_path / "b4k", "bert4keras")
    convert(formats.read(tmp_path / "b4k"), tmp_path / "kh", "keras-hub")
    with h5py.File(source / "model.weights.h5") as a, h5py.File(tmp_path / "kh" / "model.weights.h5") as b:
        stored = []
        a.visititems(lambda n, o: stored.append(n) if isinstance(o, h5py.Dataset) else None)
        for dataset in stored:
            assert np.array_equal(bits(a[dataset][()]), bits(b[dataset][()])), dataset


@kerashub
def test_keras_hub_loads_an_electra_backbone_preset(tmp_path):
    source = FIXTURES / "family_hf" / "electra" / "model"
    convert(formats.read(source), tmp_path / "preset", "keras-hub", accept_loss=("hidden_act",))
    written = formats.read(tmp_path / "preset")
    inputs = _inputs(written.config.vocab_size)
    np.savez(tmp_path / "inputs.npz", **inputs)
    info, loaded = load(tmp_path / "preset", tmp_path / "inputs.npz", tmp_path / "oracle.npz")
    assert info["class"] == "ElectraBackbone" and info["parameters"] == audit(written)["parameters"]
    valid = inputs["padding_mask"].astype(bool)
    np.testing.assert_allclose(loaded["sequence_output"][valid], masked_logits(written, inputs)["sequence_output"][valid],
                               atol=PRESET_ATOL)
