"""fairseq RoBERTa, which has no token types (type_vocab_size 0), runs in both runtimes and
converts to files transformers 5 runs with the same logits (issue 25, item 4).

The oracle is transformers 5's `RobertaForMaskedLM` filled from the fairseq state dict the way
transformers' own converter (convert_roberta_original_pytorch_checkpoint_to_pytorch.py) fills
it: each tensor copied, the token-type table one all-zero row (type_vocab_size 1). Writers whose
library looks token types up (hf, hf-tf, hf-flax) write that row; a note says it is the same
computation.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bertconv import formats
from bertconv import runtime as runtimes
from bertconv.checks.audit import audit
from bertconv.conversion import convert, with_one_token_type
from bertconv.errors import BadInput
from bertconv.runtime import NumpyBert

from conftest import FIXTURES, run_in_process

FAIRSEQ = FIXTURES / "family_google" / "fairseq"
#: The issue's bound for float32 logits against transformers 5; measured 7.5e-8 (NumPy runtime),
#: 0 (torch runtime) and 0 (the converted file run by transformers 5).
LOGITS_ATOL = 1e-4

#: The same tensors, some stored transposed (TF's and Flax's [in, out] kernels), whose views BLAS
#: sums in another order: measured 2.4e-6 on these logits (3.5e-6 for the same model converted
#: with its token types: the layout, not the zero row).
SAME_VALUES_ATOL = 1e-5

#: fairseq's per-layer names -> transformers' RoBERTa names (the converter's assignments).
_LAYER = {"self_attn.q_proj": "attention.self.query", "self_attn.k_proj": "attention.self.key",
          "self_attn.v_proj": "attention.self.value", "self_attn.out_proj": "attention.output.dense",
          "self_attn_layer_norm": "attention.output.LayerNorm", "fc1": "intermediate.dense",
          "fc2": "output.dense", "final_layer_norm": "output.LayerNorm"}


def _torch():
    """torch, imported by the tests that use it: the module's others (the NumPy runtime's) run without it."""
    return pytest.importorskip("torch", reason="torch builds the transformers 5 reference")


def _transformers():
    return pytest.importorskip("transformers", reason="transformers 5 is the oracle for RoBERTa's logits")


def reference_model(directory: Path):
    """transformers 5's RobertaForMaskedLM holding the fairseq checkpoint, filled as transformers'
    fairseq converter fills it (token types: one all-zero row)."""
    torch, transformers = _torch(), _transformers()
    saved = torch.load(directory / "model.pt", weights_only=False)  # our own fixture: trusted here
    args, state = saved["args"], saved["model"]
    scope = next(k for k in state if k.endswith("embed_tokens.weight")).split(".sentence_encoder")[0]
    encoder = f"{scope}.sentence_encoder"
    norm = "layernorm_embedding" if f"{encoder}.layernorm_embedding.weight" in state else "emb_layer_norm"
    word = state[f"{encoder}.embed_tokens.weight"]
    config = transformers.RobertaConfig(
        vocab_size=word.shape[0], hidden_size=args.encoder_embed_dim, num_hidden_layers=args.encoder_layers,
        num_attention_heads=args.encoder_attention_heads, intermediate_size=args.encoder_ffn_embed_dim,
        max_position_embeddings=state[f"{encoder}.embed_positions.weight"].shape[0], type_vocab_size=1,
        layer_norm_eps=1e-5, hidden_act=args.activation_fn, pad_token_id=1)
    model = transformers.RobertaForMaskedLM(config).eval()
    mapped = {
        "roberta.embeddings.word_embeddings.weight": word,
        "roberta.embeddings.position_embeddings.weight": state[f"{encoder}.embed_positions.weight"],
        "roberta.embeddings.token_type_embeddings.weight": torch.zeros(1, args.encoder_embed_dim),
        "roberta.embeddings.LayerNorm.weight": state[f"{encoder}.{norm}.weight"],
        "roberta.embeddings.LayerNorm.bias": state[f"{encoder}.{norm}.bias"],
        "lm_head.dense.weight": state[f"{scope}.lm_head.dense.weight"],
        "lm_head.dense.bias": state[f"{scope}.lm_head.dense.bias"],
        "lm_head.layer_norm.weight": state[f"{scope}.lm_head.layer_norm.weight"],
        "lm_head.layer_norm.bias": state[f"{scope}.lm_head.layer_norm.bias"],
        "lm_head.decoder.weight": state[f"{scope}.lm_head.weight"],
        "lm_head.decoder.bias": state[f"{scope}.lm_head.bias"],
        "lm_head.bias": state[f"{scope}.lm_head.bias"],
    }
    for i in range(args.encoder_layers):
        for theirs, ours in _LAYER.items():
            for kind in ("weight", "bias"):
                mapped[f"roberta.encoder.layer.{i}.{ours}.{kind}"] = state[f"{encoder}.layers.{i}.{theirs}.{kind}"]
    missing, unexpected = model.load_state_dict(mapped, strict=False)
    assert not unexpected and not [m for m in missing if "position_ids" not in m], (missing, unexpected)
    return model


def batch(config):
    """Two sequences [2, 9] starting with <s>, the second padded with fairseq's pad id (1)."""
    rng = np.random.default_rng(25)
    pad = config.position_offset - 1
    ids = rng.integers(4, config.vocab_size, size=(2, 9))
    ids[:, 0] = 0
    ids[1, 6:] = pad
    mask = np.ones((2, 9), dtype=np.int64)
    mask[1, 6:] = 0
    return ids, mask


