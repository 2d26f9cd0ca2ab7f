"""What bert4keras pre-training leaves on disk, rescued: object-based TF checkpoints (with Adam
state, new-style and legacy), the flat train_model's HDF5, nested models, `*.weights.h5`.

Fixtures (fixtures/bert4keras_pretraining/, by fixtures/make_bert4keras_pretraining_fixtures.py)
were saved by bert4keras itself; each directory's `reference.h5` holds the BERT's own weights at
save time. The oracle is bert4keras: every conversion `--to tf` must load into
`build_transformer_model(config, checkpoint_path, ...)` bit for bit equal to the reference, and
`--to hf` must give bert4keras' own MLM probabilities. Tests without TensorFlow come first; the
oracle ones build each bert4keras model once per module.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import h5py
import numpy as np
import pytest

from bertconv import formats
from bertconv.config import Heads
from bertconv.errors import BadInput
from bertconv.formats.keras import bert4keras_keras3, bert4keras_table
from bertconv.runtime.numerics import family_of

from conftest import FIXTURES, keras_outputs, run_in_process
from fuzzing import check_case, in_child, mutations, share_of_cases

PRETRAINING = FIXTURES / "bert4keras_pretraining"
#: Every saved file a user may hold after pre-training: (fixture directory, file, reader's format).
SOURCES = (
    ("train-adam", "bert_model.ckpt", "bert4keras-tf"),
    ("train-adam", "bert_model.h5", "bert4keras-h5"),
    ("train-legacy-adam", "bert_model.ckpt", "bert4keras-tf"),
    ("pool-nsp-mlm", "bert_model.ckpt", "bert4keras-tf"),
    ("nested", "bert_model.ckpt", "bert4keras-tf"),
    ("nested", "bert_model.h5", "bert4keras-h5"),
    ("weights-h5", "bert_model.weights.h5", "bert4keras-keras3"),
)
SOURCE_IDS = [f"{directory}/{name}" for directory, name, _ in SOURCES]
#: bert4keras (TF, float32) against transformers (torch, float32): MLM and NSP probabilities.
ATOL = 1e-5
#: The fixtures' tiny BERT (make_bert4keras_pretraining_fixtures.CONFIG).
HIDDEN, VOCAB, SEGMENTS = 32, 99, 2

pytestmark = pytest.mark.filterwarnings("ignore:The initializer TruncatedNormal is unseeded:UserWarning")


def source(directory: str, name: str) -> Path:
    return PRETRAINING / directory / name


def config_of(directory: str) -> Path:
    return PRETRAINING / directory / "bert_config.json"


def flags_of(directory: str) -> dict[str, bool]:
    """The head flags the fixture's BERT was built with (`with_mlm='linear'` recorded as True:
    the activation has no weights, and the oracle compares probabilities)."""
    return json.loads((PRETRAINING / directory / "fixture.json").read_text())


def keras3_copy(tmp_path: Path, edit=None) -> Path:
    """The weights-h5 fixture copied (with its config), optionally edited with h5py."""
    for name in ("bert_model.weights.h5", "bert_config.json"):
        shutil.copy(source("weights-h5", name), tmp_path / name)
    if edit is not None:
        with h5py.File(tmp_path / "bert_model.weights.h5", "r+") as f:
            edit(f)
    return tmp_path / "bert_model.weights.h5"


# --- finding and reading, without TensorFlow ------------------------------------------------------


@pytest.mark.parametrize(("directory", "name", "format_name"), SOURCES, ids=SOURCE_IDS)
def test_every_file_resolves_to_its_reader_and_reads_all_of_the_model(directory, name, format_name):
    tree = formats.read(source(directory, name))
    assert tree.format == format_name
    assert family_of(tree.format) == "bert4keras"  # numerics: bert4keras' erf GELU and mask adder
    flags = flags_of(directory)
    assert tree.heads.as_dict() == {"pooler": flags["with_pool"], "nsp": flags["with_nsp"], "mlm": flags["with_mlm"],
                                     "sop": False, "rtd": False, "contact": False}
    assert tree.config.num_hidden_layers == 2 and tree.config.provenance["num_hidden_layers"] == "file"


def test_a_bundle_is_found_by_prefix_index_file_and_directory_alone(tmp_path):
    prefix = source("pool-nsp-mlm", "bert_model.ckpt")
    for path in (prefix, Path(f"{prefix}.index")):
        fmt, exact = formats.resolve(path)
        assert fmt.target == "bert4keras-tf" and fmt.write is None and exact == path
    for suffix in (".index", ".data-00000-of-00001"):
        shutil.copy(f"{prefix}{suffix}", tmp_path / f"bert_model.ckpt{suffix}")
    fmt, exact = formats.resolve(tmp_path)
    assert fmt.target == "bert4keras-tf" and exact == tmp_path / "bert_model.ckpt"
    assert "bert4keras-tf" not in formats.TARGETS  # read-only: --to tf writes what bert4keras loads


def test_a_directory_with_a_checkpoint_and_its_reference_asks_which_one():
    with pytest.raises(BadInput, match=r"holds 2 checkpoints \(.*bert_model\.ckpt.*\)"):
        formats.resolve(PRETRAINING / "pool-nsp-mlm")


def test_keras3_groups_map_to_the_layers_bert4keras_builds():
    config = formats.read(source("weights-h5", "bert_model.weights.h5")).config
    layout = bert4keras_keras3.keras3_layout(config, Heads(pooler=True, nsp=True, mlm=True), conditional=False)
    # model.layers puts MLM-Dense (deeper) before Pooler-Dense, and NSP-Proba last of the three.
    assert {g: layout[g] for g in ("dense", "dense_1", "dense_2")} == {
        "dense": "MLM-Dense", "dense_1": "Pooler-Dense", "dense_2": "NSP-Proba"}
    assert layout["embedding"] == "Embedding-Token" and layout["embedding_1"] == "Embedding-Segment"
    assert [layout[f"layer_normalization{s}"] for s in ("", "_1", "_2", "_5")] == [
        "Embedding-Norm", "Transformer-0-MultiHeadSelfAttention-Norm", "Transformer-0-FeedForward-Norm", "MLM-Norm"]
    assert layout["scale_offset"] == "MLM-Bias" and len(layout) == 3 + 6 + 2 + 2 + 3 + 1


@pytest.mark.parametrize(("groups", "heads"), [
    ({"dense", "scale_offset"}, Heads(pooler=False, nsp=False, mlm=True)),
    ({"dense"}, Heads(pooler=True, nsp=False, mlm=False)),
    ({"dense", "dense_1"}, Heads(pooler=True, nsp=True, mlm=False)),
    ({"dense", "dense_1", "scale_offset"}, Heads(pooler=True, nsp=False, mlm=True)),
    ({"dense", "dense_1", "dense_2", "scale_offset"}, Heads(pooler=True, nsp=True, mlm=True)),
    (set(), Heads(pooler=False, nsp=False, mlm=False)),
])
def test_keras3_heads_follow_from_the_dense_and_scale_offset_groups(groups, heads):
    assert bert4keras_keras3.keras3_heads(Path("x.weights.h5"), groups | {"embedding", "feed_forward"}) == heads


def test_keras3_without_a_config_is_refused_saying_what_to_pass(tmp_path):
    path = keras3_copy(tmp_path)
    (tmp_path / "bert_config.json").unlink()
    result = run_in_process("convert", path, tmp_path / "out", "--to", "tf")
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert "Keras 3" in result.stderr and "--config bert_config.json" in result.stderr
    assert run_in_process("convert", path, tmp_path / "out", "--to", "tf", "--config",
                          config_of("weights-h5")).exit_code == 0


def test_keras3_with_a_config_of_another_depth_is_refused_listing_missing_and_unexpected(tmp_path):
    path = keras3_copy(tmp_path)
    config = json.loads(config_of("weights-h5").read_text())
    (tmp_path / "bert_config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}))
    with pytest.raises(BadInput, match=r"num_hidden_layers=3.*missing feed_forward_2, layer_normalization_6, "
                                       r"layer_normalization_7, multi_head_attention_2; unexpected none.*--config"):
        formats.read(path)


def test_keras3_with_a_config_of_another_width_is_refused_naming_the_tensors(tmp_path):
    path = keras3_copy(tmp_path)
    config = json.loads(config_of("weights-h5").read_text())
    (tmp_path / "bert_config.json").write_text(json.dumps({**config, "intermediate_size": 38}))
    with pytest.raises(BadInput, match=r"layers/feed_forward/i0_dense/vars/0 read as "
                                       r"layers\.0\.ffn\.intermediate\.kernel: shape \[32, 37\], expected \[32, 38\]"):
        formats.read(path)


def test_keras3_with_a_task_head_on_top_is_refused_not_guessed(tmp_path):
    def add_classifier(f):
        f.create_dataset("layers/dense_3/vars/0", data=np.zeros((HIDDEN, 5), np.float32))
        f.create_dataset("layers/dense_3/vars/1", data=np.zeros((5,), np.float32))
    with pytest.raises(BadInput, match=r"1 scale_offset and 4 dense groups.*save_weights\('model\.h5'\)"):
        formats.read(keras3_copy(tmp_path, add_classifier))


def test_keras3_group_holding_other_variables_is_refused(tmp_path):
    def swap(f):
        f.move("layers/layer_normalization_2/vars/1", "layers/layer_normalization_2/vars/2")
    with pytest.raises(BadInput, match=r"group layers/layer_normalization_2 \(LayerNormalization\) holds "
                                       r"vars/0, vars/2; expected vars/0, vars/1 or"):
        formats.read(keras3_copy(tmp_path, swap))


def test_keras3_extra_variables_outside_the_layers_are_listed_as_ignored(tmp_path):
    def add_optimizer(f):
        f.create_dataset("optimizer/vars/0", data=np.zeros((), np.int64))
    tree = formats.read(keras3_copy(tmp_path, add_optimizer))
    assert [(i.name, "optimizer state" in i.reason) for i in tree.ignored] == [("optimizer/vars/0", True)]


def test_an_object_checkpoint_without_its_object_graph_is_refused(tmp_path):
    from bertconv.containers.tensorflow import bundle_write as tf_bundle_write
    from bertconv.dtypes import FLOAT32

    key = "layer_with_weights-0/embeddings/.ATTRIBUTES/VARIABLE_VALUE"
    values = np.ones((VOCAB, HIDDEN), np.float32)
    tf_bundle_write.write_bundle(tmp_path / "bert_model.ckpt", [(key, FLOAT32, values.shape, lambda: values)])
    result = run_in_process("audit", tmp_path / "bert_model.ckpt")
    assert result.exit_code == 2 and "_CHECKPOINTABLE_OBJECT_GRAPH" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.fuzz
def test_mutated_keras3_files_are_read_or_refused_never_anything_else(tmp_path):
    """HDF5 is C: the cases run in a child process, so a crash names its case."""
    path = keras3_copy(tmp_path)
    data, count = path.read_bytes(), share_of_cases(0.05)

    def run(note) -> Counter:
        outcomes = Counter()
        for _, label, mutant in mutations(data, 31, count, [0, 8, 96]):
            note(label)
            path.write_bytes(mutant)
            outcomes[check_case(path, label)] += 1
        return outcomes
    outcomes = in_child(run, "Keras 3 layout mutants")
    assert sum(outcomes.values()) == count and outcomes["refused"] > 0


# --- bert4keras as the oracle -------------------------------------------------------------------


@pytest.fixture(scope="module")
def build():
    """bert4keras' `build_transformer_model`, or a skip when the oracle is not installed."""
    pytest.importorskip("tensorflow")
    pytest.importorskip("bert4keras")
    from bert4keras.models import build_transformer_model
    return build_transformer_model


