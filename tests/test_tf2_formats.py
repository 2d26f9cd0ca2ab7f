"""BERTs that TensorFlow 2-era tools leave on disk: TF-Hub fine-tunes (a Google BERT under a scope),
TF2 object-based checkpoints, keras-bert HDF5. Each is checked against the reference reader
(TensorFlow's `tf.train.load_checkpoint` / `list_variables`), converted to every writable
format and back bit for bit, and run through transformers for logits."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from bertconv import formats
from bertconv.checks.audit import audit
from bertconv.checks.diff import diff
from bertconv.conversion import convert
from bertconv.errors import BadInput
from bertconv.formats.tensorflow import google as google_tf
from bertconv.runtime.numerics import family_of

from conftest import FIXTURES, run_in_process

TF_HUB = FIXTURES / "tf_hub" / "classifier"
TF_HUB_SCOPE = "module/"
TARGETS = ("hf", "tf", "bert4keras")  # tf before bert4keras (see assert_round_trips)
LOGITS_TOLERANCE = 1e-5
OPTIMIZER_SUFFIXES = ("/adam_m", "/adam_v")


# --- oracles ------------------------------------------------------------------------------


def tf_variables(prefix: Path) -> dict[str, list[int]]:
    """TensorFlow's own listing of a bundle: name -> shape."""
    tf = pytest.importorskip("tensorflow")
    return dict(tf.train.list_variables(str(prefix)))


def tf_values(prefix: Path):
    tf = pytest.importorskip("tensorflow")
    return tf.train.load_checkpoint(str(prefix))