def reference_logits(directory: Path, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    torch = _torch()
    with torch.no_grad():
        return reference_model(directory)(input_ids=torch.from_numpy(ids),
                                          attention_mask=torch.from_numpy(mask)).logits.numpy()


def runtime_logits(runtime, tree, ids, mask, token_type_ids=None) -> np.ndarray:
    logits = runtime(tree)(ids, token_type_ids, mask).mlm_logits
    return logits.numpy() if hasattr(logits, "numpy") else logits


@pytest.mark.parametrize("runtime", ["NumpyBert", "TorchBert"], ids=["numpy", "torch"])
@pytest.mark.parametrize("name", ["roberta", "roberta_decoder"])
def test_fairseq_runs_in_both_runtimes_as_transformers_computes_it(runtime, name):
    runtime = getattr(runtimes, runtime)
    tree = formats.read(FAIRSEQ / name)
    assert tree.config.type_vocab_size == 0 and "embeddings.token_type" not in tree
    ids, mask = batch(tree.config)
    expected = reference_logits(FAIRSEQ / name, ids, mask)
    got = runtime_logits(runtime, tree, ids, mask)
    assert np.abs(got - expected)[mask.astype(bool)].max() <= LOGITS_ATOL
    # All-zero token types are what no token types mean; any other type is refused, naming the fix.
    assert np.array_equal(runtime_logits(runtime, tree, ids, mask, np.zeros_like(ids)), got)
    types = np.zeros_like(ids)
    types[0, 3] = 1
    with pytest.raises(BadInput, match=r"token_type_ids holds 1, but the model has no token types "
                                       r"\(type_vocab_size 0\): pass zeros or no token_type_ids"):
        runtime(tree)(ids, types, mask)


def test_fairseq_runs_with_fairseqs_layer_norm_epsilon():
    """The reader states fairseq's epsilon (1e-5) as the format's fact: the runtime computes with it."""
    tree = formats.read(FAIRSEQ / "roberta")
    assert tree.config.provenance["layer_norm_eps"] == "format"
    assert NumpyBert(tree).numerics.layer_norm_eps == 1e-5


def test_converted_hf_runs_in_transformers_5_with_the_same_logits(tmp_path):
    source = formats.read(FAIRSEQ / "roberta")
    result = convert(source, tmp_path / "out", "hf")
    assert any("one all-zero token-type row (type_vocab_size 1)" in note and "the same computation" in note
               for note in result.notes), result.notes
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["type_vocab_size"] == 1 and written["model_type"] == "roberta"
    torch, transformers = _torch(), _transformers()
    model, info = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "out", output_loading_info=True)
    assert not any(info.values()), info
    assert torch.equal(model.roberta.embeddings.token_type_embeddings.weight, torch.zeros(1, 20))
    ids, mask = batch(source.config)
    with torch.no_grad():
        got = model.eval()(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits.numpy()
    expected = reference_logits(FAIRSEQ / "roberta", ids, mask)
    assert np.abs(got - expected)[mask.astype(bool)].max() <= LOGITS_ATOL


def test_the_round_trip_audits_consistently_and_computes_the_same(tmp_path):
    """hf -> our tree: the table read back is one zero row, the closed form counts it (W more
    parameters than the source), the logits are the source's bit for bit, and converting it
    again writes the same file."""
    source = formats.read(FAIRSEQ / "roberta")
    convert(source, tmp_path / "once", "hf")
    back = formats.read(tmp_path / "once")
    assert back.config.type_vocab_size == 1
    assert np.array_equal(back["embeddings.token_type"].tensor.read(), np.zeros((1, 20), dtype=np.float32))
    before, after = audit(source), audit(back)
    assert before["ok"] and after["ok"], (before["problems"], after["problems"])
    assert after["parameters"] == before["parameters"] + back.config.hidden_size
    ids, mask = batch(source.config)
    assert np.array_equal(runtime_logits(NumpyBert, back, ids, mask), runtime_logits(NumpyBert, source, ids, mask))
    again = convert(back, tmp_path / "twice", "hf")
    assert not any("token-type row" in note for note in again.notes)
    assert (tmp_path / "twice" / "model.safetensors").read_bytes() == \
        (tmp_path / "once" / "model.safetensors").read_bytes()


def test_convert_json_states_the_row_and_diff_outputs_agree(tmp_path):
    result = run_in_process("convert", FAIRSEQ / "roberta", tmp_path / "out", "--to", "hf", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["config"]["type_vocab_size"] == 0  # the source's, as every report states it
    assert any("all-zero token-type row" in note for note in report["notes"])
    outputs = run_in_process("diff", FAIRSEQ / "roberta", tmp_path / "out", "--outputs")
    assert "largest difference 0 " in outputs.stdout, outputs.stdout


@pytest.mark.parametrize("target", [t for t, fmt in formats.TARGETS.items() if fmt.token_type_table])
def test_every_writer_that_needs_a_table_writes_one_zero_row(tmp_path, target):
    """A BERT with no token types (as bert4keras' segment_vocab_size=0 builds), written by each
    target whose library looks token types up: one zero row, the same logits."""
    bert = formats.read(FIXTURES / "hf" / "masked_lm")
    params = {n: p for n, p in bert.params.items() if n != "embeddings.token_type"}
    untyped = replace(bert, config=replace(bert.config, type_vocab_size=0), params=params)
    result = convert(untyped, tmp_path / "out", target)
    assert any("one all-zero token-type row" in note for note in result.notes)
    back = formats.read(tmp_path / "out")
    assert back.config.type_vocab_size == 1
    assert not back["embeddings.token_type"].tensor.read().any()
    ids = np.random.default_rng(4).integers(0, bert.config.vocab_size, size=(2, 7))
    difference = np.abs(NumpyBert(back)(ids).mlm_logits - NumpyBert(untyped)(ids).mlm_logits).max()
    assert difference <= SAME_VALUES_ATOL


def test_with_one_token_type_keeps_the_dtype_and_model_order():
    source = formats.read(FAIRSEQ / "roberta")
    padded = with_one_token_type(source)
    names = list(padded.params)
    assert names[names.index("embeddings.word") + 1] == "embeddings.token_type"
    table = padded["embeddings.token_type"]
    assert table.tensor.dtype == source["embeddings.word"].tensor.dtype and table.tensor.shape == (1, 20)
    assert padded.config.provenance["type_vocab_size"] == "format" and source.config.type_vocab_size == 0


def test_verify_deep_runs_the_probe_on_a_fairseq_checkpoint():
    """The probe ran on the model (before, it failed on the token types and reported nothing)."""
    result = run_in_process("verify", FAIRSEQ / "roberta", "--deep", "--json")
    probe = json.loads(result.stdout)["mlm_trained"]["probe"]
    assert probe is not None and probe["positions"] > 0, result.stdout


@pytest.mark.parametrize("option, value", [("no_scale_embedding", False), ("layernorm_embedding", False),
                                           ("encoder_learned_pos", False)])
def test_a_fairseq_option_that_changes_robertas_computation_is_unread(option, value, tmp_path):
    """fairseq's `roberta` architectures fix these; a checkpoint trained otherwise (scaled
    embeddings, no embedding LayerNorm, sinusoidal positions) is another computation: every
    command that computes or converts refuses it, naming the option, unless accepted."""
    import argparse

    torch = _torch()
    saved = torch.load(FAIRSEQ / "roberta" / "model.pt", weights_only=False)  # our own fixture
    saved["args"] = argparse.Namespace(**{**vars(saved["args"]), option: value})
    torch.save(saved, tmp_path / "model.pt")
    refused = run_in_process("verify", tmp_path / "model.pt")
    assert refused.exit_code == 2 and option in refused.stderr and f"--accept-loss {option}" in refused.stderr
    assert run_in_process("verify", tmp_path / "model.pt", "--accept-loss", option).exit_code == 0
    assert run_in_process("verify", FAIRSEQ / "roberta" / "model.pt").exit_code == 0
