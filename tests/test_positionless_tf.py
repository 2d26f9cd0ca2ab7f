"""RoFormer and NEZHA as their authors released them, TF1 checkpoints in Google's names (fixtures made
with bert4keras and a TF1 Saver: fixtures/make_positionless_tf_fixtures.py), against the libraries
that load exactly these: bert4keras' `build_transformer_model(config, checkpoint, model=...)` and its
`predict`, and transformers 4.57's `load_tf_weights_in_roformer` (tests marked `oracle`, in
.cache/oracle-venv). Read (the family from the config and the names, refused when they cannot say),
and written (`convert --to tf`), with what those libraries cannot compute refused.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from bertconv import formats
from bertconv.runtime.numerics import Numerics
from bertconv.runtime.numpy_bert import NumpyBert
import oracle_process
from conftest import FIXTURES, keras_outputs, needs, run_in_process

ROFORMER_MLM = FIXTURES / "roformer" / "tf" / "mlm"
ROFORMER_PROJECTED = FIXTURES / "roformer" / "tf" / "projected"
NEZHA = FIXTURES / "nezha" / "tf" / "pool-nsp-mlm"
PREFIX = "bert_model.ckpt"
#: bert4keras' outputs are probabilities: both runtimes measured within 2.4e-7 of its predict on these
#: 2-layer models (its sinusoids float32 computations, bertconv's float64 ones rounded); NEZHA run
#: with Huawei's tanh "gelu" instead is 4.5e-5 away.
ATOL = 1e-5
#: float32 logits (up to |3.4|): both runtimes measured within 1.7e-6 of transformers 4.57's.
LOGITS_ATOL = 1e-4


def _inputs(vocab_size: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    # No id 0: bert4keras masks it (mask_zero), as padding.
    return [rng.integers(1, vocab_size, size=(2, 11)), rng.integers(0, 2, size=(2, 11))]


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def _bert4keras_predict(directory: Path, model: str, inputs, heads_of: Path | None = None) -> dict[str, np.ndarray]:
    """bert4keras building the model from the checkpoint (`load_weights_from_checkpoint`, its
    `variable_mapping`), as its users load the authors' releases, and its predict, outputs named
    (the model called eagerly: the computation `predict` wraps in a tf.function, no graph traced per
    model); the heads are those `fixture.json` in `heads_of` (default: `directory`) says, else the MLM's."""
    needs("tensorflow")
    needs("bert4keras")
    from bert4keras.models import build_transformer_model

    manifest_path = (heads_of or directory) / "fixture.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    heads = {flag: manifest.get(flag, flag == "with_mlm") for flag in ("with_pool", "with_nsp", "with_mlm")}
    keras_model = build_transformer_model(str(directory / "bert_config.json"), str(directory / PREFIX), model=model,
                                          **heads)
    outputs = keras_outputs(keras_model, inputs)
    names = [name for name, present in (("nsp", heads["with_nsp"]), ("mlm", heads["with_mlm"])) if present]
    return dict(zip(names, outputs, strict=True))


def _ours(tree, inputs) -> dict[str, np.ndarray]:
    out = NumpyBert(tree)(*inputs)
    found = {"mlm": _softmax(out.mlm_logits.astype(np.float64))}
    if out.nsp_logits is not None:
        found["nsp"] = _softmax(out.nsp_logits.astype(np.float64))
    return found


# --- reading --------------------------------------------------------------------------------


@pytest.mark.parametrize("directory, family, activation", [(ROFORMER_MLM, "roformer", "gelu"),
                                                           (ROFORMER_PROJECTED, "roformer", "gelu"),
                                                           (NEZHA, "nezha", "gelu_tanh")],
                         ids=["roformer", "roformer-projected", "nezha"])
def test_the_family_and_its_gelu_come_from_the_config_and_the_names(directory, family, activation):
    """RoFormer's authors trained with bert4keras (erf "gelu"); Huawei's NEZHA code is Google's (tanh)."""
    tree = formats.read(directory)
    assert tree.config.model_type == family and tree.config.hidden_act == activation
    assert not tree.config.unread and "embeddings.position" not in tree


