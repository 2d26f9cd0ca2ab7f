"""ALBERT, ELECTRA and RoBERTa in Google TF, bert4keras and fairseq files (issue 16).

Values are checked against the libraries that define the formats: TensorFlow's checkpoint
reader, bert4keras' own models (which load Google's ALBERT and ELECTRA names through their
`variable_mapping`), torch for fairseq's pickles. The real ALBERT and ELECTRA index files (no
data published) must audit to the figures TensorFlow measured (../shared/real/README.md).
"""

from __future__ import annotations

import argparse
import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, real_file, run_cli, run_in_process
from bertconv import formats
from bertconv.checks.audit import audit
from bertconv.containers.tensorflow import bundle as tf_bundle
from bertconv.containers.tensorflow import bundle_write as tf_bundle_write
from bertconv.conversion import convert
from bertconv.errors import BadInput
from bertconv.formats.keras import bert4keras_table
from bertconv.formats import fairseq

FAMILY = FIXTURES / "family_google"
TF = FAMILY / "tf"
B4K = FAMILY / "bert4keras"
FAIRSEQ = FAMILY / "fairseq"


# --- the real index files ------------------------------------------------------------------


def _real(tmp_path: Path, stem: str, configs: tuple[str, ...]) -> Path:
    """The real index and its configs, copied under their published names."""
    shutil.copy(real_file(f"{stem}.ckpt.index"), tmp_path / f"{stem}.ckpt.index")
    for name in configs:
        shutil.copy(real_file(f"{stem}.{name}"), tmp_path / f"{stem}.{name}")
    return tmp_path / f"{stem}.ckpt.index"


def test_real_albert_audits_to_tensorflows_figure_with_the_optimizer_set_aside(tmp_path):
    index = _real(tmp_path, "albert-small-zh", ("albert_config.json",))
    tree = formats.read(index)
    report = audit(tree)
    assert report["ok"], report["problems"]
    assert report["parameters"] == report["expected_parameters"] == 4_813_706
    assert report["heads"] == {"pooler": True, "mlm": True, "nsp": False, "sop": True, "rtd": False, "contact": False}
    assert tree.config.model_type == "albert" and tree.config.embedding_width == 128
    assert tree.config.stored_layers == 1 and tree.config.num_hidden_layers == 6
    # 64 Adam slots and global_step: 65 entries, 9,627,413 values, none counted.
    assert len(report["ignored"]) == 65 and report["ignored_parameters"] == 9_627_413
    assert tree["layers.0.ffn.output.kernel"].source.endswith("group_0/inner_group_0/ffn_1/intermediate/output/dense/kernel")


@pytest.mark.parametrize("model,figure,head", [(None, 3_408_200, "mlm"), ("discriminator", 12_346_625, "rtd")])
def test_real_electra_reads_the_generator_by_default_and_the_discriminator_on_request(tmp_path, model, figure, head):
    index = _real(tmp_path, "electra-180g-small", ("generator_config.json", "discriminator_config.json"))
    tree = formats.read(index, model=model)
    report = audit(tree)
    assert report["ok"], report["problems"]
    assert report["parameters"] == figure and report["model"] == (model or "generator")
    assert [name for name, present in report["heads"].items() if present] == [head]
    other = "discriminator" if model is None else "generator"
    assert any(f"--model {other}" in entry["reason"] for entry in report["ignored"])
    # Each model is read with its own config: the generator is the narrower one.
    assert tree.config.hidden_size == (64 if model is None else 256)


