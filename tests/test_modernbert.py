"""ModernBERT against transformers 5 (fixtures made by it: fixtures/make_modernbert_fixtures.py):
logits of both runtimes under both of its attention implementations at lengths past the sliding
window, padded batches against each sequence alone, the closed form against `num_parameters()`,
Hugging Face round trips, the config's two spellings of its layer kinds, refusals, its tokenizer
and fill-mask, and the probe on a head without output bias.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest

from bertconv import formats
from bertconv.config import Heads, expected_parameters
from bertconv.config.dialects import parse_activation
from bertconv.runtime.numpy_bert import NumpyBert
from conftest import FIXTURES, needs, run_in_process

HERE = FIXTURES / "modernbert"
MASKED_LM, BIASED, MODEL = HERE / "masked_lm", HERE / "biased", HERE / "model"
MASKED_LMS = [MASKED_LM, BIASED]
#: float32 logits (|logit| up to ~20 with the fixtures' N(0, 0.5) weights): both runtimes measured
#: 6e-6 of transformers 5 at 30 tokens, eager and sdpa alike.
TOLERANCE = 1e-4
#: Past both fixtures' windows (8 and 6 tokens: keys at most 4 and 3 positions away).
LENGTH = 30


def _batch(vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Three sequences of LENGTH ids, the second padded after 19, the third after 7."""
    ids = np.random.default_rng(0).integers(5, vocab_size, size=(3, LENGTH))
    attention = np.ones_like(ids)
    attention[1, 19:] = 0
    attention[2, 7:] = 0
    return ids, attention


def _reference_logits(path, ids, attention=None, implementation="eager") -> np.ndarray:
    torch = needs("torch")
    transformers = needs("transformers")
    model = transformers.AutoModelForMaskedLM.from_pretrained(path, attn_implementation=implementation).eval()
    mask = None if attention is None else torch.tensor(attention)
    with torch.no_grad():
        return model(input_ids=torch.tensor(ids), attention_mask=mask).logits.numpy()


def _runtimes(tree):
    needs("torch")
    from bertconv.runtime.torch_bert import TorchBert

    return {"numpy": lambda *a: NumpyBert(tree)(*a).mlm_logits,
            "torch": lambda *a: TorchBert(tree)(*a).mlm_logits.numpy()}


@pytest.mark.parametrize("path", MASKED_LMS, ids=lambda p: p.name)
@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_both_runtimes_compute_transformers_5s_logits_past_the_window(path, implementation):
    tree = formats.read(path)
    ids, attention = _batch(tree.config.vocab_size)
    expected = _reference_logits(path, ids, attention, implementation)
    real = attention.astype(bool)  # padding's outputs are never read
    for name, run in _runtimes(tree).items():
        assert np.abs(run(ids, None, attention) - expected)[real].max() <= TOLERANCE, name


@pytest.mark.parametrize("path", MASKED_LMS, ids=lambda p: p.name)
def test_a_padded_batch_computes_each_sequence_as_alone(path):
    tree = formats.read(path)
    ids, attention = _batch(tree.config.vocab_size)
    for name, run in _runtimes(tree).items():
        batched = run(ids, None, attention)
        for row in range(len(ids)):
            length = int(attention[row].sum())
            alone = run(ids[row:row + 1, :length], None, None)[0]
            assert np.abs(batched[row, :length] - alone).max() <= TOLERANCE, (name, row)
            # transformers 5 too: its padded batch is the sequence alone, so both agree either way
            reference = _reference_logits(path, ids[row:row + 1, :length])[0]
            assert np.abs(alone - reference).max() <= TOLERANCE, (name, row)


def test_the_window_and_the_local_base_change_the_logits():
    """Both layer kinds matter at this length: computed all-global, or with one base, the logits
    leave transformers 5's (so the comparison above would catch either mistake)."""
    tree = formats.read(MASKED_LM)
    ids, attention = _batch(tree.config.vocab_size)
    expected = _reference_logits(MASKED_LM, ids, attention)
    real = attention.astype(bool)
    for changed in ({"local_attention_layers": ()}, {"local_rope_theta": tree.config.rope_theta},
                    {"local_attention": 4 * LENGTH}):
        tree.config = replace(formats.read(MASKED_LM).config, **changed)
        assert np.abs(NumpyBert(tree)(ids, None, attention).mlm_logits - expected)[real].max() > 1e-2, changed


@pytest.mark.parametrize("path", [MASKED_LM, BIASED, MODEL], ids=lambda p: p.name)
def test_closed_form_is_transformers_num_parameters(path):
    transformers = needs("transformers")
    tree = formats.read(path)
    cls = transformers.AutoModel if path == MODEL else transformers.AutoModelForMaskedLM
    assert expected_parameters(tree.config, tree.heads) == cls.from_pretrained(path).num_parameters()
    result = run_in_process("audit", path, "--json")
    assert result.exit_code == 0, result.stdout


