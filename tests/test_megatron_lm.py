"""NVIDIA Megatron-LM BERT checkpoints (fixtures/make_megatron_lm_fixtures.py: versions 0, 1.0 and
3.0 of the query/key/value row order, with and without `args`) against transformers' own
`convert_megatron_bert_checkpoint.py` run on them: every tensor it writes equals ours bit for bit,
and the logits of its output in transformers 5 equal ours (both runtimes, and our `--to hf`).

The script is not in transformers' wheels or sdist: tests/vendored/ holds it, unchanged, from
transformers' source tree (src/transformers/models/megatron_bert/, its logic the same from 4.13
to 4.57).
"""

from __future__ import annotations

import importlib.util
import shutil
from argparse import Namespace

import numpy as np
import pytest

from bertconv import formats
from bertconv.runtime import NumpyBert
from conftest import FIXTURES, ROOT, needs, run_in_process

HERE = FIXTURES / "megatron_lm"
SCRIPT = ROOT / "tests" / "vendored" / "convert_megatron_bert_checkpoint.py"
RANK_FILE = ("release", "mp_rank_00", "model_optim_rng.pt")
SIZES = dict(vocab_size=128, hidden_size=16, num_hidden_layers=2, num_attention_heads=4, intermediate_size=24,
             max_position_embeddings=32)
#: float32 logits of a 2-layer model: measured 1e-6 from transformers 5's.
TOLERANCE = 1e-4
VERSIONS = ["v0", "v1", "v3"]


def _script():
    needs("transformers")
    spec = importlib.util.spec_from_file_location("convert_megatron_bert_checkpoint", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _converted(version: str):
    """transformers' conversion of a fixture: (its MegatronBertConfig, its state dict), the config
    the sizes a user passes with --config_file where the file states none."""
    torch = needs("torch")
    transformers = needs("transformers")
    script = _script()
    saved = torch.load(HERE.joinpath(version, *RANK_FILE), map_location="cpu", weights_only=False)
    config = transformers.MegatronBertConfig(**SIZES)
    return config, script.convert_megatron_checkpoint(Namespace(), saved, config)


def _their_logits(config, state: dict, ids, attention) -> np.ndarray:
    torch = needs("torch")
    transformers = needs("transformers")
    model = transformers.MegatronBertForPreTraining(config).eval()
    model.load_state_dict(state, strict=False)
    with torch.no_grad():
        return model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(attention)).prediction_logits.numpy()


def _batch():
    ids = np.random.default_rng(1).integers(0, 52, size=(2, 9))
    attention = np.ones_like(ids)
    attention[1, 6:] = 0
    return ids, attention


def _heads(version: str) -> list[str]:
    return ["--heads", "4"] if version == "v0" else []  # the oldest files state no options


@pytest.mark.parametrize("version", VERSIONS)
def test_every_tensor_is_transformers_conversions_bit_for_bit(version, tmp_path):
    config, theirs = _converted(version)
    out = tmp_path / "hf"
    result = run_in_process("convert", HERE / version, out, "--to", "hf", *_heads(version))
    assert result.exit_code == 0, result.stderr
    safetensors = needs("safetensors.numpy")
    ours = safetensors.load_file(out / "model.safetensors")
    assert set(theirs) == set(ours) | {"cls.predictions.decoder.weight"}  # the decoder is the word table, tied
    for name, tensor in theirs.items():
        np.testing.assert_array_equal(ours.get(name, ours["bert.embeddings.word_embeddings.weight"]), tensor.numpy(),
                                      err_msg=name)
    assert ours["bert.embeddings.word_embeddings.weight"].shape == (128, 16)  # the padding rows kept


@pytest.mark.parametrize("version", VERSIONS)
def test_logits_are_those_of_transformers_conversion(version, tmp_path):
    config, theirs = _converted(version)
    tree = formats.read(HERE / version, num_heads=4 if version == "v0" else None)
    if version == "v3":  # Megatron-LM computed with its --layernorm-epsilon, which the script drops
        assert tree.config.layer_norm_eps == 1e-5 and config.layer_norm_eps == 1e-12
        config.layer_norm_eps = 1e-5
    assert tree.config.layer_norm_eps == config.layer_norm_eps
    ids, attention = _batch()
    expected = _their_logits(config, theirs, ids, attention)
    real = attention.astype(bool)
    assert np.abs(NumpyBert(tree)(ids, None, attention).mlm_logits - expected)[real].max() <= TOLERANCE
    from bertconv.runtime import TorchBert

    assert np.abs(TorchBert(tree)(ids, None, attention).mlm_logits.numpy() - expected)[real].max() <= TOLERANCE
    out = tmp_path / "hf"
    assert run_in_process("convert", HERE / version, out, "--to", "hf", *_heads(version)).exit_code == 0
    torch, transformers = needs("torch"), needs("transformers")
    model = transformers.MegatronBertForPreTraining.from_pretrained(out).eval()
    with torch.no_grad():
        got = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(attention)).prediction_logits.numpy()
    np.testing.assert_array_equal(got, expected)


def test_padding_rows_are_noted_never_a_mismatch():
    for command in ("audit", "verify"):
        result = run_in_process(command, HERE / "v3", "--json")
        assert result.exit_code == 0, result.stdout + result.stderr
        assert "padding" in result.stdout and "rows 52..127" in result.stdout


def _edited(tmp_path, edit):
    """The v1 fixture's directory with its checkpoint's dict changed by `edit` (through torch)."""
    torch = needs("torch")
    directory = tmp_path / "megatron"
    shutil.copytree(HERE / "v1", directory)
    path = directory.joinpath(*RANK_FILE)
    saved = torch.load(path, map_location="cpu", weights_only=False)
    edit(saved)
    torch.save(saved, path)
    return directory


@pytest.mark.parametrize("option, value", [("apply_residual_connection_post_layernorm", True),
                                           ("normalization", "RMSNorm"), ("position_embedding_type", "rope"),
                                           ("swiglu", True), ("tensor_model_parallel_size", 2)])
def test_an_option_of_another_computation_is_refused_by_name(option, value, tmp_path):
    directory = _edited(tmp_path, lambda saved: setattr(saved["args"], option, value))
    result = run_in_process("convert", directory, tmp_path / "out", "--to", "hf")
    assert result.exit_code == 2 and option in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_checkpoint_version_of_no_known_row_order_is_refused(tmp_path):
    directory = _edited(tmp_path, lambda saved: saved.update(checkpoint_version=1.5))
    result = run_in_process("audit", directory)
    assert result.exit_code == 2 and "checkpoint_version is 1.5" in result.stderr


def test_one_rank_of_a_split_model_is_refused(tmp_path):
    directory = tmp_path / "megatron"
    shutil.copytree(HERE / "v1", directory)
    shutil.copytree(directory / "release" / "mp_rank_00", directory / "release" / "mp_rank_01")
    result = run_in_process("audit", directory)
    assert result.exit_code == 2 and "mp_rank_00 and others" in result.stderr


def test_a_pickle_calling_code_is_refused_unrun(tmp_path):
    class Exploit:
        def __reduce__(self):
            return (print, ("ran",))

    directory = _edited(tmp_path, lambda saved: setattr(saved["args"], "hook", Exploit()))
    result = run_in_process("audit", directory)
    assert result.exit_code == 2 and ".print, which is not a tensor-rebuild function" in result.stderr
    assert "ran" not in result.stdout
    assert run_in_process("audit", directory.joinpath(*RANK_FILE)).stderr == result.stderr