def test_real_index_files_work_with_the_commands_that_need_no_data(tmp_path):
    albert = _real(tmp_path, "albert-small-zh", ("albert_config.json",))
    electra = _real(tmp_path, "electra-180g-small", ("generator_config.json", "discriminator_config.json"))
    result = run_in_process("audit", electra, "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["model"] == "generator"
    result = run_in_process("inspect", electra, "--model", "discriminator")
    assert result.exit_code == 0 and "model discriminator" in result.stdout
    for path in (albert, electra):
        result = run_in_process("verify", path, "--headers-only")
        assert result.exit_code == 0, result.stdout + result.stderr


# --- Google TF: values against TensorFlow ----------------------------------------------------


@pytest.mark.parametrize("fixture,model", [("albert_groups", None), ("albert", None), ("electra", None),
                                           ("electra", "discriminator")])
def test_tf_values_are_tensorflows_bit_for_bit(fixture, model):
    tf = pytest.importorskip("tensorflow")
    reader = tf.train.load_checkpoint(str(TF / fixture / "bert_model.ckpt"))
    tree = formats.read(TF / fixture, model=model)
    for param in tree:
        expected = reader.get_tensor(param.source)
        if param.source.endswith("seq_relationship/output_weights"):
            expected = expected.T
        got = param.tensor.read()
        assert got.dtype == expected.dtype and np.array_equal(got, expected), param.source


def test_albert_groups_number_the_stored_layers_group_major():
    tree = formats.read(TF / "albert_groups")
    assert tree.config.num_hidden_groups == 2 and tree.config.inner_group_num == 2
    for k in range(4):
        assert f"/group_{k // 2}/inner_group_{k % 2}/" in tree[f"layers.{k}.attention.query.kernel"].source
    assert audit(tree)["ok"]


def test_electra_generator_shares_the_discriminators_embeddings():
    generator = formats.read(TF / "electra")
    discriminator = formats.read(TF / "electra", model="discriminator")
    assert generator["embeddings.word"].source == discriminator["embeddings.word"].source == \
        "electra/embeddings/word_embeddings"
    assert generator["embeddings.projection.kernel"].source == "generator/embeddings_project/kernel"
    assert generator.config.hidden_size == 12 and discriminator.config.hidden_size == 36


@pytest.mark.parametrize("fixture,model", [("albert_groups", None), ("electra", None), ("electra", "discriminator")])
def test_tf_round_trip_is_bit_exact_and_keeps_googles_names(tmp_path, fixture, model):
    tf = pytest.importorskip("tensorflow")
    tree = formats.read(TF / fixture, model=model)
    convert(tree, tmp_path / "out", "tf")
    back = formats.read(tmp_path / "out")
    assert back.model == tree.model and back.config == tree.config
    assert [p.source for p in back] == [p.source for p in tree]
    written = tf.train.load_checkpoint(str(tmp_path / "out" / "bert_model.ckpt"))
    for param in tree:
        assert np.array_equal(written.get_tensor(param.source), tf.train.load_checkpoint(
            str(TF / fixture / "bert_model.ckpt")).get_tensor(param.source)), param.source
    # An ELECTRA model is written alone: nothing of the other model is in the file.
    assert not back.ignored


def test_model_option_is_refused_where_a_file_holds_one_model(tmp_path):
    with pytest.raises(BadInput, match="holds one model"):
        formats.read(TF / "albert", model="generator")
    with pytest.raises(BadInput, match="--model discriminator does not apply"):
        formats.read(FIXTURES / "hf" / "pretraining", model="discriminator")
    convert(formats.read(TF / "electra", model="discriminator"), tmp_path / "disc", "tf")
    with pytest.raises(BadInput, match="holding no generator"):
        formats.read(tmp_path / "disc", model="generator")
    result = run_in_process("audit", TF / "albert", "--model", "discriminator")
    assert result.exit_code == 2 and "--model discriminator applies to ELECTRA" in result.stderr


def test_the_generic_config_applies_to_an_electra_model_only_when_it_is_alone(tmp_path):
    directory = tmp_path / "both"
    shutil.copytree(TF / "electra", directory)
    (directory / "generator_config.json").unlink()
    (directory / "bert_config.json").write_text((TF / "electra" / "discriminator_config.json").read_text())
    # Two models: a bert_config.json cannot say which it describes, so the generator's sizes
    # come from its shapes (and the stated head default), not from the discriminator's config.
    tree = formats.read(directory)
    assert tree.config.hidden_size == 12 and tree.config.provenance["hidden_size"] == "shapes"
    assert formats.read(directory, model="discriminator").config.provenance["hidden_size"] == "file"


# --- bert4keras ---------------------------------------------------------------------------


def _bert4keras_model(config: Path, flags: dict, checkpoint: Path | None = None):
    pytest.importorskip("bert4keras")
    from bert4keras.models import build_transformer_model
    return build_transformer_model(str(config), str(checkpoint) if checkpoint else None, **flags)


def _layer_values(model) -> dict[str, np.ndarray]:
    """`<layer>/<weight name>` -> value, for every weight of a bert4keras model."""
    return {f"{layer.name}/{w.name.split('/', 1)[1] if '/' in w.name else w.name}": v
            for layer in model.layers for w, v in zip(layer.weights, layer.get_weights())}


@pytest.mark.parametrize("name", ["albert", "electra"])
def test_bert4keras_values_and_counts_are_bert4keras_own(name):
    flags = json.loads((B4K / name / "fixture.json").read_text())
    model = _bert4keras_model(B4K / name / "bert_config.json", flags)
    model.load_weights(str(B4K / name / "bert4keras_model.h5"))
    tree = formats.read(B4K / name)
    assert tree.config.model_type == name
    family = bert4keras_table.FAMILY_BY_TYPE[name]
    for layer in model.layers:
        kind = family.kind_of(layer.name)
        if kind is None:
            assert not layer.weights, layer.name
            continue
        slots = kind.slots_for(len(layer.weights))
        for slot, value in zip(slots, layer.get_weights(), strict=True):
            canonical = family.table.match(f"{layer.name}/{slot.role}").canonical
            assert np.array_equal(tree[canonical].tensor.read(), value), (layer.name, slot.role)
    report = audit(tree)
    assert report["ok"] and report["parameters"] == model.count_params()


@pytest.mark.parametrize("name,tf_fixture,model", [("albert", "albert", None), ("electra", "electra", "discriminator")])
def test_bert4keras_holds_what_it_loads_from_googles_names(name, tf_fixture, model):
    """The bert4keras fixtures are bert4keras loading the Google fixtures: both read the same."""
    tree = formats.read(B4K / name)
    google = formats.read(TF / tf_fixture, model=model)
    assert list(tree.params) == list(google.params)
    for param in google:
        assert np.array_equal(tree[param.name].tensor.read(), param.tensor.read()), param.name


@pytest.mark.parametrize("name,tf_fixture,model,flags", [
    ("albert", "albert", None, dict(model="albert", with_pool=True, with_nsp=True, with_mlm=True)),
    ("electra", "electra", "discriminator", dict(model="electra", with_discriminator=True)),
])
def test_tf_to_bert4keras_to_tf_is_bit_exact_and_each_loads_in_bert4keras(tmp_path, name, tf_fixture, model, flags):
    source = formats.read(TF / tf_fixture, model=model)
    convert(source, tmp_path / "b4k", "bert4keras")
    written = formats.read(tmp_path / "b4k")
    reference = _bert4keras_model(tmp_path / "b4k" / "bert_config.json", flags)
    reference.load_weights(str(tmp_path / "b4k" / "bert4keras_model.h5"))
    ours = _layer_values(reference)
    theirs = _layer_values(_bert4keras_model(B4K / name / "bert_config.json", flags,
                                             TF / tf_fixture / "bert_model.ckpt"))
    assert ours.keys() == theirs.keys() and all(np.array_equal(ours[k], theirs[k]) for k in ours)
    convert(written, tmp_path / "tf", "tf")
    back = formats.read(tmp_path / "tf")
    assert list(back.params) == list(source.params)
    for param in source:
        assert np.array_equal(back[param.name].tensor.read(), param.tensor.read()), param.name
    # bert4keras loads our Google names into the same weights.
    loaded = _layer_values(_bert4keras_model(B4K / name / "bert_config.json", flags, tmp_path / "tf" / "bert_model.ckpt"))
    assert all(np.array_equal(loaded[k], theirs[k]) for k in theirs)


def test_bert4keras_refuses_albert_with_more_than_one_shared_layer(tmp_path):
    with pytest.raises(BadInput, match="shares one layer"):
        convert(formats.read(TF / "albert_groups"), tmp_path / "out", "bert4keras")


def test_electra_generator_goes_to_bert4keras_as_the_bert_it_builds_with_an_embedding_size(tmp_path):
    """bert4keras' model='bert' with embedding_size != hidden_size and with_mlm is the generator."""
    generator = formats.read(TF / "electra")
    convert(generator, tmp_path / "b4k", "bert4keras")
    model = _bert4keras_model(tmp_path / "b4k" / "bert_config.json", dict(with_mlm=True))
    model.load_weights(str(tmp_path / "b4k" / "bert4keras_model.h5"))
    values = _layer_values(model)
    assert np.array_equal(values["Embedding-Mapping/kernel:0"], generator["embeddings.projection.kernel"].tensor.read())
    assert np.array_equal(values["MLM-Dense/kernel:0"], generator["mlm.transform.kernel"].tensor.read())
    back = formats.read(tmp_path / "b4k")
    assert back.config.model_type == "electra" and list(back.params) == list(generator.params)
    assert audit(back)["parameters"] == model.count_params() == audit(generator)["parameters"]


# --- fairseq RoBERTa ----------------------------------------------------------------------


@pytest.mark.parametrize("name,scope", [("roberta", "encoder"), ("roberta_decoder", "decoder")])
def test_fairseq_values_and_config_are_the_checkpoints(name, scope):
    torch = pytest.importorskip("torch")
    saved = torch.load(FAIRSEQ / name / "model.pt", weights_only=False)  # our own fixture: trusted here
    tree = formats.read(FAIRSEQ / name)
    assert tree.format == "fairseq" and tree.config.model_type == "roberta"
    args = saved["args"]
    config = tree.config
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads, config.intermediate_size) == \
        (args.encoder_embed_dim, args.encoder_layers, args.encoder_attention_heads, args.encoder_ffn_embed_dim)
    assert config.max_position_embeddings == args.max_positions + 2 and config.position_offset == 2
    assert config.type_vocab_size == 0 and config.layer_norm_eps == 1e-5 and config.hidden_act == "gelu"
    state = saved["model"]
    for param in tree:
        expected = state[param.source].numpy()
        if param.source.endswith(".weight") and param.name.endswith(".kernel"):
            expected = expected.T
        assert np.array_equal(param.tensor.read(), expected), param.source
    assert tree["mlm.decoder"].shared_with == "embeddings.word"
    assert audit(tree)["ok"]
    assert sum(p.numel for p in tree if tree.is_counted(p.name)) == \
        sum(v.numel() for k, v in state.items() if not k.endswith((".version", "lm_head.weight")))


