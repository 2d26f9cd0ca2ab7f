"""bert4keras HDF5 weights: reader, writer and conversions, with bert4keras itself as the oracle.

Fixtures (fixtures/bert4keras/, written by fixtures/make_bert4keras_fixtures.py) are tiny
bert4keras models with random weights, one per head combination plus a conditional-LayerNorm
one. Tests that need no TensorFlow run first; the oracle tests build each bert4keras model once
per module (TensorFlow and bert4keras are slow to import).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from bertconv import formats
from bertconv.config import BertConfig, Heads, expected_components, expected_parameters
from bertconv.containers.hdf5 import keras as keras_h5, keras_write, workarounds as hdf5_workarounds
from bertconv.checks.audit import audit
from bertconv.conversion import WriteOptions
from bertconv.conversion import convert as convert_tree
from bertconv.errors import BadInput
from bertconv.config.dialects import google_config_dict
from bertconv.formats.keras import bert4keras_graph, bert4keras_table, bert4keras_write
from bertconv.tree import component_of

from conftest import FIXTURES, keras_outputs, real_file, run_cli, run_in_process
from fuzzing import CASE_TIMEOUT_SECONDS, share_of_cases

B4K = FIXTURES / "bert4keras"
WEIGHTS = "bert4keras_model.h5"
FIXTURE_NAMES = sorted(p.name for p in B4K.iterdir() if (p / WEIGHTS).is_file())
#: Fixtures without conditional LayerNorm: those Hugging Face (and Google TF) can hold.
PLAIN = [name for name in FIXTURE_NAMES if "cond" not in name]
#: bert4keras (TF, float32) against transformers (torch, float32): probabilities and activations.
ATOL = 1e-5

# bert4keras hands one TruncatedNormal instance to every layer; tf-keras warns about it each time.
pytestmark = pytest.mark.filterwarnings("ignore:The initializer TruncatedNormal is unseeded:UserWarning")


def weights(name: str) -> Path:
    return B4K / name / WEIGHTS


def manifest(name: str) -> dict:
    return json.loads((B4K / name / "fixture.json").read_text())


def strings(attrs, name: str) -> list[str]:
    """A Keras list attribute as tf-keras' `load_attributes_from_hdf5_group` reads it."""
    chunks = [attrs[name]] if name in attrs else []
    while not (name in attrs) and f"{name}{len(chunks)}" in attrs:
        chunks.append(attrs[f"{name}{len(chunks)}"])
    return [x.decode() if isinstance(x, bytes) else str(x) for chunk in chunks for x in chunk]


def file_values(path: Path) -> tuple[list[str], dict[str, list[str]], dict[str, np.ndarray]]:
    """layer_names, each layer's weight_names and every weight's values, via h5py directly."""
    with h5py.File(path, "r") as f:
        layer_names = strings(f.attrs, "layer_names")
        weight_names = {n: strings(f[n].attrs, "weight_names") for n in layer_names}
        values = {w: f[n][w][()] for n in layer_names for w in weight_names[n]}
    return layer_names, weight_names, values


def assert_same_file_contents(expected: Path, got: Path) -> None:
    e_layers, e_weights, e_values = file_values(expected)
    g_layers, g_weights, g_values = file_values(got)
    assert g_layers == e_layers
    assert g_weights == e_weights
    for name, value in e_values.items():
        assert g_values[name].dtype == value.dtype and np.array_equal(g_values[name], value), name


def convert(src: Path, dst: Path, target: str, *, config: Path | None = None) -> Path:
    """In process: the bulk of the conversions (the CLI end to end is tested below, once)."""
    convert_tree(formats.read(src, config_path=config), dst, target)
    return output_file(dst, target)


def output_file(dst: Path, target: str) -> Path:
    """The checkpoint file of a conversion's output: bert4keras writes a directory holding it."""
    return dst / bert4keras_write.WEIGHTS_FILE if target == "bert4keras" else dst


def convert_cli(src: Path, dst: Path, target: str, *extra: str) -> Path:
    result = run_cli("convert", src, dst, "--to", target, "--quiet", *extra)
    assert result.exit_code == 0, result.stderr
    return output_file(dst, target)


# --- the table, as data -------------------------------------------------------------------------


