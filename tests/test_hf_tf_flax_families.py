"""RoBERTa, ALBERT and ELECTRA in `tf_model.h5` (hf-tf) and `flax_model.msgpack` (hf-flax).

The fixtures (fixtures/make_hf_tf_flax_family_fixtures.py) were made by transformers 4.57.6 with
TensorFlow 2.21 + tf-keras and flax/jax, with that library's own view of each file beside it
(`reference.npz`, `oracle.json`, `logits.npz`, and for one class per family `pt/`, its own
conversion to PyTorch): the tests below compare bertconv's reading with it. The tests marked
`oracle` run transformers 4.57 on the files bertconv writes (tests/oracle_hf_tf_flax.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from bertconv import formats
from bertconv.checks.audit import audit
from bertconv.checks.copies import differing_copies
from bertconv.checks.diff import diff
from bertconv.conversion import WriteOptions, convert
from bertconv.errors import BadInput
from bertconv.formats.hf import flax as hf_flax, tf as hf_tf
from bertconv.formats.hf.flax_tables import LAYOUTS as FLAX_LAYOUTS
from bertconv.formats.hf.tf_tables import LAYOUTS as TF_LAYOUTS
from bertconv.formats.hf.tf_tables import keras_model_name
from bertconv.runtime import NumpyBert
from conftest import FIXTURES, run_in_process
from test_hf_tf_flax import LOGITS_ATOL, bits, run_oracle

TF = FIXTURES / "family_hf_tf"
FLAX = FIXTURES / "family_hf_flax"
UNREAD = FIXTURES / "unread_hf_tf_flax"
TF_DIRS = sorted(TF.glob("*/*"))
FLAX_DIRS = sorted(path for path in FLAX.glob("*/*") if path.is_dir())
ALL = TF_DIRS + FLAX_DIRS
#: What bertconv's runtime computes, by the names logits.npz uses.
OUTPUTS = ("mlm_logits", "sop_logits", "rtd_logits", "sequence_output")


def label(path: Path) -> str:
    return f"{path.parent.parent.name.removeprefix('family_hf_')}-{path.parent.name}-{path.name}"


def is_tf(directory: Path) -> bool:
    return directory.parent.parent == TF


def reference_key(tree, param) -> str:
    """transformers' name of a parameter: the TF variable minus the model's name (a held copy is
    that same variable, under the base model's name), or the Flax path."""
    layout = TF_LAYOUTS[tree.config.model_type]
    if tree.format == hf_tf.FORMAT and layout.holder and param.source.startswith(layout.holder + f"/{layout.base}/"):
        return param.source.removeprefix(layout.holder + "/")
    return param.source


def task_heads(tree) -> list:
    """The ignored entries transformers counts as parameters of its own: task heads and a head's
    stored weight that it never computes with (TF ALBERT's predictions/bias); not the held copies,
    which are one variable with the base model's."""
    return [i for i in tree.ignored if i.copy_of is None or not i.reason.startswith("the base model's copy")]


def run_numpy(tree, batch):
    return NumpyBert(tree)(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])


# --- reading what transformers 4.57 wrote ------------------------------------------------------


@pytest.mark.parametrize("directory", ALL, ids=label)
def test_every_value_read_is_what_transformers_4_loads(directory):
    tree = formats.read(directory)
    assert tree.format == (hf_tf.FORMAT if is_tf(directory) else hf_flax.FORMAT)
    assert tree.config.model_type == directory.parent.name and tree.config.num_attention_heads == 2
    reference = dict(np.load(directory / "reference.npz"))
    covered = set()
    for param in tree:
        key = reference_key(tree, param)
        assert np.array_equal(bits(param.tensor.read()), bits(reference[key])), key
        covered.add(key)
    ignored = {i.name for i in tree.ignored}
    assert set(reference) - covered <= ignored, set(reference) - covered - ignored


@pytest.mark.parametrize("directory", ALL, ids=label)
def test_audit_counts_what_transformers_counts(directory):
    tree = formats.read(directory)
    report = audit(tree)
    assert report["ok"], report["problems"]
    oracle = json.loads((directory / "oracle.json").read_text())
    assert report["parameters"] + sum(i.parameters for i in task_heads(tree)) == oracle["parameters"], oracle["class"]