def _resaved(tmp_path: Path, **changes) -> Path:
    torch = pytest.importorskip("torch")
    saved = torch.load(FAIRSEQ / "roberta" / "model.pt", weights_only=False)
    saved["args"] = argparse.Namespace(**{**vars(saved["args"]), **changes})
    torch.save(saved, tmp_path / "model.pt")
    return tmp_path / "model.pt"


def test_fairseq_pre_layernorm_encoders_are_refused(tmp_path):
    with pytest.raises(BadInput, match="encoder_normalize_before"):
        formats.read(_resaved(tmp_path, encoder_normalize_before=True))


def test_fairseq_untied_head_is_an_untied_decoder(tmp_path):
    torch = pytest.importorskip("torch")
    saved = torch.load(FAIRSEQ / "roberta" / "model.pt", weights_only=False)
    saved["args"].untie_weights_roberta = True
    saved["model"]["encoder.lm_head.weight"] = saved["model"]["encoder.lm_head.weight"].clone() + 1
    torch.save(saved, tmp_path / "model.pt")
    tree = formats.read(tmp_path / "model.pt")
    assert tree.has_untied_decoder and audit(tree)["ok"]


class _Planted:
    """Pickles as argparse.Namespace with a dunder in its state: what a hostile file would do."""

    def __reduce__(self):
        return (argparse.Namespace, (), {"__setstate__": "x", "encoder_layers": 2})