def test_table_rows_are_exactly_the_layer_slots():
    slots = [f"{template}/{slot.role}" for template, kind in bert4keras_table.LAYERS
             for slot in kind.slots + kind.conditional]
    assert len(slots) == len(set(slots))
    assert sorted(slots) == sorted(row.name for row in bert4keras_table.TABLE.rows)


@pytest.mark.parametrize("layer, kind", [
    ("Transformer-0-FeedForward", "FeedForward"), ("Transformer-11-FeedForward", "FeedForward"),
    ("Transformer-00-FeedForward", None), ("Transformer-01-FeedForward", None), ("Transformer--FeedForward", None),
    ("Transformer-1x-FeedForward", None), ("Transformer-0-FeedForward-Norm", "LayerNormalization"),
    ("Transformer-0-FeedForward-", None),
    ("Embedding-Token", "Embedding"), ("Embedding-Token-", None), ("MLM-Norm", "LayerNormalization"),
    ("xTransformer-0-FeedForward", None),
])
def test_layer_names_are_bert4keras_own_spellings(layer, kind):
    """A layer's index is written as bert4keras writes it, without a leading zero; the rest of the
    name is the template's, whole."""
    found = bert4keras_table.BERT.kind_of(layer)
    assert (found.keras_class if found is not None else None) == kind


def test_closed_form_gives_the_bert_base_figures_of_formats_md():
    base = BertConfig(vocab_size=21128, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                      intermediate_size=3072, max_position_embeddings=512, type_vocab_size=2)
    counts = expected_components(base, Heads(pooler=False, mlm=True, nsp=False))
    assert counts["embeddings.word"] == 16_226_304        # Embedding-Token
    assert counts["embeddings.token_type"] == 1_536       # Embedding-Segment
    assert counts["embeddings.position"] == 393_216       # Embedding-Position
    assert counts["embeddings.norm"] == 1_536             # Embedding-Norm
    for i in range(12):
        assert counts[f"layers.{i}.attention"] == 2_362_368   # MultiHeadSelfAttention
        assert counts[f"layers.{i}.ffn"] == 4_722_432         # FeedForward
        assert counts[f"layers.{i}.attention_norm"] == counts[f"layers.{i}.ffn_norm"] == 1_536
    assert counts["mlm.transform"] == 590_592             # MLM-Dense
    assert counts["mlm.norm"] == 1_536                    # MLM-Norm
    assert counts["mlm.output_bias"] == 21_128            # MLM-Bias
    conditional = BertConfig(**{**base.summary(), "conditional_size": 128, "provenance": {}})
    assert expected_components(conditional, Heads())["embeddings.norm"] == 198_144
    uncased = BertConfig(**{**base.summary(), "vocab_size": 30522, "provenance": {}})
    assert expected_parameters(uncased, Heads(pooler=True, mlm=True, nsp=True)) == 110_106_428


def test_the_writer_lists_layers_in_keras_order_for_every_head_combination():
    # pooler + MLM puts Pooler-Dense after MLM-Bias; all three heads put it before.
    def tail(heads):
        return [n for n in bert4keras_graph.model_layers(1, heads) if not n.startswith(("Transformer", "Embedding", "Input"))]
    assert tail(Heads(pooler=True, mlm=True, nsp=False)) == [
        "MLM-Dense", "MLM-Norm", "Pooler", "MLM-Bias", "Pooler-Dense", "MLM-Activation"]
    assert tail(Heads(pooler=True, mlm=True, nsp=True)) == [
        "MLM-Dense", "MLM-Norm", "Pooler", "Pooler-Dense", "MLM-Bias", "NSP-Proba", "MLM-Activation"]


# --- reading and writing, without TensorFlow ----------------------------------------------------