def by_hand_logits(values: dict[str, np.ndarray], config: dict, hidden_act: str, inputs: dict):
    """Logits of a transformers 5 model whose every weight is set by hand from `values` (Google
    names -> arrays as the reference reader returned them), independently of bertconv's tables.

    BertForPreTraining when an NSP head is there, else BertForMaskedLM."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    hf_config = transformers.BertConfig(**{k: config[k] for k in (
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
        "max_position_embeddings", "type_vocab_size")}, hidden_act=hidden_act)
    nsp = "cls/seq_relationship/output_bias" in values
    model = (transformers.BertForPreTraining if nsp else transformers.BertForMaskedLM)(hf_config).eval()
    state = model.state_dict()
    with torch.no_grad():
        for name in state:
            google = google_name(name)
            if google is None:
                continue
            value = values[google]
            if name.endswith(".weight") and value.ndim == 2 and "embeddings" not in name and "seq_relationship" not in name:
                value = value.T
            state[name].copy_(torch.from_numpy(np.ascontiguousarray(value)))
    model.load_state_dict(state)
    return _logits(model, inputs)


def converted_logits(directory: Path, nsp: bool, inputs: dict):
    transformers = pytest.importorskip("transformers")
    cls = transformers.BertForPreTraining if nsp else transformers.BertForMaskedLM
    return _logits(cls.from_pretrained(directory).eval(), inputs)


def _logits(model, inputs: dict):
    import torch
    with torch.no_grad():
        out = model(**{k: torch.tensor(v) for k, v in inputs.items()})
    logits = [out.prediction_logits if hasattr(out, "prediction_logits") else out.logits]
    if hasattr(out, "seq_relationship_logits"):
        logits.append(out.seq_relationship_logits)
    return logits


def google_name(hf_name: str) -> str | None:
    """The Google name of a transformers parameter, written out here by hand."""
    if "decoder" in hf_name:
        return None
    name = hf_name.replace("bert.encoder.layer.", "bert/encoder/layer_").replace(".", "/")
    name = name.replace("LayerNorm/weight", "LayerNorm/gamma").replace("LayerNorm/bias", "LayerNorm/beta")
    name = name.replace("_embeddings/weight", "_embeddings").replace("/weight", "/kernel")
    if name == "cls/predictions/bias":
        return "cls/predictions/output_bias"
    if name.startswith("cls/seq_relationship"):
        return name.replace("/kernel", "/output_weights").replace("/bias", "/output_bias")
    return name


def model_inputs(vocab_size: int, seed: int = 7) -> dict:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab_size, size=(2, 9))
    mask = np.ones_like(ids)
    mask[1, 6:] = 0
    types = np.zeros_like(ids)
    types[:, 5:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def assert_round_trips(tree, tmp_path: Path) -> None:
    """tree -> every writable format -> read back: the same tensors bit for bit, the same config.

    bert4keras' file holds no config: it is read with the `bert_config.json` the tf output
    carries, as a bert4keras user builds the model from it."""
    for target in TARGETS:  # tf before bert4keras
        out = tmp_path / target
        convert(tree, out, target)
        config = tmp_path / "tf" / google_tf.CONFIG_FILE if target == "bert4keras" else None
        back = formats.read(out, config_path=config)
        report = diff(tree, back)
        assert report["identical"], (target, report["problems"])
        assert back.config == tree.config, target
        again = tmp_path / f"{target}-again"
        convert(back, again, "tf")
        assert diff(tree, formats.read(again))["identical"], target


# --- TF-Hub fine-tunes: a Google BERT under a scope ---------------------------------------


def test_tf_hub_fine_tune_is_read_under_its_scope():
    tree = formats.read(TF_HUB)
    assert tree.format == "google-tf" and tree.scope == TF_HUB_SCOPE
    assert all(p.source == TF_HUB_SCOPE + google_tf.TABLE.spelling(p.name)[0] for p in tree)
    assert tree.heads.as_dict() == {"pooler": True, "mlm": True, "nsp": False, "sop": False, "rtd": False, "contact": False}


def test_tf_hub_audit_equals_tensorflow_count_of_the_module():
    listing = tf_variables(TF_HUB / "bert_model.ckpt")
    module = {n: s for n, s in listing.items() if n.startswith(TF_HUB_SCOPE) and not n.endswith(OPTIMIZER_SUFFIXES)}
    report = audit(formats.read(TF_HUB))
    assert report["ok"], report["problems"]
    assert report["parameters"] == sum(math.prod(s) for s in module.values())
    assert len(formats.read(TF_HUB).params) == len(module)
    # Everything else TensorFlow lists is reported as ignored, none silently dropped.
    ignored = {i["name"] for i in report["ignored"]}
    assert ignored == set(listing) - set(module)


def test_tf_hub_task_head_and_slots_are_ignored_with_their_reasons():
    reasons = {i.name: i.reason for i in formats.read(TF_HUB).ignored}
    assert "classifier head" in reasons["output_weights"] and "classifier head" in reasons["output_bias"]
    assert "Adam" in reasons["module/bert/pooler/dense/kernel/adam_m"]
    assert "Adam" in reasons["output_weights/adam_v"]
    assert "step" in reasons["global_step"]


def test_tf_hub_values_are_tensorflows_bit_for_bit():
    reader = tf_values(TF_HUB / "bert_model.ckpt")
    for param in formats.read(TF_HUB):
        expected = reader.get_tensor(param.source)
        got = param.tensor.read()
        assert got.dtype == expected.dtype and np.array_equal(got, expected), param.source


def test_tf_hub_inspect_reports_the_scope_in_text_and_json():
    text = run_in_process("inspect", TF_HUB)
    assert text.exit_code == 0, text.stderr
    assert f"under scope {TF_HUB_SCOPE}" in text.stdout
    assert "output_weights" in text.stdout and "classifier head" in text.stdout
    report = json.loads(run_in_process("inspect", TF_HUB, "--json").stdout)
    assert report["scope"] == TF_HUB_SCOPE
    plain = json.loads(run_in_process("inspect", FIXTURES / "tf" / "full", "--json").stdout)
    assert plain["scope"] == ""


def test_tf_hub_index_alone_inspects_and_audits(tmp_path):
    shutil.copy(TF_HUB / "bert_model.ckpt.index", tmp_path / "bert_model.ckpt.index")
    shutil.copy(TF_HUB / "bert_config.json", tmp_path / "bert_config.json")
    result = run_in_process("audit", tmp_path / "bert_model.ckpt.index")
    assert result.exit_code == 0, result.stderr
    assert audit(formats.read(tmp_path))["parameters"] == audit(formats.read(TF_HUB))["parameters"]


def test_tf_hub_round_trips_through_every_format(tmp_path):
    tree = formats.read(TF_HUB)
    assert_round_trips(tree, tmp_path)
    written = tf_variables(tmp_path / "tf" / "bert_model.ckpt")
    assert set(written) == {google_tf.TABLE.spelling(p.name)[0] for p in tree}  # plain Google names


def test_tf_hub_converted_logits_match_transformers(tmp_path):
    reader = tf_values(TF_HUB / "bert_model.ckpt")
    config = json.loads((TF_HUB / "bert_config.json").read_text())
    values = {name[len(TF_HUB_SCOPE):]: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
              if name.startswith(TF_HUB_SCOPE) and not name.endswith(OPTIMIZER_SUFFIXES)}
    convert(formats.read(TF_HUB), tmp_path / "hf", "hf")
    inputs = model_inputs(config["vocab_size"])
    ours = converted_logits(tmp_path / "hf", nsp=False, inputs=inputs)
    theirs = by_hand_logits(values, config, "gelu_new", inputs)  # Google's "gelu" is the tanh form
    for a, b in zip(ours, theirs):
        assert float((a - b).abs().max()) <= LOGITS_TOLERANCE


def test_two_berts_under_two_scopes_are_refused_not_guessed(tmp_path):
    from bertconv.containers.tensorflow import bundle_write as tf_bundle_write
    from bertconv.dtypes import FLOAT32
    word = np.zeros((5, 4), np.float32)
    sources = [(name, FLOAT32, word.shape, lambda: word)
               for name in ("bert/embeddings/word_embeddings", "teacher/bert/embeddings/word_embeddings")]
    tf_bundle_write.write_bundle(tmp_path / "bert_model.ckpt", sources)
    with pytest.raises(BadInput, match="2 BERTs.*'teacher/'"):
        formats.read(tmp_path / "bert_model.ckpt")


# --- TF2 object-based checkpoints: Model Garden and bert-for-tf2 --------------------------

TF2 = FIXTURES / "tf2"
#: fixture -> (format, scope, heads, what TensorFlow lists that is the model: a key predicate)
OBJECT_FIXTURES = {
    "garden-pretrainer": ("tf-garden", "", {"pooler": True, "mlm": True, "nsp": False, "sop": False, "rtd": False, "contact": False}),
    "garden-model-adam": ("tf-garden", "model/", {"pooler": True, "mlm": True, "nsp": False, "sop": False, "rtd": False, "contact": False}),
    "garden-encoder": ("tf-garden", "", {"pooler": True, "mlm": False, "nsp": False, "sop": False, "rtd": False, "contact": False}),
    "bert-for-tf2": ("tf-bert-for-tf2", "layer_with_weights-0/", {"pooler": False, "mlm": False, "nsp": False, "sop": False, "rtd": False, "contact": False}),
}
VARIABLE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


def model_keys(fixture: str) -> dict[str, list[int]]:
    """What TensorFlow lists for the BERT itself: variable keys under the scope, no optimizer."""
    scope = OBJECT_FIXTURES[fixture][1]
    return {name: shape for name, shape in tf_variables(TF2 / fixture / "bert_model.ckpt").items()
            if name.endswith(VARIABLE_SUFFIX) and name.startswith(scope) and not name.startswith("optimizer/")
            and "/.OPTIMIZER_SLOT/" not in name}


@pytest.mark.parametrize("fixture", OBJECT_FIXTURES)
def test_object_checkpoint_is_read_as_its_library_under_its_scope(fixture):
    format_name, scope, heads = OBJECT_FIXTURES[fixture]
    tree = formats.read(TF2 / fixture)
    assert (tree.format, tree.scope, tree.heads.as_dict()) == (format_name, scope, heads)
    assert family_of(tree.format) == "google-tf"  # tanh GELU, as each library computes


@pytest.mark.parametrize("fixture", OBJECT_FIXTURES)
def test_object_checkpoint_audit_equals_tensorflows_count(fixture):
    listing = tf_variables(TF2 / fixture / "bert_model.ckpt")
    model = model_keys(fixture)
    tree = formats.read(TF2 / fixture)
    report = audit(tree)
    assert report["ok"], report["problems"]
    assert report["parameters"] == sum(math.prod(s) for s in model.values())
    assert {p.source for p in tree} == set(model)
    assert {i.name for i in tree.ignored} == set(listing) - set(model)  # nothing dropped unseen


@pytest.mark.parametrize("fixture", OBJECT_FIXTURES)
def test_object_checkpoint_values_are_tensorflows_bit_for_bit(fixture):
    reader = tf_values(TF2 / fixture / "bert_model.ckpt")
    for param in formats.read(TF2 / fixture):
        expected = reader.get_tensor(param.source)
        got = param.tensor.read()
        assert got.dtype == expected.dtype and got.size == expected.size, param.source
        # Per-head kernels [H, A, H/A] are the canonical [H, H] with the same row-major bytes.
        assert np.array_equal(got.reshape(-1), expected.reshape(-1)), param.source
        assert got.shape == tuple(param.tensor.shape)


def test_garden_heads_come_from_the_per_head_kernels_without_a_config():
    tree = formats.read(TF2 / "garden-model-adam")
    assert tree.config.num_attention_heads == 4
    assert tree.config.provenance["num_attention_heads"] != "default"


@pytest.mark.parametrize("fixture", OBJECT_FIXTURES)
def test_object_checkpoint_round_trips_through_every_format(fixture, tmp_path):
    assert_round_trips(formats.read(TF2 / fixture), tmp_path)


@pytest.mark.parametrize("fixture", ["garden-pretrainer", "garden-model-adam"])
def test_garden_converted_logits_match_the_model_gardens_own(fixture, tmp_path):
    """transformers 5 on the converted files computes what the Model Garden computed (its own
    forward pass, recorded when the fixture was made)."""
    reference = np.load(TF2 / fixture / "reference.npz")
    inputs = {k: reference[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
    convert(formats.read(TF2 / fixture), tmp_path / "hf", "hf")
    mlm = converted_logits(tmp_path / "hf", nsp=False, inputs=inputs)[0].numpy()
    assert np.max(np.abs(mlm - reference["mlm_logits"])) <= LOGITS_TOLERANCE
    transformers = pytest.importorskip("transformers")
    import torch
    encoder = transformers.BertModel.from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        out = encoder(**{k: torch.tensor(v) for k, v in inputs.items()})
    assert np.max(np.abs(out.last_hidden_state.numpy() - reference["sequence_output"])) <= LOGITS_TOLERANCE
    assert np.max(np.abs(out.pooler_output.numpy() - reference["pooled_output"])) <= LOGITS_TOLERANCE


def test_bert_for_tf2_converted_encoder_matches_its_own_output(tmp_path):
    transformers = pytest.importorskip("transformers")
    import torch
    reference = np.load(TF2 / "bert-for-tf2" / "reference.npz")
    inputs = {k: torch.tensor(reference[k].astype(np.int64)) for k in ("input_ids", "attention_mask", "token_type_ids")}
    convert(formats.read(TF2 / "bert-for-tf2"), tmp_path / "hf", "hf")
    encoder = transformers.BertModel.from_pretrained(tmp_path / "hf", add_pooling_layer=False).eval()
    assert encoder.config.hidden_act == "gelu_new"  # params-flow's tanh GELU
    with torch.no_grad():
        out = encoder(**inputs).last_hidden_state.numpy()
    assert np.max(np.abs(out - reference["sequence_output"])) <= LOGITS_TOLERANCE


@pytest.mark.parametrize("fixture", OBJECT_FIXTURES)
def test_object_checkpoint_inspects_and_audits_from_the_index_alone(fixture, tmp_path):
    """As tf.train.list_variables does: no data file, no object graph."""
    for name in ("bert_model.ckpt.index", "bert_config.json"):
        if (TF2 / fixture / name).exists():
            shutil.copy(TF2 / fixture / name, tmp_path / name)
    tree = formats.read(tmp_path / "bert_model.ckpt.index")
    assert audit(tree)["parameters"] == audit(formats.read(TF2 / fixture))["parameters"]
    result = run_in_process("inspect", tmp_path / "bert_model.ckpt.index", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["format"] == OBJECT_FIXTURES[fixture][0] and report["scope"] == OBJECT_FIXTURES[fixture][1]
    assert run_in_process("audit", tmp_path / "bert_model.ckpt.index").exit_code == 0


def test_bert4keras_object_checkpoint_without_its_data_file_says_what_can_and_cannot_be_known(tmp_path):
    source = FIXTURES / "bert4keras_pretraining" / "train-adam"
    shutil.copy(source / "bert_model.ckpt.index", tmp_path / "bert_model.ckpt.index")
    listing = tf_variables(source / "bert_model.ckpt")
    weights = {n: s for n, s in listing.items() if n.endswith(VARIABLE_SUFFIX) and not n.startswith("optimizer/")
               and "/.OPTIMIZER_SLOT/" not in n}
    result = run_in_process("audit", tmp_path / "bert_model.ckpt.index")
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    message = " ".join(result.stderr.split())
    assert "is absent" in message and "object graph" in message
    assert f"{len(weights)} model variables ({sum(math.prod(s) for s in weights.values()):,} values)" in message
    assert "layer_with_weights-N" in message


# --- a TF-Hub BERT SavedModel's variables/ (Model Garden exporter) ------------------------

HUB_SAVEDMODEL = TF2 / "hub-savedmodel"


def test_hub_savedmodel_is_found_from_its_directory_and_names_come_from_the_graph():
    tree = formats.read(HUB_SAVEDMODEL)
    assert tree.format == "tf-hub-savedmodel" and family_of(tree.format) == "google-tf"
    assert tree.path == HUB_SAVEDMODEL / "variables" / "variables"
    assert tree.vocab == HUB_SAVEDMODEL / "assets" / "vocab.txt"
    assert tree.heads.as_dict() == {"pooler": True, "mlm": True, "nsp": False, "sop": False, "rtd": False, "contact": False}
    assert tree.config.num_attention_heads == 4  # from the per-head kernels; no config file
    assert {p.source for p in tree}.issuperset({"variables/0/.ATTRIBUTES/VARIABLE_VALUE",
                                                "mlm/variables/39/.ATTRIBUTES/VARIABLE_VALUE"})


def test_hub_savedmodel_audit_equals_tensorflows_count_and_values_are_its_bits():
    prefix = HUB_SAVEDMODEL / "variables" / "variables"
    listing = tf_variables(prefix)
    model = {n: s for n, s in listing.items() if "variables/" in n}
    tree = formats.read(HUB_SAVEDMODEL)
    report = audit(tree)
    assert report["ok"], report["problems"]
    assert report["parameters"] == sum(math.prod(s) for s in model.values())
    assert {p.source for p in tree} == set(model)
    assert {i.name for i in tree.ignored} == set(listing) - set(model)
    reader = tf_values(prefix)
    for param in tree:
        expected = reader.get_tensor(param.source)
        assert np.array_equal(param.tensor.read().reshape(-1), expected.reshape(-1)), param.source


def test_hub_savedmodel_holds_exactly_the_checkpoint_it_was_exported_from(tmp_path):
    """The exporter restored garden-pretrainer: the same canonical tensors, bit for bit, though
    every name differs; and it converts and round-trips like any other source."""
    tree = formats.read(HUB_SAVEDMODEL)
    assert diff(tree, formats.read(TF2 / "garden-pretrainer"))["identical"]
    assert_round_trips(tree, tmp_path)


def test_hub_savedmodel_without_its_data_file_says_the_names_are_in_the_graph(tmp_path):
    (tmp_path / "variables").mkdir()
    shutil.copy(HUB_SAVEDMODEL / "variables" / "variables.index", tmp_path / "variables" / "variables.index")
    result = run_in_process("inspect", tmp_path)
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    message = " ".join(result.stderr.split())
    assert "is absent" in message and "by position" in message


GARDEN_FUNCTIONAL = TF2 / "garden-functional"


def test_functional_garden_checkpoint_is_named_by_its_object_graph(tmp_path):
    tree = formats.read(GARDEN_FUNCTIONAL)
    assert tree.format == "tf-garden-functional" and family_of(tree.format) == "google-tf"
    assert tree.heads.as_dict() == {"pooler": True, "mlm": False, "nsp": False, "sop": False, "rtd": False, "contact": False}
    listing = tf_variables(GARDEN_FUNCTIONAL / "bert_model.ckpt")
    model = {n: s for n, s in listing.items() if n.startswith("model/")}
    report = audit(tree)
    assert report["ok"], report["problems"]
    assert report["parameters"] == sum(math.prod(s) for s in model.values())
    assert {p.source for p in tree} == set(model)
    reader = tf_values(GARDEN_FUNCTIONAL / "bert_model.ckpt")
    for param in tree:
        assert np.array_equal(param.tensor.read().reshape(-1), reader.get_tensor(param.source).reshape(-1))
    assert_round_trips(tree, tmp_path)


def test_functional_garden_converted_encoder_matches_its_own_output(tmp_path):
    transformers = pytest.importorskip("transformers")
    import torch
    reference = np.load(GARDEN_FUNCTIONAL / "reference.npz")
    inputs = {k: torch.tensor(reference[k].astype(np.int64)) for k in ("input_ids", "attention_mask", "token_type_ids")}
    convert(formats.read(GARDEN_FUNCTIONAL), tmp_path / "hf", "hf")
    with torch.no_grad():
        out = transformers.BertModel.from_pretrained(tmp_path / "hf").eval()(**inputs)
    assert np.max(np.abs(out.last_hidden_state.numpy() - reference["sequence_output"])) <= LOGITS_TOLERANCE
    assert np.max(np.abs(out.pooler_output.numpy() - reference["pooled_output"])) <= LOGITS_TOLERANCE


def test_functional_garden_index_alone_says_the_layers_are_named_by_the_graph(tmp_path):
    shutil.copy(GARDEN_FUNCTIONAL / "bert_model.ckpt.index", tmp_path / "bert_model.ckpt.index")
    result = run_in_process("audit", tmp_path / "bert_model.ckpt.index")
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    message = " ".join(result.stderr.split())
    assert "is absent" in message and "layer_with_weights-N" in message


# --- keras-bert HDF5 --------------------------------------------------------------------------

KERAS_BERT = FIXTURES / "keras_bert" / "pretraining"
KERAS_BERT_FILES = ("model.h5", "weights.h5")


@pytest.mark.parametrize("name", KERAS_BERT_FILES)
def test_keras_bert_file_is_named_keras_bert_not_refused_as_bert4keras(name):
    tree = formats.read(KERAS_BERT / name)
    assert tree.format == "keras-bert-h5"
    assert tree.heads.as_dict() == {"pooler": True, "mlm": True, "nsp": True, "sop": False, "rtd": False, "contact": False}
    assert tree["mlm.output_bias"].source == "MLM-Sim/bias:0" and tree["pooler.kernel"].source == "NSP-Dense/kernel:0"
    assert tree.config.layer_norm_eps == 1e-14  # keras-layer-normalization's K.epsilon() ** 2


@pytest.mark.parametrize("name", KERAS_BERT_FILES)
def test_keras_bert_audit_equals_keras_count_params(name):
    reference = np.load(KERAS_BERT / "reference.npz")
    report = audit(formats.read(KERAS_BERT / name))
    assert report["ok"], report["problems"]
    assert report["parameters"] == int(reference["count_params"])


def test_keras_bert_optimizer_weights_are_ignored_and_counted():
    import h5py
    with h5py.File(KERAS_BERT / "model.h5") as f:
        optimizer = []
        f["optimizer_weights"].visititems(lambda n, o: optimizer.append(n) if isinstance(o, h5py.Dataset) else None)
    ignored = [i for i in formats.read(KERAS_BERT / "model.h5").ignored if i.name.startswith("optimizer_weights/")]
    assert len(ignored) == len(optimizer) > 0
    assert all("optimizer" in i.reason for i in ignored)


@pytest.mark.parametrize("name", KERAS_BERT_FILES)
def test_keras_bert_values_are_the_files_bit_for_bit(name):
    import h5py
    tree = formats.read(KERAS_BERT / name)
    with h5py.File(KERAS_BERT / name) as f:
        root = f["model_weights"] if "model_weights" in f else f
        for param in tree:
            layer = param.source.split("/", 1)[0]
            expected = root[layer][param.source][()]
            assert np.array_equal(param.tensor.read(), expected), param.source


def test_keras_bert_save_and_save_weights_hold_the_same_model():
    assert diff(formats.read(KERAS_BERT / "model.h5"), formats.read(KERAS_BERT / "weights.h5"))["identical"]


def test_keras_bert_round_trips_through_every_format(tmp_path):
    tree = formats.read(KERAS_BERT / "model.h5")
    for target in TARGETS:
        out = tmp_path / target
        convert(tree, out, target)
        config = tmp_path / "tf" / google_tf.CONFIG_FILE if target == "bert4keras" else None
        back = formats.read(out, config_path=config)
        assert diff(tree, back)["identical"], target
        if target != "hf" and "layer_norm_eps" not in json.loads((tmp_path / "tf" / google_tf.CONFIG_FILE).read_text()):
            back.config = back.config.with_overrides(layer_norm_eps=tree.config.layer_norm_eps)  # no key to hold it
        assert back.config == tree.config, target


def test_keras_bert_converted_probabilities_match_keras_berts_own(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    reference = np.load(KERAS_BERT / "reference.npz")
    convert(formats.read(KERAS_BERT / "model.h5"), tmp_path / "hf", "hf")
    model = transformers.BertForPreTraining.from_pretrained(tmp_path / "hf").eval()
    assert model.config.hidden_act == "gelu_new" and model.config.layer_norm_eps == 1e-14
    inputs = {k: torch.tensor(reference[k].astype(np.int64)) for k in ("input_ids", "attention_mask", "token_type_ids")}
    with torch.no_grad():
        out = model(**inputs)
    mlm = torch.softmax(out.prediction_logits, -1).numpy()
    nsp = torch.softmax(out.seq_relationship_logits, -1).numpy()
    assert np.max(np.abs(mlm - reference["mlm_probabilities"])) <= LOGITS_TOLERANCE
    assert np.max(np.abs(nsp - reference["nsp_probabilities"])) <= LOGITS_TOLERANCE


# --- every new reader: headers only -----------------------------------------------------------

HEADER_ONLY_SOURCES = [TF_HUB, *(TF2 / f for f in OBJECT_FIXTURES), HUB_SAVEDMODEL, GARDEN_FUNCTIONAL,
                       *(KERAS_BERT / n for n in KERAS_BERT_FILES)]


@pytest.mark.parametrize("source", HEADER_ONLY_SOURCES, ids=lambda p: p.name if p.is_file() else p.parent.name + "/" + p.name)
def test_inspect_and_audit_read_no_tensor_data(source, monkeypatch):
    from bertconv.api.inspect import describe
    from bertconv.tensor import LazyTensor, MappedTensor
    expected = audit(formats.read(source))

    def refuse(self):
        raise AssertionError(f"tensor data read: {self!r}")
    for cls in {LazyTensor, MappedTensor, *LazyTensor.__subclasses__(), *MappedTensor.__subclasses__()}:
        monkeypatch.setattr(cls, "read", refuse)
    tree = formats.read(source)
    describe(tree)
    assert audit(tree) == expected


def test_a_directory_holding_one_keras_bert_file_resolves_to_it(tmp_path):
    """bert4keras' reader also lists Keras files with an Embedding-Token layer; the file is keras-bert's."""
    shutil.copy(KERAS_BERT / "weights.h5", tmp_path / "weights.h5")
    shutil.copy(KERAS_BERT / "bert_config.json", tmp_path / "bert_config.json")
    assert formats.read(tmp_path).format == "keras-bert-h5"


def test_keras_bert_runs_with_its_own_numerics():
    from bertconv.runtime.numerics import Numerics

    numerics = Numerics.for_tree(formats.read(FIXTURES / "keras_bert" / "pretraining" / "model.h5"))
    assert (numerics.activation, numerics.layer_norm_eps, numerics.mask_adder) == ("gelu_tanh", 1e-14, -10000.0)
