"""fair-esm's ESM-2 `.pt` against fair-esm 2.0.0 itself (fixtures made by its `ESM2` class:
fixtures/make_fair_esm_fixtures.py): both runtimes compute the logits `esm.pretrained` loads, the
options it reads are carried (token dropout) or refused (the ESM-1 line), and `--to hf` gives a
directory transformers 5 loads with the same logits.

fair-esm is installed apart, beside the test venv's torch: `make fair-esm`
(pip install --no-deps --target .cache/fair-esm fair-esm==2.0.0).
"""

from __future__ import annotations

import shutil
import sys
from argparse import Namespace

import numpy as np
import pytest

from bertconv import formats
from bertconv.runtime import NumpyBert
from conftest import FIXTURES, ROOT, needs, run_in_process

RELEASED = FIXTURES / "fair_esm" / "released" / "esm2_t2_16_fixture.pt"
STATE_DICT = FIXTURES / "fair_esm" / "state_dict" / "esm2_t2_16_fixture.pt"
FAIR_ESM = ROOT / ".cache" / "fair-esm"
#: float32 logits of a 2-layer model (up to |4.2|): measured 1e-6 from fair-esm's in both runtimes.
TOLERANCE = 1e-4
CLS, PAD, EOS, MASK = 0, 1, 2, 32


def _esm():
    if not (FAIR_ESM / "esm").is_dir():
        pytest.skip("needs fair-esm, which is not installed (make fair-esm: pip install --no-deps --target "
                    ".cache/fair-esm fair-esm==2.0.0)")
    if str(FAIR_ESM) not in sys.path:
        sys.path.append(str(FAIR_ESM))
    return needs("esm.pretrained")  # the module: `load_model_and_alphabet_core`


def _tokens() -> np.ndarray:
    """Two proteins as fair-esm's batch converter lays them out: <cls> residues <eos>, the second
    padded after its <eos>, with one <mask> in the first and two in the second."""
    residues = np.random.default_rng(0).integers(4, 24, size=(2, 10))
    tokens = np.concatenate([np.full((2, 1), CLS), residues, np.full((2, 1), EOS)], axis=1)
    tokens[1, 7], tokens[1, 8:] = EOS, PAD
    tokens[0, 3] = tokens[1, 2] = tokens[1, 5] = MASK
    return tokens


def _fair_esm_logits(path, tokens: np.ndarray) -> np.ndarray:
    pretrained = _esm()
    torch = needs("torch")
    data = torch.load(path, map_location="cpu", weights_only=False)
    model, _ = pretrained.load_model_and_alphabet_core("esm2_fixture", data, None)
    with torch.no_grad():
        return model.eval()(torch.tensor(tokens))["logits"].numpy()


def _real(tokens: np.ndarray) -> np.ndarray:
    return tokens != PAD  # the outputs at padding are never read (families/esm.py)


@pytest.mark.parametrize("path", [RELEASED, STATE_DICT], ids=["released-names", "state-dict-names"])
def test_both_runtimes_compute_fair_esms_logits(path):
    tokens = _tokens()
    expected = _fair_esm_logits(path, tokens)
    tree = formats.read(path)
    assert tree.format == "fair-esm" and tree.config.model_type == "esm" and tree.config.token_dropout
    attention = _real(tokens).astype(np.int64)
    got = NumpyBert(tree)(tokens, None, attention).mlm_logits
    assert np.abs(got - expected)[_real(tokens)].max() <= TOLERANCE
    from bertconv.runtime import TorchBert

    got = TorchBert(tree)(tokens, None, attention).mlm_logits.numpy()
    assert np.abs(got - expected)[_real(tokens)].max() <= TOLERANCE