def test_a_namespace_stand_in_takes_no_dunder_state_and_no_arguments(tmp_path):
    torch = pytest.importorskip("torch")
    saved = torch.load(FAIRSEQ / "roberta" / "model.pt", weights_only=False)
    saved["args"] = _Planted()
    torch.save(saved, tmp_path / "model.pt", pickle_module=pickle)
    result = run_cli("inspect", tmp_path / "model.pt")
    assert result.exit_code == 2 and "__setstate__" in result.stderr and "Traceback" not in result.stderr


def test_fairseq_is_found_in_its_directory_and_converts_within_its_family(tmp_path):
    fmt, path = formats.resolve(FAIRSEQ / "roberta")
    assert fmt.target == "fairseq" and path.name == "model.pt"
    assert fairseq.sniff(FIXTURES / "hf" / "pretraining_bin" / "pytorch_model.bin") is None
    result = run_in_process("convert", FAIRSEQ / "roberta", tmp_path / "out", "--to", "tf")
    assert result.exit_code == 2 and "RoBERTa" in result.stderr


def test_fairseq_hydra_cfg_gives_the_config_too(tmp_path):
    """fairseq >= 0.10 saves `cfg` (a plain dict; its `model` holds the options) and `args: None`."""
    torch = pytest.importorskip("torch")
    saved = torch.load(FAIRSEQ / "roberta" / "model.pt", weights_only=False)
    options = vars(saved["args"])
    saved["args"], saved["cfg"] = None, {"model": options, "task": {"_name": "masked_lm"}}
    torch.save(saved, tmp_path / "model.pt")
    tree = formats.read(tmp_path / "model.pt")
    assert tree.config == formats.read(FAIRSEQ / "roberta").config
    assert tree.config.provenance["hidden_size"] == "file"