@pytest.fixture(scope="module")
def reference(build):
    """directory -> the fixture's BERT, built with its head flags, holding reference.h5."""
    models = {}

    def get(directory: str):
        if directory not in models:
            model = build(str(config_of(directory)), **flags_of(directory))
            model.load_weights(str(PRETRAINING / directory / "reference.h5"))
            models[directory] = model
        return models[directory]
    return get


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """(directory, file, target) -> the output of `bertconv convert` (the CLI, run once each)."""
    root = tmp_path_factory.mktemp("converted")
    outputs = {}

    def get(directory: str, name: str, target: str) -> Path:
        if (directory, name, target) not in outputs:
            out = root / f"{directory}-{name}-{target}"
            result = run_in_process("convert", source(directory, name), out, "--to", target, "--quiet",
                                    "--config", config_of(directory))
            assert result.exit_code == 0, result.stderr
            outputs[directory, name, target] = out
        return outputs[directory, name, target]
    return get


def model_inputs(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, VOCAB, size=(2, 11))  # no 0: bert4keras masks token 0
    return [tokens, rng.integers(0, SEGMENTS, size=(2, 11))]


@pytest.fixture(scope="module")
def expected_outputs(reference):
    """directory -> bert4keras' own predict on the reference model: {"mlm": probabilities, "nsp": ...}."""
    cache = {}

    def get(directory: str) -> dict[str, np.ndarray]:
        if directory not in cache:
            outputs = keras_outputs(reference(directory), model_inputs())
            names = ["nsp"] * flags_of(directory)["with_nsp"] + ["mlm"]
            cache[directory] = dict(zip(names, outputs, strict=True))
        return cache[directory]
    return get