@pytest.mark.parametrize("directory", [d for d in ALL if d.name != "classifier"], ids=label)
def test_bertconv_computes_transformers_4_logits_from_the_files(directory):
    expected = np.load(directory / "logits.npz")
    out = run_numpy(formats.read(directory), expected)
    compared = [key for key in OUTPUTS if key in expected]
    assert compared
    for key in compared:
        assert np.abs(getattr(out, key) - expected[key]).max() <= LOGITS_ATOL, key


@pytest.mark.parametrize("directory", sorted(TF.glob("*/*/pt")) + sorted(FLAX.glob("*/*/pt")),
                         ids=lambda p: label(p.parent))
def test_values_equal_transformers_own_conversion_to_pytorch(directory):
    report = diff(formats.read(directory.parent), formats.read(directory))
    assert report["identical"], report["differences"]


@pytest.mark.parametrize("family", ["roberta", "albert", "electra"])
def test_the_holding_heads_copies_are_read_and_the_base_models_set_aside(family):
    """TensorFlow loads the head's copies of the embeddings last: the tree holds them, the base
    model's are ignored copies naming their parameter, equal in these files."""
    layout = TF_LAYOUTS[family]
    kind = {"roberta": "masked_lm", "albert": "pretraining", "electra": "generator"}[family]
    tree = formats.read(TF / family / kind)
    assert all(tree[row.canonical].source == f"{layout.holder}/{row.name}" for row in layout.embedding_rows)
    held = sorted((i.name, i.copy_of) for i in tree.ignored if i.name.startswith(f"{layout.base}/embeddings/"))
    assert held == sorted((row.name, row.canonical) for row in layout.embedding_rows)
    assert differing_copies(tree) == [] and not tree.has_untied_decoder
    # Without a holding head (a base model, ELECTRA's discriminator), the base model's are read.
    for other in ("model", "discriminator") if family == "electra" else ("model",):
        plain = formats.read(TF / family / other)
        assert plain["embeddings.word"].source == f"{layout.base}/embeddings/word_embeddings/weight:0"


def test_tf_alberts_unread_bias_is_a_copy_checked_by_value(tmp_path):
    """TF ALBERT adds predictions/decoder/bias and never predictions/bias: the first is the
    output bias, the second an ignored copy; changed, verify names both."""
    tree = formats.read(TF / "albert" / "pretraining")
    assert tree["mlm.output_bias"].source == "predictions/decoder/bias:0"
    [copy] = [i for i in tree.ignored if i.name == "predictions/bias:0"]
    assert copy.copy_of == "mlm.output_bias" and differing_copies(tree) == []
    shutil.copytree(TF / "albert" / "pretraining", tmp_path / "tampered")
    with h5py.File(tmp_path / "tampered" / "tf_model.h5", "r+") as file:
        file["predictions/tf_albert_for_pre_training/predictions/bias:0"][...] = 0
    [differing] = differing_copies(formats.read(tmp_path / "tampered"))
    assert differing.overwritten.name == "predictions/bias:0" and differing.used.name == "mlm.output_bias"
    result = run_in_process("verify", tmp_path / "tampered", "--json")
    assert result.exit_code == 1 and "predictions/bias:0 differs from predictions/decoder/bias:0" in result.stdout


def test_alberts_grouped_layers_are_read_flat_and_written_grouped(tmp_path):
    """2 groups of 2 inner layers: stored layer k is group k // 2, inner layer k % 2, both ways."""
    tree = formats.read(FLAX / "albert" / "pretraining")
    assert tree["layers.3.attention.key.kernel"].source == \
        "albert/encoder/albert_layer_groups/1/albert_layers/1/attention/key/kernel"
    assert formats.read(TF / "albert" / "pretraining")["layers.2.ffn.output.bias"].source == \
        "albert/encoder/albert_layer_groups_._1/albert_layers_._0/ffn_output/bias:0"
    config = json.loads((TF / "albert" / "pretraining" / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "inner_group_num": 1, "num_hidden_groups": 4}))
    with pytest.raises(BadInput, match="inner layer 1 of group 0.*the config is not this checkpoint's"):
        formats.read(TF / "albert" / "pretraining" / "tf_model.h5", config_path=tmp_path / "config.json")


def test_dtypes_are_kept():
    assert formats.read(FLAX / "roberta" / "bf16")["embeddings.word"].tensor.dtype.name == "bfloat16"
    assert formats.read(FLAX / "albert" / "fp16")["layers.3.ffn.output.kernel"].tensor.dtype.name == "float16"


# --- writing what transformers 4.57 writes ----------------------------------------------------