@pytest.mark.parametrize("path", [RELEASED, STATE_DICT], ids=["released-names", "state-dict-names"])
def test_converted_hf_loads_in_transformers_5_with_fair_esms_logits(path, tmp_path):
    torch = needs("torch")
    transformers = needs("transformers")
    out = tmp_path / "hf"
    result = run_in_process("convert", path, out, "--to", "hf")
    assert result.exit_code == 0, result.stderr
    model, info = transformers.EsmForMaskedLM.from_pretrained(out, output_loading_info=True)
    # the published files hold no contact regression (fair-esm ships it apart)
    absent = set() if path == STATE_DICT else {"esm.contact_head.regression.weight", "esm.contact_head.regression.bias"}
    assert set(info["missing_keys"]) == absent and not info["unexpected_keys"], info
    tokens = _tokens()
    with torch.no_grad():
        got = model.eval()(input_ids=torch.tensor(tokens),
                           attention_mask=torch.tensor(_real(tokens).astype(np.int64))).logits.numpy()
    assert np.abs(got - _fair_esm_logits(path, tokens))[_real(tokens)].max() <= TOLERANCE
    assert run_in_process("diff", path, out).exit_code == 0


def _resaved(tmp_path, edit) -> object:
    """The released fixture loaded with torch, changed by `edit(data)`, saved again."""
    torch = needs("torch")
    data = torch.load(RELEASED, map_location="cpu", weights_only=False)
    edit(data)
    path = tmp_path / "esm2_edited.pt"
    torch.save(data, path)
    return path


def test_token_dropout_off_is_carried(tmp_path):
    path = _resaved(tmp_path, lambda data: setattr(data["cfg"]["model"], "token_dropout", False))
    tree = formats.read(path)
    assert tree.config.token_dropout is False
    tokens = _tokens()
    got = NumpyBert(tree)(tokens, None, _real(tokens).astype(np.int64)).mlm_logits
    expected = _fair_esm_logits(path, tokens)
    assert np.abs(got - expected)[_real(tokens)].max() <= TOLERANCE
    assert np.abs(expected - _fair_esm_logits(RELEASED, tokens))[_real(tokens)].max() > 1e-2  # it matters


def test_the_fairseq_reader_leaves_esm_to_this_one():
    assert formats.resolve(RELEASED)[0].target == "fair-esm"


@pytest.mark.parametrize("arch", ["roberta_large", "msa_transformer"])
def test_the_esm_1_line_is_refused_by_name(arch, tmp_path):
    def as_esm1(data):
        data.pop("cfg")
        data["args"] = Namespace(arch=arch, layers=2, embed_dim=16, attention_heads=4)

    result = run_in_process("audit", _resaved(tmp_path, as_esm1))
    assert result.exit_code == 2 and arch in result.stderr and "ESM-2 only" in result.stderr


def test_a_decoder_stored_apart_with_other_values_is_refused(tmp_path):
    def untie(data):
        data["model"]["encoder.lm_head.weight"] = data["model"]["encoder.lm_head.weight"].clone() + 1

    result = run_in_process("audit", _resaved(tmp_path, untie))
    assert result.exit_code == 2 and "encoder.lm_head.weight" in result.stderr and "ties" in result.stderr


def test_a_rotary_buffer_fair_esm_would_load_otherwise_is_unread(tmp_path):
    name = "encoder.sentence_encoder.layers.1.self_attn.rot_emb.inv_freq"
    path = _resaved(tmp_path, lambda data: data["model"][name].mul_(2))
    result = run_in_process("convert", path, tmp_path / "out", "--to", "hf")
    assert result.exit_code == 2 and name in result.stderr and "--accept-loss" in result.stderr
    assert not (tmp_path / "out").exists()


def test_missing_token_dropout_option_is_refused(tmp_path):
    path = _resaved(tmp_path, lambda data: delattr(data["cfg"]["model"], "token_dropout"))
    result = run_in_process("audit", path)
    assert result.exit_code == 2 and "token_dropout" in result.stderr


def test_inputs_untouched(tmp_path):
    copy = tmp_path / RELEASED.name
    shutil.copy(RELEASED, copy)
    before = copy.read_bytes()
    assert run_in_process("verify", copy).exit_code in (0, 1)
    assert copy.read_bytes() == before