@pytest.mark.parametrize(("directory", "name", "format_name"), SOURCES, ids=SOURCE_IDS)
def test_to_tf_loads_in_bert4keras_bit_identical_to_the_saved_model(directory, name, format_name, build,
                                                                     reference, converted):
    out = converted(directory, name, "tf")
    model = build(str(config_of(directory)), str(out / "bert_model.ckpt"), **flags_of(directory))
    expected = reference(directory)
    assert len(model.weights) == len(expected.weights)
    for got, want in zip(model.weights, expected.weights, strict=True):
        assert got.shape == want.shape and np.array_equal(got.numpy(), want.numpy()), want.name


@pytest.mark.parametrize(("directory", "name", "format_name"), SOURCES, ids=SOURCE_IDS)
def test_to_hf_gives_bert4keras_probabilities(directory, name, format_name, converted, expected_outputs):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    out = converted(directory, name, "hf")
    architecture = json.loads((out / "config.json").read_text())["architectures"][0]
    model = getattr(transformers, architecture).from_pretrained(out).eval()
    tokens, segments = (torch.tensor(x, dtype=torch.long) for x in model_inputs())
    with torch.no_grad():
        result = model(input_ids=tokens, token_type_ids=segments, attention_mask=torch.ones_like(tokens))
    expected = expected_outputs(directory)
    mlm_logits = result.prediction_logits if architecture == "BertForPreTraining" else result.logits
    assert np.abs(mlm_logits.softmax(-1).numpy() - expected["mlm"]).max() <= ATOL
    if "nsp" in expected:
        assert architecture == "BertForPreTraining"
        assert np.abs(result.seq_relationship_logits.softmax(-1).numpy() - expected["nsp"]).max() <= ATOL