def test_electra_generator_with_its_own_embeddings_reads_them(tmp_path):
    """`untied_generator_embeddings`: the generator's embeddings under `generator/embeddings`."""
    tf = pytest.importorskip("tensorflow")
    reader = tf.train.load_checkpoint(str(TF / "electra" / "bert_model.ckpt"))
    names = [n for n in reader.get_variable_to_shape_map()]
    renamed = {n: n for n in names}
    renamed.update({n: n.replace("electra/embeddings/", "generator/embeddings/") for n in names
                    if n.startswith("electra/embeddings/")})
    values = {new: reader.get_tensor(old) for old, new in renamed.items()}
    values.update({n: reader.get_tensor(n) + 1 for n in names if n.startswith("electra/embeddings/")})
    sources = [(n, tf_bundle.dtypes.from_numpy(v.dtype), v.shape, (lambda v=v: v)) for n, v in sorted(values.items())]
    tf_bundle_write.write_bundle(tmp_path / "bert_model.ckpt", sources)
    generator = formats.read(tmp_path / "bert_model.ckpt")
    assert generator["embeddings.word"].source == "generator/embeddings/word_embeddings"
    assert np.array_equal(generator["embeddings.word"].tensor.read(),
                          reader.get_tensor("electra/embeddings/word_embeddings"))
    discriminator = formats.read(tmp_path / "bert_model.ckpt", model="discriminator")
    assert discriminator["embeddings.word"].source == "electra/embeddings/word_embeddings"
    assert any(i.name == "generator/embeddings/word_embeddings" for i in discriminator.ignored)


def test_model_choice_reaches_every_checkpoint_of_a_batch(tmp_path):
    for name in ("one", "two"):
        shutil.copytree(FIXTURES / "family_google" / "tf" / "electra", tmp_path / name)
    result = run_cli("audit", tmp_path / "one", tmp_path / "two", "--model", "discriminator", "--jobs", "2", "--json")
    assert result.exit_code == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(line["model"], line["heads"]["rtd"], line["heads"]["mlm"]) for line in lines] == \
        [("discriminator", True, False)] * 2
