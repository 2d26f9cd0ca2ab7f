"""ALBERT, ELECTRA and RoBERTa in Hugging Face files (issue 16), with transformers 5 as the oracle:
every value read, bit-exact round trips, counts, logits of both runtimes, verify's tying, and
the refusal to write a family under another family's names."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from bertconv import formats
from bertconv.checks.audit import audit
from bertconv.checks.verify import verify
from bertconv.conversion import WriteOptions, convert
from bertconv.errors import BadInput
from bertconv.runtime import NumpyBert, TorchBert
from bertconv.runtime.inputs import position_ids

from conftest import FIXTURES, run_in_process

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from safetensors.numpy import load_file as load_numpy, save_file as save_numpy  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

FAMILY = FIXTURES / "family_hf"

#: fixture -> (transformers class, model_type, heads present)
FIXTURES_CLASSES = {
    "albert/pretraining_groups": ("AlbertForPreTraining", "albert", {"pooler", "mlm", "sop"}),
    "albert/pretraining_bin": ("AlbertForPreTraining", "albert", {"pooler", "mlm", "sop"}),
    "albert/masked_lm": ("AlbertForMaskedLM", "albert", {"mlm"}),
    "albert/model": ("AlbertModel", "albert", {"pooler"}),
    "electra/generator": ("ElectraForMaskedLM", "electra", {"mlm"}),
    "electra/discriminator": ("ElectraForPreTraining", "electra", {"rtd"}),
    "electra/model": ("ElectraModel", "electra", set()),
    "roberta/masked_lm": ("RobertaForMaskedLM", "roberta", {"mlm"}),
    "roberta/model": ("RobertaModel", "roberta", {"pooler"}),
}
SAFETENSORS_FIXTURES = [f for f in FIXTURES_CLASSES if not f.endswith("_bin")]

#: bertconv's outputs -> transformers' output names, per class.
OUTPUTS = {
    "AlbertForPreTraining": {"mlm_logits": "prediction_logits", "sop_logits": "sop_logits"},
    "AlbertForMaskedLM": {"mlm_logits": "logits"},
    "AlbertModel": {"sequence_output": "last_hidden_state", "pooled_output": "pooler_output"},
    "ElectraForMaskedLM": {"mlm_logits": "logits"},
    "ElectraForPreTraining": {"rtd_logits": "logits"},
    "ElectraModel": {"sequence_output": "last_hidden_state"},
    "RobertaForMaskedLM": {"mlm_logits": "logits"},
    "RobertaModel": {"sequence_output": "last_hidden_state", "pooled_output": "pooler_output"},
}


def reference_state(directory: Path) -> dict[str, "torch.Tensor"]:
    if (directory / "model.safetensors").exists():
        return load_file(directory / "model.safetensors")
    return torch.load(directory / "pytorch_model.bin", weights_only=True)


def reference_model(directory: Path, cls_name: str):
    return getattr(transformers, cls_name).from_pretrained(directory).eval()


# --- reading ------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", list(FIXTURES_CLASSES))
def test_every_value_read_equals_transformers_state_dict(fixture):
    cls_name, model_type, heads = FIXTURES_CLASSES[fixture]
    tree = formats.read(FAMILY / fixture)
    assert tree.config.model_type == model_type
    assert {h for h, present in tree.heads.as_dict().items() if present} == heads
    reference = reference_state(FAMILY / fixture)
    for param in tree:
        expected = reference[param.source].numpy()
        if param.name.endswith("kernel"):
            expected = expected.T  # nn.Linear [out, in] -> canonical [in, out]
        assert np.array_equal(param.tensor.read(), expected), param.source
    assert {p.source for p in tree} | {i.name for i in tree.ignored} == set(reference)
    assert not tree.ignored


def test_albert_groups_and_inner_layers_are_the_stored_layers_in_order():
    tree = formats.read(FAMILY / "albert" / "pretraining_groups")
    config = tree.config
    assert (config.num_hidden_groups, config.inner_group_num, config.stored_layers) == (2, 2, 4)
    assert config.layer_schedule() == [0, 1, 0, 1, 2, 3, 2, 3]
    assert tree["layers.3.ffn.intermediate.kernel"].source == \
        "albert.encoder.albert_layer_groups.1.albert_layers.1.ffn.weight"
    assert tree["layers.1.attention_norm.gamma"].source == \
        "albert.encoder.albert_layer_groups.0.albert_layers.1.attention.LayerNorm.weight"
    assert tree["embeddings.projection.kernel"].tensor.shape == (6, 16)  # [E, H]
    assert tree["mlm.transform.kernel"].tensor.shape == (16, 6)  # [H, E]


def test_config_fields_of_each_family():
    electra = formats.read(FAMILY / "electra" / "model").config
    assert (electra.embedding_width, electra.embedding_projection) == (14, False)
    generator = formats.read(FAMILY / "electra" / "generator").config
    assert (generator.embedding_width, generator.hidden_size, generator.embedding_projection) == (8, 12, True)
    roberta = formats.read(FAMILY / "roberta" / "masked_lm").config
    assert (roberta.position_offset, roberta.type_vocab_size, roberta.layer_norm_eps) == (2, 1, 1e-5)
    albert = formats.read(FAMILY / "albert" / "masked_lm").config
    assert albert.hidden_act == "gelu_tanh"  # transformers' ALBERT "gelu_new"


@pytest.mark.parametrize("fixture,model_type", [("electra/generator", "electra"), ("electra/discriminator", "electra"),
                                                ("roberta/masked_lm", "roberta")])
def test_without_a_config_the_names_tell_the_family(tmp_path, fixture, model_type):
    shutil.copy(FAMILY / fixture / "model.safetensors", tmp_path / "model.safetensors")
    tree = formats.read(tmp_path)
    reference = formats.read(FAMILY / fixture).config
    assert tree.config.model_type == model_type
    for field in ("vocab_size", "hidden_size", "embedding_width", "embedding_projection", "num_hidden_layers",
                  "intermediate_size", "max_position_embeddings", "type_vocab_size", "position_offset"):
        assert getattr(tree.config, field) == getattr(reference, field), field


@pytest.mark.parametrize("source", [FAMILY / "albert" / "masked_lm" / "model.safetensors",
                                    FIXTURES / "albert_zh" / "tf" / "albert_model.ckpt"])
def test_albert_without_a_config_is_audited_and_nothing_computes_it(source, tmp_path):
    """An ALBERT's count does not depend on how many times its shared layers are applied: audit
    counts what the tensors determine and says what they cannot; whatever computes or converts
    asks for the config, naming the fields."""
    for file in source.parent.glob(source.name + "*"):
        shutil.copy(file, tmp_path / file.name)
    bare = tmp_path / source.name
    with_config = formats.read(source.parent)
    audited = run_in_process("audit", bare, "--json")
    report = json.loads(audited.stdout)
    assert audited.exit_code == 0 and report["parameters"] == audit(with_config)["parameters"]
    assert report["config"]["provenance"]["num_hidden_layers"] == "unknown"
    assert any("no config states num_hidden_layers" in note for note in report["notes"])
    assert "num_hidden_layers=?" in run_in_process("audit", bare).stdout
    for args in (["verify", bare], ["fill-mask", bare, "a [MASK]"], ["diff", bare, source.parent],
                 ["convert", bare, tmp_path / "out", "--to", "tf"]):
        refused = run_in_process(*args)
        assert refused.exit_code == 2 and "no config states num_hidden_layers" in refused.stderr, args
    assert not (tmp_path / "out").exists()


def test_a_config_of_another_family_is_refused(tmp_path):
    shutil.copy(FAMILY / "albert" / "masked_lm" / "model.safetensors", tmp_path / "model.safetensors")
    shutil.copy(FAMILY / "roberta" / "masked_lm" / "config.json", tmp_path / "config.json")
    with pytest.raises(BadInput, match="config is for a roberta model, but the checkpoint holds a albert"):
        formats.read(tmp_path)


def test_an_inner_layer_the_config_does_not_have_is_refused(tmp_path):
    shutil.copy(FAMILY / "albert" / "pretraining_groups" / "model.safetensors", tmp_path / "model.safetensors")
    config = json.loads((FAMILY / "albert" / "pretraining_groups" / "config.json").read_text())
    config["inner_group_num"] = 1
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(BadInput, match="inner layer 1 of group 0, but the config says inner_group_num is 1"):
        formats.read(tmp_path)


def test_albert_config_without_hidden_act_is_gelu_new(tmp_path):
    shutil.copy(FAMILY / "albert" / "masked_lm" / "model.safetensors", tmp_path / "model.safetensors")
    config = json.loads((FAMILY / "albert" / "masked_lm" / "config.json").read_text())
    del config["hidden_act"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert formats.read(tmp_path).config.hidden_act == "gelu_tanh"
    assert transformers.AlbertConfig.from_pretrained(tmp_path).hidden_act == "gelu_new"


# --- writing ------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", SAFETENSORS_FIXTURES)
def test_round_trip_is_byte_identical_to_save_pretrained(tmp_path, fixture):
    tree = formats.read(FAMILY / fixture)
    formats.TARGETS["hf"].write(tree, tmp_path, options=WriteOptions())
    assert (tmp_path / "model.safetensors").read_bytes() == (FAMILY / fixture / "model.safetensors").read_bytes()


@pytest.mark.parametrize("fixture", list(FIXTURES_CLASSES))
def test_written_checkpoint_loads_in_transformers_as_the_same_model(tmp_path, fixture):
    cls_name = FIXTURES_CLASSES[fixture][0]
    convert(formats.read(FAMILY / fixture), tmp_path / "out", "hf")
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["architectures"] == [cls_name]
    model, info = getattr(transformers, cls_name).from_pretrained(tmp_path / "out", output_loading_info=True)
    assert not any(info.values()), info
    reference = reference_model(FAMILY / fixture, cls_name)
    assert model.config.hidden_act == reference.config.hidden_act
    for name, value in reference.state_dict().items():
        assert torch.equal(model.state_dict()[name], value), name
    assert formats.read(tmp_path / "out").config == formats.read(FAMILY / fixture).config


def test_roberta_config_states_its_special_ids(tmp_path):
    convert(formats.read(FAMILY / "roberta" / "masked_lm"), tmp_path / "out", "hf")
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (written["pad_token_id"], written["bos_token_id"], written["eos_token_id"]) == (1, 0, 2)
    assert written["type_vocab_size"] == 1 and written["max_position_embeddings"] == 30


#: Every (target, fixture) whose family the target's writer has no names for.
REFUSED = [(target, fixture) for target in formats.TARGETS
           for fixture in ("albert/pretraining_groups", "electra/generator", "roberta/masked_lm")
           if FIXTURES_CLASSES[fixture][1] not in formats.TARGETS[target].families]


@pytest.mark.parametrize("target, fixture", REFUSED)
def test_converting_across_families_is_refused(tmp_path, target, fixture):
    family = FIXTURES_CLASSES[fixture][1]
    result = run_in_process("convert", FAMILY / fixture, tmp_path / "out", "--to", target)
    assert result.exit_code == 2, result.stderr
    assert f"model (model_type '{family}')" in result.stderr and f"the {target} writer has names for bert" \
        in result.stderr and "--to hf" in result.stderr
    assert not (tmp_path / "out").exists()


def test_the_refusals_cover_a_family_no_google_writer_has_and_bert_only_writers():
    assert ("tf", "roberta/masked_lm") in REFUSED and ("bert4keras", "roberta/masked_lm") in REFUSED


# --- counts -------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", list(FIXTURES_CLASSES))
def test_audit_equals_transformers_num_parameters(fixture):
    cls_name = FIXTURES_CLASSES[fixture][0]
    report = audit(formats.read(FAMILY / fixture))
    assert report["ok"], report["problems"]
    assert report["parameters"] == reference_model(FAMILY / fixture, cls_name).num_parameters()


# --- logits -------------------------------------------------------------------------------


def _batch(config, seed: int):
    """Two sequences [2, 9], the second padded (RoBERTa's pad id, where positions stop counting)."""
    rng = np.random.default_rng(seed)
    pad = config.position_offset - 1 if config.position_offset else 0
    ids = rng.integers(3, config.vocab_size, size=(2, 9))
    ids[:, 0] = 0
    ids[1, 6:] = pad
    types = rng.integers(0, config.type_vocab_size, size=(2, 9))
    mask = np.ones((2, 9), dtype=np.int64)
    mask[1, 6:] = 0
    return ids, types, mask


@pytest.mark.parametrize("runtime", [NumpyBert, TorchBert], ids=["numpy", "torch"])
@pytest.mark.parametrize("fixture", list(FIXTURES_CLASSES))
def test_logits_match_transformers(fixture, runtime):
    cls_name = FIXTURES_CLASSES[fixture][0]
    tree = formats.read(FAMILY / fixture)
    ids, types, mask = _batch(tree.config, seed=len(fixture))
    with torch.no_grad():
        expected = reference_model(FAMILY / fixture, cls_name)(
            input_ids=torch.tensor(ids), token_type_ids=torch.tensor(types), attention_mask=torch.tensor(mask))
    output = runtime(tree)(ids, types, mask)
    for ours, theirs in OUTPUTS[cls_name].items():
        got = getattr(output, ours)
        got = got.numpy() if isinstance(got, torch.Tensor) else got
        assert got.shape == tuple(expected[theirs].shape), ours
        np.testing.assert_allclose(got, expected[theirs].numpy(), rtol=0, atol=1e-5, err_msg=ours)


def test_roberta_positions_are_transformers_positions():
    config = formats.read(FAMILY / "roberta" / "masked_lm").config
    ids = np.array([[0, 7, 1, 9, 2, 1, 1], [0, 5, 6, 8, 9, 10, 2]])
    expected = transformers.models.roberta.modeling_roberta.RobertaEmbeddings.create_position_ids_from_input_ids(
        torch.tensor(ids), padding_idx=1)
    assert np.array_equal(position_ids(config, ids), expected.numpy())


def test_roberta_sequence_longer_than_its_positions_is_refused():
    model = NumpyBert(formats.read(FAMILY / "roberta" / "masked_lm"))  # P = 30 rows, the first 2 unused
    assert model.encode(np.full((1, 28), 5)).shape == (1, 28, 16)
    with pytest.raises(BadInput, match="at most 28 tokens"):
        model.encode(np.full((1, 29), 5))


# --- verify -------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture,tying", [("albert/pretraining_groups", "no decoder stored"),
                                           ("albert/pretraining_bin", "shares storage"),
                                           ("electra/generator", "no decoder stored"),
                                           ("roberta/masked_lm", "no decoder stored")])