def test_every_tensor_is_tensorflows_bit_for_bit():
    tf = needs("tensorflow")
    for directory in (ROFORMER_MLM, ROFORMER_PROJECTED, NEZHA):
        tree = formats.read(directory)
        reader = tf.train.load_checkpoint(str(directory / PREFIX))
        names = {name for name, _ in tf.train.list_variables(str(directory / PREFIX))}
        assert {param.source for param in tree} == names  # every variable read, none left aside
        for param in tree:
            expected = reader.get_tensor(param.source)
            np.testing.assert_array_equal(param.tensor.read(), expected.T if param.source.endswith("output_weights")
                                          else expected)


@pytest.mark.parametrize("directory, model", [(ROFORMER_MLM, "roformer"), (ROFORMER_PROJECTED, "roformer"),
                                              (NEZHA, "nezha")], ids=["roformer", "roformer-projected", "nezha"])
def test_both_runtimes_compute_bert4keras_predict_from_the_checkpoint(directory, model):
    """bert4keras computes "gelu" as erf whatever the checkpoint was trained with: NEZHA is compared so."""
    tree = formats.read(directory)
    inputs = _inputs(tree.config.vocab_size)
    expected = _bert4keras_predict(directory, model, inputs)
    from bertconv.runtime.torch_bert import TorchBert
    numerics = Numerics.for_tree(tree, activation="gelu")
    for runtime in (NumpyBert(tree, numerics), TorchBert(tree, numerics)):
        out = runtime(*inputs)
        for name, logits in (("mlm", out.mlm_logits), ("nsp", out.nsp_logits)):
            if name in expected:
                logits = logits if isinstance(logits, np.ndarray) else logits.numpy()
                assert np.abs(_softmax(logits.astype(np.float64)) - expected[name]).max() <= ATOL, name


def _copy_without_config(tmp_path: Path, source: Path) -> Path:
    directory = tmp_path / source.name
    shutil.copytree(source, directory)
    (directory / "bert_config.json").unlink()
    return directory


def test_without_a_config_the_names_cannot_say_which_and_reading_refuses(tmp_path):
    directory = _copy_without_config(tmp_path, ROFORMER_MLM)
    result = run_in_process("audit", directory)
    assert result.exit_code == 2, result.stderr
    assert "RoFormer" in result.stderr and "NEZHA" in result.stderr and "--config" in result.stderr


@pytest.mark.parametrize("stated, family", [({"use_relative_position": True}, "nezha"),
                                            ({"model_type": "nezha"}, "nezha"),
                                            ({"model_type": "roformer"}, "roformer"),
                                            ({}, "roformer")])
def test_a_config_says_which(tmp_path, stated, family):
    directory = _copy_without_config(tmp_path, ROFORMER_MLM)
    config = {**json.loads((ROFORMER_MLM / "bert_config.json").read_text()), **stated}
    (directory / "bert_config.json").write_text(json.dumps(config))
    assert formats.read(directory).config.model_type == family


def test_a_bert_config_beside_names_without_positions_reports_the_missing_table(tmp_path):
    directory = _copy_without_config(tmp_path, NEZHA)
    config = {**json.loads((NEZHA / "bert_config.json").read_text()), "use_relative_position": False}
    (directory / "bert_config.json").write_text(json.dumps(config))
    tree = formats.read(directory)
    assert tree.config.model_type == "bert"
    result = run_in_process("audit", directory)
    assert result.exit_code != 0 and "embeddings.position" in result.stdout + result.stderr


def test_nezha_clipping_stated_elsewhere_than_64_is_unread(tmp_path):
    directory = _copy_without_config(tmp_path, NEZHA)
    config = {**json.loads((NEZHA / "bert_config.json").read_text()), "max_relative_position": 32}
    (directory / "bert_config.json").write_text(json.dumps(config))
    result = run_in_process("verify", directory)
    assert result.exit_code == 2 and "max_relative_position" in result.stderr, result.stderr


# --- writing --------------------------------------------------------------------------------


def test_hf_roformer_to_tf_computes_its_logits_in_bert4keras(tmp_path):
    source = FIXTURES / "roformer" / "hf" / "masked_lm"  # E 8 projected to H 16
    out = tmp_path / "tf"
    result = run_in_process("convert", source, out, "--to", "tf")
    assert result.exit_code == 0, result.stderr
    assert "load_tf_weights_in_roformer" in result.stdout + result.stderr  # the caveat on the projection
    tree = formats.read(source)
    inputs = _inputs(tree.config.vocab_size)
    got = _bert4keras_predict(out, "roformer", inputs)
    assert np.abs(got["mlm"] - _ours(tree, inputs)["mlm"]).max() <= ATOL
    assert formats.read(out).config.model_type == "roformer"
    assert run_in_process("diff", source, out).exit_code == 0