def test_the_fixtures_cover_what_the_config_switches():
    masked, biased = formats.read(MASKED_LM), formats.read(BIASED)
    assert masked.config.local_attention_layers == (1, 3) and biased.config.local_attention_layers == (0, 2)
    assert "layers.0.attention_norm.gamma" not in masked and "layers.1.attention_norm.gamma" in masked
    assert "mlm.output_bias" in masked and "mlm.output_bias" not in biased
    assert "layers.1.attention.qkv.bias" in biased and "embeddings.norm.beta" in biased
    assert biased.heads == Heads(pooler=False, nsp=False, untied_decoder=True)
    assert (biased.config.hidden_act, biased.config.mlm_hidden_act) == ("gelu_tanh", "relu")
    assert (biased.config.rope_theta, biased.config.local_rope_theta, biased.config.layer_norm_eps) == (5000, 500, 1e-6)


@pytest.mark.parametrize("path", [MASKED_LM, BIASED, MODEL], ids=lambda p: p.name)
def test_hf_round_trip_is_byte_identical_and_loads_intact_in_transformers_5(path, tmp_path):
    transformers = needs("transformers")
    out = tmp_path / "out"
    assert run_in_process("convert", path, out, "--to", "hf").exit_code == 0
    assert (out / "model.safetensors").read_bytes() == (path / "model.safetensors").read_bytes()
    assert run_in_process("diff", path, out).exit_code == 0
    cls = transformers.AutoModel if path == MODEL else transformers.AutoModelForMaskedLM
    _, info = cls.from_pretrained(out, output_loading_info=True)
    assert not any(info[kind] for kind in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    # Every key as transformers 5 reads it, but the token ids, which the tree does not carry
    # (the written pad_token_id is 0; the model never reads them, the tokenizer files say them).
    # The activation by what it computes: bertconv writes tanh GELU as "gelu_new", which equals
    # "gelu_pytorch_tanh" to float32 rounding (the logits below).
    written, source = (transformers.AutoConfig.from_pretrained(p).to_dict() for p in (out, path))
    for config in (written, source):
        config["hidden_activation"] = parse_activation(config["hidden_activation"], gelu_means="gelu")
    token_ids = ("_name_or_path", "pad_token_id", "bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id")
    assert {k: v for k, v in written.items() if k not in token_ids} == {
        k: v for k, v in source.items() if k not in token_ids}
    if path != MODEL:
        ids, attention = _batch(formats.read(path).config.vocab_size)
        expected = _reference_logits(path, ids, attention)
        assert np.abs(_reference_logits(out, ids, attention) - expected)[attention.astype(bool)].max() <= TOLERANCE


def _old_style(config: dict) -> dict:
    """The config as transformers 4 wrote it: layer kinds by period, flat rotary bases, and the
    keys its released models carry that its code never reads."""
    old = {k: v for k, v in config.items() if k not in ("layer_types", "rope_parameters")}
    rope = config["rope_parameters"]
    return {**old, "global_attn_every_n_layers": 2, "global_rope_theta": rope["full_attention"]["rope_theta"],
            "local_rope_theta": rope["sliding_attention"]["rope_theta"], "layer_norm_eps": 0.5,
            "position_embedding_type": "absolute", "reference_compile": None, "repad_logits_with_grad": False}


def test_transformers_4s_config_keys_read_as_the_same_model(tmp_path):
    directory = tmp_path / "old"
    shutil.copytree(MASKED_LM, directory)
    config = json.loads((MASKED_LM / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps(_old_style(config)))
    old, new = formats.read(directory).config, formats.read(MASKED_LM).config
    assert old == new and not old.unread
    ids, attention = _batch(new.vocab_size)
    np.testing.assert_array_equal(_reference_logits(directory, ids, attention),
                                  _reference_logits(MASKED_LM, ids, attention))


@pytest.mark.parametrize("key, value, named", [
    ("rope_scaling", {"rope_type": "linear", "factor": 2.0}, "rope_scaling"),
    ("rope_parameters", {"full_attention": {"rope_type": "yarn", "rope_theta": 1e4}}, "rope_type"),
    ("global_attn_every_n_layers", 3, "layer_types and global_attn_every_n_layers"),
    ("global_rope_theta", 10.0, "rope_theta"),
    ("layer_types", ["full_attention"], "layer_types"),
    ("sliding_window", 4, "sliding_window"),
])
def test_what_bertconv_does_not_compute_is_refused_by_name(key, value, named, tmp_path):
    directory = tmp_path / "refused"
    shutil.copytree(MASKED_LM, directory)
    config = json.loads((MASKED_LM / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, key: value}))
    for command in (("verify", directory), ("convert", directory, tmp_path / "out", "--to", "hf")):
        result = run_in_process(*command)
        assert result.exit_code == 2 and named in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("target", ["tf", "bert4keras", "hf-tf", "hf-flax", "keras-hub"])
def test_formats_without_the_model_refuse_it(target, tmp_path):
    """(The ONNX graph computes it: tests/test_onnx_positions.py.)"""
    out = tmp_path / "out"
    result = run_in_process("convert", MASKED_LM, out, "--to", target)
    assert result.exit_code == 2 and not out.exists()
    assert "would be another model" in result.stderr, result.stderr


def test_tokenizer_ids_are_transformers_5s():
    transformers = needs("transformers")
    needs("tokenizers")
    from bertconv.runtime.tokenization.select import open_tokenizer

    reference = transformers.AutoTokenizer.from_pretrained(MASKED_LM)
    ours = open_tokenizer(MASKED_LM / "tokenizer.json")
    for text in ("The capital of France is [MASK].", "the cat [MASK] on the [MASK]", "Paris,Rome  and Italy!",
                 "[MASK]", "  leading spaces", "héllo wörld"):
        assert ours.encode(text).ids == reference(text)["input_ids"], text


def test_fill_mask_ranks_as_transformers_5s_pipeline():
    transformers = needs("transformers")
    needs("tokenizers")
    text = "The capital of France is [MASK]."
    result = run_in_process("fill-mask", MASKED_LM, text, "--json", "--top-k", "3")
    assert result.exit_code == 0, result.stderr
    ours = json.loads(result.stdout)["masks"][0]["predictions"]
    model = transformers.AutoModelForMaskedLM.from_pretrained(MASKED_LM)
    tokenizer = transformers.AutoTokenizer.from_pretrained(MASKED_LM)
    pipe = transformers.pipeline("fill-mask", model=model, tokenizer=tokenizer)
    expected = pipe(text, top_k=3)
    assert [p["id"] for p in ours] == [e["token"] for e in expected]
    np.testing.assert_allclose([p["prob"] for p in ours], [e["score"] for e in expected], atol=1e-5)


def test_the_probe_runs_on_a_head_without_output_bias():
    """`decoder_bias` false: the probe starts from a uniform prior, and calls random weights untrained."""
    from bertconv.checks import trained

    result = trained.probe(formats.read(BIASED), "numpy")
    assert result.finite and result.gain < trained.PROBE_GAIN_TRAINED


def test_inspect_reads_every_fixture():
    for path in (MASKED_LM, BIASED, MODEL):
        result = run_in_process("inspect", path, "--json")
        assert result.exit_code == 0 and json.loads(result.stdout)["format"] == "hf-safetensors", result.stderr


@pytest.mark.parametrize("path", MASKED_LMS, ids=lambda p: p.name)
def test_verify_finds_the_head_complete_and_probes_it(path):
    result = run_in_process("verify", path, "--deep", "--json")
    report = json.loads(result.stdout)
    assert report["mlm_head"] == "complete", report
    assert result.exit_code == 1 and any("untrained MLM head" in p and "context gain" in p for p in report["problems"])


def test_verify_knows_a_freshly_initialized_head_by_its_signs(tmp_path):
    transformers = needs("transformers")
    config = transformers.AutoConfig.from_pretrained(MASKED_LM)
    transformers.AutoModelForMaskedLM.from_config(config).save_pretrained(tmp_path / "fresh")
    result = run_in_process("verify", tmp_path / "fresh", "--json")
    report = json.loads(result.stdout)
    assert result.exit_code == 1 and report["mlm_head"] == "complete", report
    assert any("output bias zeros, LayerNorm gamma ones" in p for p in report["problems"]), report


@pytest.mark.parametrize("path", MASKED_LMS, ids=lambda p: p.name)
def test_a_pytorch_model_bin_reads_as_its_safetensors(path, tmp_path):
    """torch.save of the state dict, as transformers 4 saved it: the tied decoder shares the word
    table's storage, and is read as a copy of it."""
    torch = needs("torch")
    transformers = needs("transformers")
    directory = tmp_path / "bin"
    directory.mkdir()
    shutil.copy(path / "config.json", directory)
    model = transformers.AutoModelForMaskedLM.from_pretrained(path)
    torch.save(model.state_dict(), directory / "pytorch_model.bin")
    assert formats.read(directory).format == "hf-pytorch-bin"
    result = run_in_process("diff", path, directory)
    assert result.exit_code == 0, result.stdout


def test_without_its_config_the_layer_kinds_are_unknown_and_refused(tmp_path):
    directory = tmp_path / "weights"
    directory.mkdir()
    shutil.copy(MASKED_LM / "model.safetensors", directory)
    result = run_in_process("audit", directory)
    assert result.exit_code == 2 and "sliding window" in result.stderr and "--config" in result.stderr


def test_layer_kinds_no_period_gives_are_a_caveat_for_transformers_4(tmp_path):
    """biased's sliding, global, sliding: transformers 4 would read the default period 3 instead."""
    converted = run_in_process("convert", BIASED, tmp_path / "out", "--to", "hf")
    assert converted.exit_code == 0 and "transformers 4 (4.57 checked)" in converted.stderr, converted.stderr
    assert "global_attn_every_n_layers" not in json.loads((tmp_path / "out" / "config.json").read_text())
    periodic = run_in_process("convert", MASKED_LM, tmp_path / "periodic", "--to", "hf")
    assert periodic.exit_code == 0 and "transformers 4" not in periodic.stderr
    assert json.loads((tmp_path / "periodic" / "config.json").read_text())["global_attn_every_n_layers"] == 2