@pytest.mark.parametrize(("directory", "name", "format_name"), SOURCES, ids=SOURCE_IDS)
def test_audit_counts_the_bert_model_and_lists_optimizer_state_as_ignored(directory, name, format_name, reference):
    result = run_in_process("audit", "--json", source(directory, name))
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    model = reference(directory)
    assert report["ok"] and report["parameters"] == report["expected_parameters"] == model.count_params()
    ignored = report["ignored"]
    optimizer = [i for i in ignored if "optimizer" in i["reason"]]
    assert all(i["reason"].startswith(("optimizer", "the object graph")) for i in ignored), ignored
    if directory == "train-adam" and name == "bert_model.ckpt":  # new-style: _variables/1..2K
        slots = [i for i in optimizer if i["name"].startswith("optimizer/_variables/")]
        scalars = {i["name"] for i in optimizer} - {i["name"] for i in slots}
        assert scalars == {"optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE",
                           "optimizer/_learning_rate/.ATTRIBUTES/VARIABLE_VALUE"}
    elif directory == "train-legacy-adam":  # legacy: <key>/.OPTIMIZER_SLOT/optimizer/{m,v}
        slots = [i for i in optimizer if "/.OPTIMIZER_SLOT/" in i["name"]]
        assert {i["name"].split("/")[0] for i in optimizer if i not in slots} == {"optimizer"}
    else:
        assert optimizer == []
        return
    assert len(slots) == 2 * len(model.trainable_weights)  # Adam's m and v per weight
    assert sum(i["parameters"] for i in slots) == 2 * model.count_params()


def test_a_keras_object_checkpoint_that_is_not_bert_is_refused_naming_its_layers(build, tmp_path):
    import tensorflow as tf

    model = tf.keras.Sequential([tf.keras.layers.Embedding(20, 8), tf.keras.layers.LSTM(6),
                                 tf.keras.layers.Dense(3)])
    model.build((None, 5))
    model.save_weights(str(tmp_path / "x.ckpt"))
    result = run_in_process("convert", tmp_path / "x.ckpt", tmp_path / "out", "--to", "tf")
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert "a Keras object-based checkpoint, but not a bert4keras BERT" in result.stderr
    assert "embedding, lstm, dense" in result.stderr and "Embedding-Token" in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def fixture_builder(build):
    """fixtures/make_bert4keras_fixtures.py: `build` (conditional LayerNorm too) and `randomize`."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_bert4keras_fixtures", FIXTURES / "make_bert4keras_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("variant", ["conditional", "nested"])
def test_keras3_conditional_and_nested_models_read_as_bert4keras_holds_them(variant, fixture_builder, tmp_path):
    from bert4keras.backend import keras

    flags = dict(with_mlm=True) if variant == "conditional" else dict(with_pool=True, with_mlm=True)
    model = fixture_builder.build(config_of("weights-h5"), flags, 12 if variant == "conditional" else None)
    fixture_builder.randomize(model, np.random.default_rng(7))
    saved = model
    if variant == "nested":
        inputs = [keras.layers.Input(shape=(None,), name=f"outer-{i}") for i in range(2)]
        saved = keras.models.Model(inputs, model(inputs))
    saved.save_weights(str(tmp_path / "bert_model.weights.h5"))
    tree = formats.read(tmp_path / "bert_model.weights.h5", config_path=config_of("weights-h5"))
    assert tree.conditional == (variant == "conditional")
    assert len(tree.params) == len(model.weights)
    for param in tree:
        layer, role = bert4keras_table.TABLE.spelling(param.name)[0].split("/", 1)
        variable = model.get_layer(layer)
        for attribute in role.split("/"):  # "q_dense/kernel" -> layer.q_dense.kernel
            variable = getattr(variable, attribute)
        assert np.array_equal(param.tensor.read(), variable.numpy()), (param.name, param.source)