def test_bert4keras_nezha_to_tf_computes_its_logits_in_bert4keras(tmp_path):
    """From bert4keras' own weights file (pooler, NSP and MLM heads), through Google's names."""
    source = FIXTURES / "nezha" / "bert4keras" / "pool-nsp-mlm"
    out = tmp_path / "tf"
    result = run_in_process("convert", source, out, "--to", "tf")
    assert result.exit_code == 0, result.stderr
    assert json.loads((out / "bert_config.json").read_text())["use_relative_position"] is True
    tree = formats.read(source)
    inputs = _inputs(tree.config.vocab_size)
    got = _bert4keras_predict(out, "nezha", inputs, heads_of=source)
    expected = _ours(tree, inputs)
    assert set(got) == {"mlm", "nsp"}
    for name in got:
        assert np.abs(got[name] - expected[name]).max() <= ATOL, name
    assert run_in_process("diff", source, out).exit_code == 0


@pytest.mark.parametrize("source, named", [(FIXTURES / "roformer" / "hf" / "rotary_value", "rotary_value"),
                                           (FIXTURES / "nezha" / "hf" / "masked_lm", "max_relative_position 6")],
                         ids=["roformer-rotary-value", "nezha-clipped-at-6"])
def test_what_the_authors_code_cannot_compute_is_refused(source, named, tmp_path):
    out = tmp_path / "tf"
    result = run_in_process("convert", source, out, "--to", "tf")
    assert result.exit_code == 2 and named in result.stderr, result.stderr
    assert not out.exists()


@pytest.mark.parametrize("source", [ROFORMER_MLM, ROFORMER_PROJECTED, NEZHA], ids=lambda p: p.parent.parent.name + "-" + p.name)
def test_tf_round_trip_keeps_every_tensor_and_config_field(source, tmp_path):
    out = tmp_path / "tf"
    result = run_in_process("convert", source, out, "--to", "tf")
    assert result.exit_code == 0, result.stderr
    assert run_in_process("diff", source, out).exit_code == 0
    assert formats.read(out).config.hidden_act == formats.read(source).config.hidden_act


# --- transformers 4.57's RoFormer TF loader -------------------------------------------------


def _their_logits(tmp_path: Path, directory: Path, inputs) -> np.ndarray:
    """transformers 4.57's logits from the checkpoint (tests/oracle_roformer_tf.py), in the worker's
    one oracle process; oracle_process.OracleError with its traceback when it cannot load it."""
    oracle_process.skip_unless_installed("transformers 4.57")
    ids, types = inputs
    np.savez(tmp_path / "inputs.npz", input_ids=ids, token_type_ids=types, attention_mask=np.ones_like(ids))
    oracle_process.run("roformer-tf", directory / PREFIX, directory / "bert_config.json", tmp_path / "inputs.npz",
                       tmp_path / "out.npz")
    return np.load(tmp_path / "out.npz")["logits"]


@pytest.mark.oracle
@pytest.mark.parametrize("written", [False, True], ids=["fixture", "written"])
def test_transformers_roformer_tf_loader_computes_our_logits(tmp_path, written):
    directory = ROFORMER_MLM
    if written:
        directory = tmp_path / "tf"
        assert run_in_process("convert", ROFORMER_MLM, directory, "--to", "tf").exit_code == 0
    tree = formats.read(directory)
    inputs = _inputs(tree.config.vocab_size)
    theirs = _their_logits(tmp_path, directory, inputs)
    assert np.abs(NumpyBert(tree)(*inputs).mlm_logits - theirs).max() <= LOGITS_ATOL


@pytest.mark.oracle
def test_transformers_roformer_tf_loader_stops_on_the_projection_as_the_caveat_says(tmp_path):
    with pytest.raises(oracle_process.OracleError, match="AttributeError"):
        _their_logits(tmp_path, ROFORMER_PROJECTED, _inputs(40))