#: Fixtures of a class bertconv writes (a task class is read as its base model), float32, whole:
#: bertconv's output for them is what `save_pretrained` wrote.
WRITTEN_AS_SAVED = [d for d in ALL if d.name not in ("classifier", "sharded", "bf16", "fp16")]


@pytest.mark.parametrize("directory", [d for d in WRITTEN_AS_SAVED if not is_tf(d)], ids=label)
def test_flax_output_is_byte_identical_to_save_pretrained(tmp_path, directory):
    convert(formats.read(directory), tmp_path / "out", "hf-flax")
    assert (tmp_path / "out" / "flax_model.msgpack").read_bytes() == (directory / "flax_model.msgpack").read_bytes()


def _h5_layout(path: Path) -> list:
    """A Keras weights file as transformers reads it: layer names, each layer's weight names,
    each dataset's dtype, shape and bytes, in order."""
    with h5py.File(path, "r") as file:
        def names(group, attr):
            return [n.decode() if isinstance(n, bytes) else n for n in group.attrs[attr]]
        layout = [names(file, "layer_names")]
        for layer in layout[0]:
            for weight in names(file[layer], "weight_names"):
                data = file[layer][weight][...]
                layout.append((layer, weight, str(data.dtype), data.shape, data.tobytes()))
        return layout


@pytest.mark.parametrize("directory", [d for d in WRITTEN_AS_SAVED if is_tf(d)], ids=label)
def test_tf_output_is_laid_out_as_save_pretrained_writes_it(tmp_path, directory):
    """Same layers, weight names (the Keras model's name included), order, dtypes and bytes."""
    convert(formats.read(directory), tmp_path / "out", "hf-tf")
    assert _h5_layout(tmp_path / "out" / "tf_model.h5") == _h5_layout(directory / "tf_model.h5")


def test_keras_model_names_are_tf_keras_snake_case():
    assert keras_model_name("TFBertForPreTraining") == "tf_bert_for_pre_training"
    assert keras_model_name("TFBertLMHeadModel") == "tf_bert_lm_head_model"
    assert keras_model_name("TFRobertaForMaskedLM") == "tf_roberta_for_masked_lm"
    assert keras_model_name("TFElectraForPreTraining") == "tf_electra_for_pre_training"


ROUND_TRIP_SOURCES = [TF / "roberta" / "masked_lm", TF / "albert" / "pretraining", TF / "electra" / "discriminator",
                      TF / "electra" / "sharded", FLAX / "albert" / "sharded", FLAX / "electra" / "generator",
                      FLAX / "roberta" / "bf16", FLAX / "albert" / "fp16", FLAX / "roberta" / "model",
                      FIXTURES / "family_hf" / "albert" / "pretraining_groups",
                      FIXTURES / "family_hf" / "electra" / "generator", FIXTURES / "family_hf" / "roberta" / "masked_lm"]


@pytest.mark.parametrize("source", ROUND_TRIP_SOURCES, ids=lambda p: f"{p.parent.parent.name}-{p.parent.name}-{p.name}")
@pytest.mark.parametrize("target", ["hf-tf", "hf-flax", "hf"])
def test_conversion_round_trips(tmp_path, source, target):
    """SRC -> target reads back with the same values (bfloat16 widened for TF) and config."""
    tree = formats.read(source)
    convert(tree, tmp_path / "out", target)
    written = formats.read(tmp_path / "out")
    report = diff(tree, written)
    widened = target == "hf-tf" and any(p.tensor.dtype.name == "bfloat16" for p in tree)
    assert report["ok"] and (report["identical"] or widened), report["differences"]
    for field in ("model_type", "vocab_size", "hidden_size", "embedding_size", "num_hidden_layers",
                  "num_hidden_groups", "inner_group_num", "hidden_act", "layer_norm_eps", "position_offset"):
        assert getattr(written.config, field) == getattr(tree.config, field), field