def test_cli_audit_and_convert_end_to_end(tmp_path):
    result = run_cli("audit", B4K / "v50-pool-nsp-mlm", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["parameters"] == 18_878
    hf = convert_cli(weights("v50-pool-nsp-mlm"), tmp_path / "hf", "hf")
    back = convert_cli(hf, tmp_path / "back-b4k", "bert4keras")
    assert_same_file_contents(weights("v50-pool-nsp-mlm"), back)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_audit_is_ok_and_totals_bert4keras_count_params(name):
    report = audit(formats.read(weights(name)))
    assert report["ok"] and report["format"] == "bert4keras-h5"
    assert report["parameters"] == manifest(name)["count_params"]
    wanted = manifest(name)
    assert report["heads"] == {"pooler": wanted["with_pool"] or wanted["with_nsp"], "mlm": wanted["with_mlm"],
                               "nsp": wanted["with_nsp"], "sop": False, "rtd": False, "contact": False}
    assert report["config"].get("conditional_size") == wanted["condition_size"]


def test_formats_md_tiny_model_figures():
    figures = {"v50-mlm": 17_756, "v50-pool": 17_642, "v50-pool-nsp": 17_708, "v50-pool-nsp-mlm": 18_878}
    for name, count in figures.items():
        tree = formats.read(weights(name))
        assert sum(p.numel for p in tree if tree.is_counted(p.name)) == count, name


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_writer_reproduces_the_file_bert4keras_saved(name, tmp_path):
    out = convert(weights(name), tmp_path / "out-b4k", "bert4keras")
    assert_same_file_contents(weights(name), out)
    with h5py.File(out, "r") as f, h5py.File(weights(name), "r") as original:
        assert sorted(f.keys()) == sorted(original.keys())  # top_level_model_weights included
        assert f.attrs["backend"] == original.attrs["backend"]


@pytest.mark.parametrize("name", PLAIN)
def test_every_value_survives_bert4keras_hf_tf_bert4keras_bit_exactly(name, tmp_path):
    hf = convert(weights(name), tmp_path / "hf", "hf")
    last = hf
    if "tf" in formats.TARGETS:
        last = convert(hf, tmp_path / "tf", "tf")
    back = convert(last, tmp_path / "back-b4k", "bert4keras", config=B4K / name / "bert_config.json")
    assert_same_file_contents(weights(name), back)


def test_conditional_layer_norm_round_trips_and_hf_refuses_it(tmp_path):
    source = weights("v99-cond-mlm")
    tree = formats.read(source)
    assert tree.conditional and tree.config.conditional_size == 12
    assert tree.config.provenance["conditional_size"] == "shapes"
    assert tree["mlm.norm.gamma_cond"].tensor.shape == (12, 32)
    assert_same_file_contents(source, convert(source, tmp_path / "again-b4k", "bert4keras"))
    with pytest.raises(BadInput, match="conditional"):
        convert(source, tmp_path / "hf", "hf")


def test_a_keras_file_that_is_not_bert_is_refused_naming_what_it_holds():
    path = real_file("keras2-bilstm-not-bert.weights.h5")
    result = run_in_process("audit", path)
    assert result.exit_code == 2
    assert "not a bert4keras BERT" in result.stderr
    assert "bidirectional_1" in result.stderr and "embedding_1" in result.stderr  # found
    assert "Embedding-Token" in result.stderr and "Transformer-0-MultiHeadSelfAttention" in result.stderr  # expected
    assert "Traceback" not in result.stderr


def test_keras3_layout_is_refused_saying_what_is_not_supported(tmp_path):
    path = tmp_path / "model.weights.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("layers/embedding/vars/0", data=np.zeros((5, 4), np.float32))
        f.create_group("layers/dropout/vars")
        f.create_group("vars")
    result = run_in_process("inspect", path)
    assert result.exit_code == 2
    assert "Keras 3" in result.stderr and "not supported" in result.stderr


def test_without_a_config_the_sizes_come_from_shapes_and_heads_from_flag_or_default(tmp_path):
    shutil.copy(weights("v99-pool-mlm"), tmp_path / WEIGHTS)
    tree = formats.read(tmp_path / WEIGHTS)
    config = tree.config
    assert (config.vocab_size, config.hidden_size, config.num_hidden_layers, config.intermediate_size,
            config.max_position_embeddings, config.type_vocab_size) == (99, 32, 2, 37, 48, 3)
    assert config.provenance["vocab_size"] == "shapes"
    assert config.num_attention_heads == 1 and config.provenance["num_attention_heads"] == "default"  # 32 / 64
    assert config.hidden_act == "gelu"  # bert4keras' gelu is erf
    assert formats.read(tmp_path / WEIGHTS, num_heads=4).config.num_attention_heads == 4
    with_file = formats.read(weights("v99-pool-mlm"))
    assert with_file.config.num_attention_heads == 4 and with_file.config.provenance["num_attention_heads"] == "file"


def test_a_directory_resolves_to_its_weights_file():
    fmt, path = formats.resolve(B4K / "v50-mlm")
    assert fmt.target == "bert4keras" and path == weights("v50-mlm")


def test_layer_names_split_over_several_attributes_are_read_and_written(tmp_path, monkeypatch):
    tree = formats.read(weights("v50-pool-nsp-mlm"))
    monkeypatch.setattr(keras_write, "HDF5_OBJECT_HEADER_LIMIT", 300)
    out = bert4keras_write.write(tree, tmp_path, options=WriteOptions())[0]
    with h5py.File(out, "r") as f:
        assert "layer_names" not in f.attrs and "layer_names2" in f.attrs
        assert "weight_names1" in f["Transformer-0-MultiHeadSelfAttention"].attrs
    assert_same_file_contents(weights("v50-pool-nsp-mlm"), out)


def test_a_chunked_compressed_dataset_is_read_through_h5py(tmp_path):
    path = tmp_path / WEIGHTS
    shutil.copy(weights("v50-mlm"), path)
    name = "Embedding-Token/Embedding-Token/embeddings:0"
    with h5py.File(path, "r+") as f:
        values = f[name][()]
        del f[name]
        f.create_dataset(name, data=values, chunks=(10, 32), compression="gzip")
    tree = formats.read(path)
    assert isinstance(tree["embeddings.word"].tensor, keras_h5.H5Tensor)
    assert isinstance(tree["embeddings.position"].tensor, keras_h5.MappedTensor)
    assert np.array_equal(tree["embeddings.word"].tensor.read(), values)


def test_a_bfloat16_source_is_written_as_exact_float32(tmp_path):
    source = FIXTURES / "tf" / "bf16"
    if not source.is_dir() or "tf" not in formats.TARGETS:
        pytest.skip("needs the Google TF format and its bf16 fixture")
    tree = formats.read(source)
    out = convert(source, tmp_path / "out-b4k", "bert4keras")
    _, _, values = file_values(out)
    token = values["Embedding-Token/embeddings:0"]
    assert token.dtype == np.float32
    widened = (tree["embeddings.word"].tensor.read().astype(np.uint32) << 16).view(np.float32)
    assert np.array_equal(token, widened)


def test_an_untied_decoder_is_refused_unless_dropped_explicitly(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                     intermediate_size=37, max_position_embeddings=48, tie_word_embeddings=False)
    torch.manual_seed(0)
    transformers.BertForMaskedLM(config).save_pretrained(tmp_path / "hf")
    tree = formats.read(tmp_path / "hf")
    assert tree.has_untied_decoder
    with pytest.raises(BadInput, match="drop-untied-decoder"):
        convert_tree(tree, tmp_path / "refused-b4k", "bert4keras")
    assert not (tmp_path / "refused-b4k").exists()
    out = tmp_path / "dropped-b4k"
    convert_tree(tree, out, "bert4keras", options=WriteOptions(drop_untied_decoder=True))
    written = formats.read(out)
    assert "mlm.decoder" not in written and audit(written)["ok"]
    assert np.array_equal(written["embeddings.word"].tensor.read(), tree["embeddings.word"].tensor.read())


# --- malformed files: BadInput naming the file, the layer and the weight --------------------------


def _edit_missing_dataset(f):
    del f["Embedding-Norm/Embedding-Norm/gamma:0"]


def _edit_ghost_layer(f):
    f.attrs["layer_names"] = list(f.attrs["layer_names"]) + ["Ghost-Layer"]


def _edit_swapped_norm(f):
    f["Embedding-Norm"].attrs["weight_names"] = list(f["Embedding-Norm"].attrs["weight_names"])[::-1]


def _edit_attention_short(f):
    group = f["Transformer-0-MultiHeadSelfAttention"]
    group.attrs["weight_names"] = list(group.attrs["weight_names"])[:-1]


def _edit_numbers_for_names(f):
    f["Embedding-Norm"].attrs["weight_names"] = np.array([1.0, 2.0])


def _edit_absolute_name(f):
    f["Embedding-Token"].attrs["weight_names"] = ["/Embedding-Norm/Embedding-Norm/beta:0"]


def _edit_external_link(f):
    del f["Embedding-Position/Embedding-Position/embeddings:0"]
    f["Embedding-Position/Embedding-Position/embeddings:0"] = h5py.ExternalLink(str(weights("v50-pool")),
                                                                                "/Embedding-Position/Embedding-Position/embeddings:0")


def _edit_external_storage(f):
    del f["Embedding-Segment/Embedding-Segment/embeddings:0"]
    f.create_dataset("Embedding-Segment/Embedding-Segment/embeddings:0", shape=(2, 32), dtype="<f4",
                     external=[("/etc/hostname", 0, 256)])


def _edit_string_weight(f):
    del f["MLM-Bias/MLM-Bias/beta:0"]
    f.create_dataset("MLM-Bias/MLM-Bias/beta:0", data=np.array([b"x"] * 50))


def _edit_albert_layer(f):
    f.attrs["layer_names"] = list(f.attrs["layer_names"]) + ["Embedding-Mapping"]
    group = f.create_group("Embedding-Mapping")
    group.attrs["weight_names"] = ["Embedding-Mapping/kernel:0"]
    group.create_dataset("Embedding-Mapping/kernel:0", data=np.zeros((32, 32), np.float32))


MALFORMED = {
    "missing dataset": (_edit_missing_dataset, "Embedding-Norm.*Embedding-Norm/gamma:0"),
    "layer without group": (_edit_ghost_layer, "Ghost-Layer"),
    "LayerNorm weights swapped": (_edit_swapped_norm, "Embedding-Norm/gamma:0.*in the place of beta"),
    "attention weight missing": (_edit_attention_short, "Transformer-0-MultiHeadSelfAttention.*holds 7 weights"),
    "numbers for names": (_edit_numbers_for_names, "Embedding-Norm.*expected names"),
    "absolute weight name": (_edit_absolute_name, "Embedding-Token.*not a relative"),
    "external link": (_edit_external_link, "Embedding-Position.*external link"),
    "external storage": (_edit_external_storage, "Embedding-Segment/embeddings:0.*outside this file"),
    "string dataset": (_edit_string_weight, "MLM-Bias/beta:0.*dtype"),
    "ALBERT layer": (_edit_albert_layer, "Embedding-Mapping"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_file_raises_bad_input_naming_file_layer_and_weight(case, tmp_path):
    edit, pattern = MALFORMED[case]
    path = tmp_path / WEIGHTS
    shutil.copy(weights("v50-mlm"), path)
    with h5py.File(path, "r+") as f:
        edit(f)
    with pytest.raises(BadInput, match=pattern) as error:
        tree = formats.read(path)
        for param in tree:
            param.tensor.read()
    assert str(path) in str(error.value)


def test_a_truncated_file_raises_bad_input(tmp_path):
    data = weights("v50-mlm").read_bytes()
    path = tmp_path / WEIGHTS
    for cut in (len(data) // 3, len(data) - 100):
        path.write_bytes(data[:cut])
        with pytest.raises(BadInput, match=str(path)):
            formats.read(path)


def test_a_global_heap_hdf5_would_loop_on_is_refused_not_hung(tmp_path):
    data = bytearray(weights("v50-mlm").read_bytes())
    start = data.index(hdf5_workarounds.GLOBAL_HEAP_SIGNATURE)
    position = start + 16
    while int.from_bytes(data[position:position + 2], "little") != 0:  # to the free-space object
        size = int.from_bytes(data[position + 8:position + 16], "little")
        position += 16 + -(-size // 8) * 8
    data[position + 8:position + 16] = bytes(8)  # free space of 0 bytes: HDF5 would never advance
    path = tmp_path / WEIGHTS
    path.write_bytes(bytes(data))
    # In a child process with a deadline, so that a regression fails instead of hanging the suite.
    code = f"from bertconv import formats\nformats.read({str(path)!r})"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "BadInput" in result.stderr and "global heap" in result.stderr


_FUZZ_CHILD = """
import json, sys
sys.path.insert(0, {tests!r})
from collections import Counter
from pathlib import Path
from fuzzing import check_case, mutations
data, target, outcomes = Path({source!r}).read_bytes(), Path({target!r}), Counter()
for _, label, mutant in mutations(data, {seed}, {count}, {boundaries!r}):
    print(label, file=sys.stderr, flush=True)
    target.write_bytes(mutant)
    outcomes[check_case(target, label)] += 1
print(json.dumps(outcomes))
"""


@pytest.mark.fuzz
@pytest.mark.parametrize("name, seed", [("v50-pool-nsp-mlm", 11), ("v99-cond-mlm", 12)])
def test_mutated_files_are_read_or_refused_never_anything_else(name, seed, tmp_path):
    """Every mutant is read (and each tensor) or refused with BadInput. HDF5 is C: a case that
    hangs or crashes in it is caught by running the cases in a child process with a deadline."""
    data = weights(name).read_bytes()
    heap = data.index(hdf5_workarounds.GLOBAL_HEAP_SIGNATURE)
    count = share_of_cases(0.1)
    code = _FUZZ_CHILD.format(tests=str(Path(__file__).parent), source=str(weights(name)), seed=seed,
                              target=str(tmp_path / WEIGHTS), count=count, boundaries=[0, 8, 96, heap, heap + 16])
    try:
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                timeout=60 + count * CASE_TIMEOUT_SECONDS / 10)
    except subprocess.TimeoutExpired as expired:
        last = (expired.stderr or b"").decode(errors="replace").strip().splitlines()[-1:]
        raise AssertionError(f"{name}: no result in time; last case {last}") from None
    last = result.stderr.strip().splitlines()[-1:]
    assert result.returncode == 0, f"{name}: child exited {result.returncode} after case {last}: {result.stderr[-2000:]}"
    outcomes = json.loads(result.stdout.strip().splitlines()[-1])
    assert sum(outcomes.values()) == count and outcomes.get("refused", 0) > 0


# --- bert4keras as the oracle -------------------------------------------------------------------


@pytest.fixture(scope="module")
def oracle():
    """The fixture generator's `build` (bert4keras' `build_transformer_model` per fixture)."""
    pytest.importorskip("tensorflow")
    pytest.importorskip("bert4keras")
    spec = importlib.util.spec_from_file_location("make_bert4keras_fixtures", FIXTURES / "make_bert4keras_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def built(oracle):
    """name -> a fresh bert4keras model for that fixture (not loaded), built once per module."""
    models = {}

    def get(name: str):
        if name not in models:
            wanted = manifest(name)
            models[name] = oracle.build(B4K / name / "bert_config.json", wanted, wanted["condition_size"])
        return models[name]
    return get


@pytest.fixture(scope="module")
def loaded(built):
    """name -> the bert4keras model for that fixture with the fixture's weights loaded."""
    done = set()

    def get(name: str):
        model = built(name)
        if name not in done:
            model.load_weights(str(weights(name)))
            done.add(name)
        return model
    return get


def model_inputs(name: str, seed: int = 0) -> list[np.ndarray]:
    config = json.loads((B4K / name / "bert_config.json").read_text())
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, config["vocab_size"], size=(2, 9))  # no 0: bert4keras masks token 0
    segments = rng.integers(0, config["type_vocab_size"], size=(2, 9))
    inputs = [tokens, segments]
    if manifest(name)["condition_size"]:
        inputs.append(rng.standard_normal((2, manifest(name)["condition_size"])).astype(np.float32))
    return inputs


def bert4keras_outputs(model, name: str, inputs) -> dict[str, np.ndarray]:
    """bert4keras' own predict (`keras_outputs`), its outputs named as in apply_final_layers."""
    wanted = manifest(name)
    outputs = keras_outputs(model, inputs)
    names = [key for key, present in (("pooled" if not wanted["with_nsp"] else "nsp", wanted["with_pool"]
                                       or wanted["with_nsp"]), ("mlm", wanted["with_mlm"])) if present]
    return dict(zip(names, outputs, strict=True)) if names else {"sequence": outputs[0]}


def transformers_outputs(directory: Path, inputs) -> dict[str, np.ndarray]:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    architecture = json.loads((directory / "config.json").read_text())["architectures"][0]
    model = getattr(transformers, architecture).from_pretrained(directory).eval()
    tokens, segments = (torch.tensor(x, dtype=torch.long) for x in inputs[:2])
    with torch.no_grad():
        out = model(input_ids=tokens, token_type_ids=segments, attention_mask=torch.ones_like(tokens))
    result = {}
    if architecture == "BertForPreTraining":
        result["mlm"] = out.prediction_logits.softmax(-1).numpy()
        result["nsp"] = out.seq_relationship_logits.softmax(-1).numpy()
    elif architecture == "BertForMaskedLM":
        result["mlm"] = out.logits.softmax(-1).numpy()
    elif architecture == "BertForNextSentencePrediction":
        result["nsp"] = out.logits.softmax(-1).numpy()
    else:
        result["pooled"] = out.pooler_output.numpy()
        result["sequence"] = out.last_hidden_state.numpy()
    return result


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_audit_equals_count_params_per_layer_and_in_total(name, built):
    model = built(name)
    tree = formats.read(weights(name))
    report = audit(tree)
    layer_of = {component_of(p.name): bert4keras_table.TABLE.spelling(p.name)[0].split("/")[0] for p in tree}
    assert len(set(layer_of.values())) == len(layer_of)  # one bert4keras layer per component
    for component in report["components"]:
        layer = model.get_layer(layer_of[component["name"]])
        assert component["parameters"] == component["expected"] == layer.count_params(), component["name"]
    weighted = {layer.name for layer in model.layers if layer.count_params()}
    assert weighted == set(layer_of.values())
    assert report["parameters"] == report["expected_parameters"] == model.count_params()


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_every_value_read_is_the_bert4keras_layer_attribute_it_names(name, loaded):
    model = loaded(name)
    for param in formats.read(weights(name)):
        spelled, _ = bert4keras_table.TABLE.spelling(param.name)
        layer, role = spelled.split("/", 1)
        variable = model.get_layer(layer)
        for attribute in role.split("/"):  # "q_dense/kernel" -> layer.q_dense.kernel
            variable = getattr(variable, attribute)
        assert np.array_equal(param.tensor.read(), variable.numpy()), param.name


@pytest.mark.parametrize("name", PLAIN)
def test_bert4keras_to_hf_gives_bert4keras_predictions(name, loaded, tmp_path):
    inputs = model_inputs(name)
    expected = bert4keras_outputs(loaded(name), name, inputs)
    got = transformers_outputs(convert(weights(name), tmp_path / "hf", "hf"), inputs)
    # Hugging Face has no class with a pooler and an MLM head but no NSP: there, only MLM compares.
    compared = sorted(set(expected) & set(got))
    assert compared == sorted(expected) or (compared == ["mlm"] and name == "v99-pool-mlm")
    for key in compared:
        assert np.abs(got[key] - expected[key]).max() <= ATOL, key


def test_hf_to_bert4keras_gives_transformers_predictions(oracle, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=37, max_position_embeddings=48, type_vocab_size=3,
                                     hidden_act="gelu")
    torch.manual_seed(0)
    model = transformers.BertForPreTraining(config).eval()
    with torch.no_grad():  # random everywhere: zero biases and unit gammas hide order bugs
        for parameter in model.parameters():
            parameter.copy_(torch.randn_like(parameter) * 0.2 + (1.0 if parameter.ndim == 1 and
                                                                 parameter.shape[0] == 32 else 0.0))
    model.save_pretrained(tmp_path / "hf")
    out = convert(tmp_path / "hf", tmp_path / "model-b4k", "bert4keras")
    bert_config = tmp_path / "bert_config.json"
    bert_config.write_text(json.dumps(google_config_dict(formats.read(tmp_path / "hf").config)))
    keras_model = oracle.build(bert_config, dict(with_pool=True, with_nsp=True, with_mlm=True), None)
    keras_model.load_weights(str(out))
    rng = np.random.default_rng(1)
    tokens, segments = rng.integers(1, 99, size=(2, 9)), rng.integers(0, 3, size=(2, 9))
    nsp, mlm = keras_outputs(keras_model, [tokens, segments])
    expected = transformers_outputs(tmp_path / "hf", [tokens, segments])
    assert np.abs(mlm - expected["mlm"]).max() <= ATOL
    assert np.abs(nsp - expected["nsp"]).max() <= ATOL


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_written_file_loads_into_bert4keras_with_the_source_heads(name, built, loaded, oracle, tmp_path):
    out = convert(weights(name), tmp_path / "out-b4k", "bert4keras")
    wanted = manifest(name)
    fresh = oracle.build(B4K / name / "bert_config.json", wanted, wanted["condition_size"])
    fresh.load_weights(str(out))
    for got, expected in zip(fresh.weights, loaded(name).weights, strict=True):
        assert np.array_equal(got.numpy(), expected.numpy()), expected.name


def test_split_layer_names_load_in_bert4keras(loaded, oracle, tmp_path, monkeypatch):
    monkeypatch.setattr(keras_write, "HDF5_OBJECT_HEADER_LIMIT", 300)
    out = bert4keras_write.write(formats.read(weights("v99-pool-mlm")), tmp_path, options=WriteOptions())[0]
    fresh = oracle.build(B4K / "v99-pool-mlm" / "bert_config.json", manifest("v99-pool-mlm"), None)
    fresh.load_weights(str(out))
    for got, expected in zip(fresh.weights, loaded("v99-pool-mlm").weights, strict=True):
        assert np.array_equal(got.numpy(), expected.numpy()), expected.name


def test_a_nested_model_file_reads_as_the_flat_one(loaded, tmp_path):
    from bert4keras.backend import keras

    inner = loaded("v50-pool-nsp-mlm")
    outer = keras.models.Model(inner.inputs, inner(inner.inputs))
    outer.save_weights(str(tmp_path / "nested.h5"))
    with h5py.File(tmp_path / "nested.h5", "r") as f:
        assert len(f.attrs["layer_names"]) == 3  # Input-Token, Input-Segment and the nested model
    nested, flat = formats.read(tmp_path / "nested.h5"), formats.read(weights("v50-pool-nsp-mlm"))
    assert list(nested.params) == list(flat.params)
    for param in flat:
        assert np.array_equal(nested[param.name].tensor.read(), param.tensor.read()), param.name


def test_a_google_checkpoint_written_by_bertconv_loads_in_bert4keras(loaded, oracle, tmp_path):
    if "tf" not in formats.TARGETS:
        pytest.skip("the Google TF format is not registered")
    name = "v50-pool-nsp-mlm"
    out = convert(weights(name), tmp_path / "tf", "tf")
    from bert4keras.models import build_transformer_model

    flags = {k: v for k, v in manifest(name).items() if k.startswith("with_")}
    model = build_transformer_model(str(B4K / name / "bert_config.json"), str(out / "bert_model.ckpt"), **flags)
    for got, expected in zip(model.weights, loaded(name).weights, strict=True):
        assert np.array_equal(got.numpy(), expected.numpy()), expected.name


def test_the_global_heap_check_reads_without_mapping_the_file(tmp_path, monkeypatch):
    """check_global_heaps reads the metadata with pread, never through a memory map: touching a
    few bytes of a mapped 2 MiB page-cache folio maps all of it (a warm BERT-large tf_model.h5
    counted 300 MiB resident). The loop-prone heap is still refused, and a signature across two
    of its reads is still found."""
    import mmap

    def no_mapping(*args, **kwargs):
        raise AssertionError("check_global_heaps mapped the file")

    monkeypatch.setattr(mmap, "mmap", no_mapping)
    monkeypatch.setattr(np, "memmap", no_mapping)
    hdf5_workarounds.check_global_heaps(weights("v50-mlm"))  # a sound file passes

    data = bytearray(weights("v50-mlm").read_bytes())
    start = data.index(hdf5_workarounds.GLOBAL_HEAP_SIGNATURE)
    position = start + 16
    while int.from_bytes(data[position:position + 2], "little") != 0:
        position += 16 + -(-int.from_bytes(data[position + 8:position + 16], "little") // 8) * 8
    data[position + 8:position + 16] = bytes(8)
    path = tmp_path / WEIGHTS
    path.write_bytes(bytes(data))
    for read_size in (1 << 20, 7, 5):  # whole ranges; reads so small most signatures cross two
        monkeypatch.setattr(hdf5_workarounds, "_SCAN_BYTES", read_size)
        with pytest.raises(BadInput, match="global heap"):
            hdf5_workarounds.check_global_heaps(path)