def test_verify_finds_the_head_complete_and_tied(fixture, tying):
    report = verify(formats.read(FAMILY / fixture), deep=True, allow_untrained_mlm=True)  # random heads
    assert report["ok"], report
    assert (report["mlm_head"], report["tying"]) == ("complete", "tied") and tying in report["tying_detail"]


def test_verify_judges_a_discriminator_by_its_rtd_head_not_as_a_masked_lm():
    report = verify(formats.read(FAMILY / "electra" / "discriminator"))
    assert report["ok"] and report["verified_head"] == "rtd" and report["rtd"]["head"] == "complete"
    assert report["mlm_head"] == "missing" and report["mlm_trained"]["verdict"] == "n/a"


@pytest.mark.parametrize("fixture,decoder,word", [
    ("albert/masked_lm", "predictions.decoder.weight", "albert.embeddings.word_embeddings.weight"),
    ("electra/generator", "generator_lm_head.weight", "electra.embeddings.word_embeddings.weight"),
    ("roberta/masked_lm", "lm_head.decoder.weight", "roberta.embeddings.word_embeddings.weight"),
])
def test_verify_compares_a_stored_decoder_with_the_word_embeddings(tmp_path, fixture, decoder, word):
    shutil.copy(FAMILY / fixture / "config.json", tmp_path / "config.json")
    state = load_numpy(FAMILY / fixture / "model.safetensors")
    state[decoder] = state[word].copy()
    save_numpy(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    report = verify(formats.read(tmp_path))
    assert report["tying"] == "tied" and "bit-equal" in report["tying_detail"], report

    state[decoder][3, 1] += 1.0
    save_numpy(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    report = verify(formats.read(tmp_path))
    assert report["tying"] == "untied" and not report["ok"]
    assert any(decoder in problem and "tie_word_embeddings true" in problem for problem in report["problems"])


# --- fill-mask with a tokenizer.json -----------------------------------------------------------

FILL_MASK = {
    "albert": ("AlbertForMaskedLM", "[MASK]", dict(cls_token="[CLS]", sep_token="[SEP]", pad_token="<pad>",
                                                   unk_token="<unk>")),
    "roberta": ("RobertaForMaskedLM", "<mask>", dict(bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                                     unk_token="<unk>")),
}


@pytest.mark.parametrize("text", ["the cat {mask} on the mat", "{mask} capital of italy is {mask}.",
                                  "Paris is the Capital of {mask}"])
@pytest.mark.parametrize("family", list(FILL_MASK))
def test_fill_mask_with_tokenizer_json_matches_the_pipeline(family, text):
    from bertconv.runtime import fill_mask
    from bertconv.runtime import open_tokenizer

    cls_name, mask, specials = FILL_MASK[family]
    directory = FAMILY / family / "masked_lm"
    transformers.logging.set_verbosity_error()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_file=str(directory / "tokenizer.json"),
                                                     mask_token=mask, **specials)
    pipeline = transformers.pipeline("fill-mask", model=reference_model(directory, cls_name), tokenizer=tokenizer,
                                     top_k=4)
    expected = pipeline(text.format(mask=mask))
    expected = expected if isinstance(expected[0], list) else [expected]
    ours = fill_mask(NumpyBert(formats.read(directory)), open_tokenizer(directory / "tokenizer.json"),
                     text.format(mask=mask), top_k=4)
    assert len(ours) == len(expected) == text.count("{mask}")
    for predictions, reference in zip(ours, expected):
        assert [p.id for p in predictions.predictions] == [r["token"] for r in reference]
        np.testing.assert_allclose([p.prob for p in predictions.predictions], [r["score"] for r in reference],
                                   rtol=0, atol=1e-5)


def test_fill_mask_command_finds_the_tokenizer_json_and_takes_mask_for_its_mask_token():
    directory = FAMILY / "roberta" / "masked_lm"
    with_own = run_in_process("fill-mask", directory, "the cat <mask> on the mat", "--json", "--top-k", "3")
    with_bert = run_in_process("fill-mask", directory, "the cat [MASK] on the mat", "--json", "--top-k", "3")
    assert with_own.exit_code == 0, with_own.stderr
    assert json.loads(with_own.stdout)["masks"] == json.loads(with_bert.stdout)["masks"]
    assert len(json.loads(with_own.stdout)["masks"][0]["predictions"]) == 3


def test_a_broken_tokenizer_json_is_bad_input(tmp_path):
    for name in ("model.safetensors", "config.json"):
        shutil.copy(FAMILY / "roberta" / "masked_lm" / name, tmp_path / name)
    (tmp_path / "tokenizer.json").write_text('{"model": 3}')
    result = run_in_process("fill-mask", tmp_path, "the <mask>")
    assert result.exit_code == 2 and "tokenizer.json" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("runtime", [NumpyBert, TorchBert], ids=["numpy", "torch"])
def test_albert_pretraining_loss_runs_sop_and_matches_transformers(runtime):
    """Google's MLM loss divides by sum(weights) + 1e-5 where transformers takes the mean: with
    M slots they differ by a factor M / (M + 1e-5), well inside the tolerance."""
    directory = FAMILY / "albert" / "pretraining_groups"
    tree = formats.read(directory)
    ids, types, mask = _batch(tree.config, seed=3)
    positions = np.array([[1, 4, 5], [2, 3, 5]])
    label_ids = np.array([[7, 9, 11], [13, 17, 19]])
    order = np.array([1, 0])
    labels = np.full(ids.shape, -100)
    labels[np.arange(2)[:, None], positions] = label_ids
    with torch.no_grad():
        expected = reference_model(directory, "AlbertForPreTraining")(
            input_ids=torch.tensor(ids), token_type_ids=torch.tensor(types), attention_mask=torch.tensor(mask),
            labels=torch.tensor(labels), sentence_order_label=torch.tensor(order)).loss.item()
    loss = runtime(tree).pretraining_loss(ids, types, mask, positions, label_ids, next_sentence_labels=order)
    assert float(loss.total) == pytest.approx(expected, abs=1e-4)
    assert float(loss.nsp) > 0


def test_bert_names_with_another_family_config_are_refused_naming_both(tmp_path):
    shutil.copy(FIXTURES / "hf" / "pretraining" / "model.safetensors", tmp_path / "model.safetensors")
    shutil.copy(FAMILY / "albert" / "masked_lm" / "config.json", tmp_path / "config.json")
    with pytest.raises(BadInput, match="config is for a albert model, but the checkpoint holds a bert"):
        formats.read(tmp_path)


def test_encoder_only_names_take_the_family_of_the_config():
    """RobertaModel's names are BertModel's: only config.json tells them apart."""
    tree = formats.read(FAMILY / "roberta" / "model")
    assert tree["embeddings.word"].source == "embeddings.word_embeddings.weight"
    assert (tree.config.model_type, tree.config.position_offset) == ("roberta", 2)


def test_albert_names_in_the_tables_flat_spelling_are_not_parameters(tmp_path):
    shutil.copy(FAMILY / "albert" / "masked_lm" / "config.json", tmp_path / "config.json")
    state = load_numpy(FAMILY / "albert" / "masked_lm" / "model.safetensors")
    flat = "albert.encoder.albert_layers.0.ffn.bias"
    state[flat] = state.pop("albert.encoder.albert_layer_groups.0.albert_layers.0.ffn.bias")
    save_numpy(state, tmp_path / "model.safetensors")
    tree = formats.read(tmp_path)
    assert "layers.0.ffn.intermediate.bias" not in tree and flat in {i.name for i in tree.ignored}
    assert not audit(tree)["ok"]


def test_the_probe_runs_a_roberta_within_its_offset_positions():
    report = verify(formats.read(FAMILY / "roberta" / "masked_lm"), probe=True, allow_untrained_mlm=True)
    probe = report["mlm_trained"]["probe"]
    assert probe is not None and probe["positions"] > 0, report["problems"]
    assert not any("could not run" in problem for problem in report["problems"])