# --- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize("family, framework", [("mpnet", "tf"), ("roformer", "flax")])
@pytest.mark.parametrize("with_config", [True, False], ids=["config", "no-config"])
def test_a_family_not_read_here_is_exit_2_naming_what_the_file_holds(tmp_path, family, framework, with_config):
    """transformers 4.57's TF MPNet and Flax RoFormer, with their config.json (refused for its
    model_type) or alone (refused for its layers or keys): found and expected named, nothing written."""
    source = UNREAD / f"{family}_{framework}"
    for stored in source.iterdir():
        if with_config or "config" not in stored.name:
            shutil.copy(stored, tmp_path / stored.name.removeprefix(f"{family}_"))
    result = run_in_process("convert", tmp_path, tmp_path / "out", "--to", "hf")
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert family in result.stderr and "roberta" in result.stderr, result.stderr  # found, and what is read
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("directory", [TF / "roberta" / "masked_lm", FLAX / "electra" / "generator"], ids=["tf", "flax"])
def test_a_config_of_another_family_is_exit_2_naming_both(tmp_path, directory):
    copy = tmp_path / "copy"
    shutil.copytree(directory, copy)
    family = directory.parent.name
    other = "albert" if family != "albert" else "electra"
    (copy / "config.json").write_text((TF / other / "model" / "config.json").read_text())
    result = run_in_process("convert", copy, tmp_path / "out", "--to", "hf")
    assert result.exit_code == 2 and f"config is for a {other} model" in result.stderr and family in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_model_type_no_family_has_is_exit_2(tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(TF / "roberta" / "model", copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "model_type": "xlnet"}))
    result = run_in_process("convert", copy, tmp_path / "out", "--to", "hf-flax")
    assert result.exit_code == 2 and "xlnet" in result.stderr and "roberta" in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_class_tensorflow_lacks_is_refused_with_nothing_written(tmp_path):
    """transformers 4.57 has no TFElectraForCausalLM: a causal ELECTRA is refused --to hf-tf."""
    tree = formats.read(FLAX / "electra" / "generator")
    causal = type(tree)(tree.format, tree.path, tree.config.with_overrides(is_decoder=True), tree.params,
                        tree.ignored, tree.files, tree.vocab)
    with pytest.raises(BadInput, match="ElectraForCausalLM, which transformers 4.57 has no hf-tf class"):
        convert(causal, tmp_path / "out", "hf-tf")
    assert not (tmp_path / "out").exists()


def test_an_untied_decoder_is_refused_by_tf_and_kept_by_flax(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.RobertaConfig(vocab_size=53, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                        intermediate_size=19, max_position_embeddings=26, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.RobertaForMaskedLM(config)
    with torch.no_grad():  # one bias for the head, as transformers' Flax RoBERTa has
        model.lm_head.decoder.bias = model.lm_head.bias
    model.save_pretrained(tmp_path / "hf")
    tree = formats.read(tmp_path / "hf")
    assert tree.has_untied_decoder
    with pytest.raises(BadInput, match="drop-untied-decoder"):
        convert(tree, tmp_path / "tf", "hf-tf")
    assert not (tmp_path / "tf").exists()
    convert(tree, tmp_path / "tf", "hf-tf", options=WriteOptions(drop_untied_decoder=True))
    convert(tree, tmp_path / "flax", "hf-flax")
    flax_tree = formats.read(tmp_path / "flax")
    assert flax_tree.has_untied_decoder and flax_tree["mlm.decoder"].source == "lm_head/decoder/kernel"
    assert diff(tree, flax_tree)["ok"]


@pytest.mark.parametrize("layouts, target", [(TF_LAYOUTS, "hf-tf"), (FLAX_LAYOUTS, "hf-flax")], ids=["tf", "flax"])
def test_every_family_has_a_table_with_its_heads(layouts, target):
    """Every family the writer declares it writes has a layout here, and every head its
    declaration names (but the pooler) has rows in it."""
    from bertconv import families

    for model_type in formats.TARGETS[target].families:
        family = families.named(model_type)
        layout = layouts[model_type]
        rows = {row.canonical.split(".")[0] for row in layout.table.rows}
        assert {head for head in family.heads if head != "pooler"} <= rows, model_type


# --- transformers 4.57 loading what bertconv writes ------------------------------------------

#: (source, target, class transformers should load): every family and class, both directions,
#: from PyTorch too, half precision included.
WRITTEN = [
    (FLAX / "roberta" / "masked_lm", "hf-tf", "TFRobertaForMaskedLM"),
    (FLAX / "roberta" / "model", "hf-tf", "TFRobertaModel"),
    (TF / "roberta" / "sharded", "hf-flax", "FlaxRobertaForMaskedLM"),
    (FLAX / "roberta" / "bf16", "hf-tf", "TFRobertaForMaskedLM"),
    (FLAX / "albert" / "pretraining", "hf-tf", "TFAlbertForPreTraining"),
    (FLAX / "albert" / "masked_lm", "hf-tf", "TFAlbertForMaskedLM"),
    (TF / "albert" / "pretraining", "hf-flax", "FlaxAlbertForPreTraining"),
    (FLAX / "albert" / "fp16", "hf-tf", "TFAlbertForPreTraining"),
    (FLAX / "electra" / "generator", "hf-tf", "TFElectraForMaskedLM"),
    (FLAX / "electra" / "discriminator", "hf-tf", "TFElectraForPreTraining"),
    (TF / "electra" / "model", "hf-flax", "FlaxElectraModel"),
    (TF / "electra" / "discriminator", "hf-flax", "FlaxElectraForPreTraining"),
    (FLAX / "electra" / "bf16", "hf-flax", "FlaxElectraForPreTraining"),
]
#: transformers 4.x's PyTorch fixtures written to TF and Flax (logits from bertconv's runtime).
FROM_PYTORCH = [(FIXTURES / "family_hf" / "albert" / "pretraining_groups", "hf-tf"),
                (FIXTURES / "family_hf" / "roberta" / "masked_lm", "hf-flax")]


def written_and_run(tmp_path: Path, written: list, from_pytorch: list) -> list:
    """Convert each (source, target, class) of `written` and (source, target) of `from_pytorch`
    (whose expected outputs bertconv's runtime computes on the family's stored inputs, within its
    vocabulary), and load
    every output with transformers 4.57 in one oracle process: ((directory, inputs, out), result)."""
    jobs = []
    for number, (source, target, _) in enumerate(written):
        convert(formats.read(source), tmp_path / f"w{number}", target)
        jobs.append((tmp_path / f"w{number}", source / "logits.npz", tmp_path / f"w{number}.npz"))
    for number, (source, target) in enumerate(from_pytorch):
        tree = formats.read(source)
        convert(tree, tmp_path / f"p{number}", target)
        stored = np.load(TF / tree.config.model_type / "model" / "logits.npz")
        batch = {"input_ids": stored["input_ids"] % tree.config.vocab_size, "attention_mask": stored["attention_mask"]}
        batch["token_type_ids"] = np.zeros_like(batch["input_ids"])
        out = run_numpy(tree, batch)
        np.savez(tmp_path / f"p{number}-in.npz", **batch,
                 **{key: getattr(out, key) for key in OUTPUTS if getattr(out, key) is not None})
        jobs.append((tmp_path / f"p{number}", tmp_path / f"p{number}-in.npz", tmp_path / f"p{number}.npz"))
    return list(zip(jobs, run_oracle(jobs)))


def check_transformers_4_loads(runs: list, written: list, from_pytorch: list) -> None:
    """Each output loaded as the class expected, with no weight missing or unexpected, the same
    outputs (≤ LOGITS_ATOL), the parameter count bertconv audits, and every value bit for bit."""
    expected_classes = [cls for *_, cls in written] + [None] * len(from_pytorch)
    for ((directory, inputs, out), result), cls_name in zip(runs, expected_classes):
        assert cls_name is None or result["class"] == cls_name, (directory, result)
        assert result["missing"] == [] and result["unexpected"] == [], (directory, result)
        loaded, expected = np.load(out), np.load(inputs)
        compared = [key for key in OUTPUTS if key in expected and key in loaded]
        assert compared, directory
        for key in compared:
            assert np.abs(loaded[key] - expected[key]).max() <= LOGITS_ATOL, (directory, key)
        output = formats.read(directory)
        assert result["parameters"] == audit(output)["parameters"] + sum(i.parameters for i in task_heads(output))
        for param in output:
            value, ours = loaded[f"param:{reference_key(output, param)}"], param.tensor.read()
            if ours.dtype != value.dtype:  # TensorFlow builds float32 variables and loads float16 into them
                assert ours.dtype == np.float16 and value.dtype == np.float32, (directory, param.name)
                ours = ours.astype(np.float32)  # exact
            assert np.array_equal(bits(ours), bits(value)), (directory, param.name)


@pytest.fixture(scope="module")
def oracle_runs(tmp_path_factory):
    return written_and_run(tmp_path_factory.mktemp("oracle"), WRITTEN, FROM_PYTORCH)


@pytest.mark.oracle
def test_transformers_4_loads_what_bertconv_writes_with_the_same_logits(oracle_runs):
    check_transformers_4_loads(oracle_runs, WRITTEN, FROM_PYTORCH)
