"""Hugging Face `tf_model.h5` (hf-tf) and `flax_model.msgpack` (hf-flax): read, write, convert.

The fixtures (fixtures/make_hf_tf_flax_fixtures.py) were made by transformers 4.57.6 with
TensorFlow 2.21 + tf-keras and flax/jax, and carry that library's own view of each file:
`reference.npz` (every parameter as it loads them), `oracle.json` (its parameter count),
`logits.npz` (its outputs on fixed inputs) and, for `pretraining`, `pt/` (its own conversion to
PyTorch). Those need no oracle at test time; the tests marked `oracle` run transformers 4.x
itself (in .cache/oracle-venv, `make oracle`) on the files bertconv writes, and skip when that
environment is absent.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bertconv import formats
from bertconv.api.inspect import describe
from bertconv.checks import same_bytes
from bertconv.checks.audit import audit
from bertconv.checks.diff import diff
from bertconv.containers.hdf5 import keras as keras_h5
from bertconv.containers import msgpack_file
from bertconv.conversion import WriteOptions, convert
from bertconv.errors import BadInput
from bertconv.config.dialects import google_config_dict
from bertconv.formats.hf import flax as hf_flax, tf as hf_tf
from bertconv.tensor import MappedTensor
from bertconv.tree import canonical_names
import oracle_process
from conftest import FIXTURES, requires, run_in_process

TF = FIXTURES / "hf_tf"
FLAX = FIXTURES / "hf_flax"
TF_FIXTURES = ["pretraining", "masked_lm", "model", "sharded"]
FLAX_FIXTURES = ["pretraining", "masked_lm", "model", "sharded", "bf16", "fp16"]
ALL = [TF / name for name in TF_FIXTURES] + [FLAX / name for name in FLAX_FIXTURES]
IDS = [f"tf-{name}" for name in TF_FIXTURES] + [f"flax-{name}" for name in FLAX_FIXTURES]
#: transformers 5 (torch) against transformers 4.x (TensorFlow, Flax) on the same weights.
LOGITS_ATOL = 1e-5
#: The config fields a conversion must carry over.
CONFIG_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                 "max_position_embeddings", "type_vocab_size", "hidden_act", "layer_norm_eps")


def bits(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array)
    return array.view(f"<u{array.dtype.itemsize}")


def reference_key(tree, param) -> str:
    """transformers' name for a parameter: the TF variable minus the model's name (the MLM
    head's held copy of the word embeddings is that same variable), or the Flax path."""
    if tree.format == hf_tf.FORMAT and param.source.startswith(hf_tf.HELD + "bert/"):
        return param.source.removeprefix(hf_tf.HELD)
    return param.source


# --- reading ----------------------------------------------------------------------------------


@pytest.mark.parametrize("directory", ALL, ids=IDS)
def test_format_is_recognised_from_the_directory(directory):
    tree = formats.read(directory)
    assert tree.format == (hf_tf.FORMAT if directory.parent == TF else hf_flax.FORMAT)
    assert tree.config.num_attention_heads == 3  # from config.json, not the H/64 default


@pytest.mark.parametrize("directory", ALL, ids=IDS)
def test_audit_equals_transformers_own_count(directory):
    oracle = json.loads((directory / "oracle.json").read_text())
    report = audit(formats.read(directory))
    assert report["ok"], report["problems"]
    assert report["parameters"] == oracle["parameters"], oracle["class"]


@pytest.mark.parametrize("directory", ALL, ids=IDS)
def test_every_value_read_equals_what_transformers_4_loads(directory):
    reference = dict(np.load(directory / "reference.npz"))
    tree = formats.read(directory)
    covered = set()
    for param in tree:
        key = reference_key(tree, param)
        expected = reference[key]
        value = param.tensor.read()
        assert value.shape == expected.shape, key
        assert np.array_equal(bits(value), bits(expected)), key
        covered.add(key)
    held = {i.name.removeprefix(hf_tf.HELD) for i in tree.ignored}
    assert set(reference) == covered | (held & set(reference))


@pytest.mark.parametrize("directory", [TF / "pretraining", FLAX / "pretraining"], ids=["tf", "flax"])
def test_values_equal_transformers_own_conversion_to_pytorch(directory):
    report = diff(formats.read(directory), formats.read(directory / "pt"))
    assert report["identical"], report["differences"]


def test_the_mlm_heads_copies_of_the_embeddings_are_read_as_tensorflow_loads_them():
    """transformers 4's TF loader assigns the mlm___cls copies after the encoder's: the tree holds
    those (one variable: no stored decoder), the encoder's are ignored copies naming their role."""
    tree = formats.read(TF / "pretraining")
    assert tree["embeddings.word"].source == "mlm___cls/bert/embeddings/word_embeddings/weight:0"
    assert all(tree[row.canonical].source == hf_tf.HELD + row.name for row in hf_tf.EMBEDDING_ROWS)
    assert "mlm.decoder" not in tree and not tree.has_untied_decoder
    assert sorted((i.name, i.copy_of) for i in tree.ignored) == \
        sorted((row.name, row.canonical) for row in hf_tf.EMBEDDING_ROWS)
    # The sharded save writes every weight once: no copies.
    sharded = formats.read(TF / "sharded")
    assert sharded["embeddings.word"].source == "bert/embeddings/word_embeddings/weight:0" and not sharded.ignored
    # An encoder-only model has no MLM head holding them.
    assert formats.read(TF / "model")["embeddings.word"].source == "bert/embeddings/word_embeddings/weight:0"


def test_dtypes_are_kept():
    assert formats.read(FLAX / "bf16")["embeddings.word"].tensor.dtype.name == "bfloat16"
    assert formats.read(FLAX / "fp16")["layers.1.ffn.output.kernel"].tensor.dtype.name == "float16"


@pytest.mark.parametrize("path", [TF / "pretraining" / "tf_model.h5", TF / "sharded" / "tf_model.h5.index.json",
                                  FLAX / "pretraining" / "flax_model.msgpack",
                                  FLAX / "sharded" / "flax_model.msgpack.index.json"],
                         ids=["tf", "tf-sharded", "flax", "flax-sharded"])
def test_inspect_and_audit_read_no_tensor_data(monkeypatch, path):
    """Not even the stored copies of the embeddings (verify compares them)."""
    def refuse(self):
        raise AssertionError(f"tensor data read: {self}")
    monkeypatch.setattr(MappedTensor, "read", refuse)
    monkeypatch.setattr(keras_h5.H5Tensor, "read", refuse)
    monkeypatch.setattr(same_bytes, "same_stored_bits", lambda *a, **k: pytest.fail("stored copies compared"))
    tree = formats.read(path)
    assert audit(tree)["ok"]
    assert describe(tree)["ok"]  # inspect's report
    assert all(isinstance(p.tensor, MappedTensor) for p in tree)


def test_sniffers_come_before_bert4keras_and_hf():
    from bertconv.formats.registry import SNIFF_ORDER

    names = [f.target for f in SNIFF_ORDER]
    for ours in ("hf-tf", "hf-flax"):
        assert names.index(ours) < names.index("bert4keras") and names.index(ours) < names.index("hf")
    assert hf_tf.sniff(FIXTURES / "bert4keras" / "v50-pool-nsp-mlm" / "bert4keras_model.h5") is None
    assert hf_flax.sniff(FIXTURES / "hf" / "pretraining" / "model.safetensors") is None
    assert hf_flax.sniff(TF / "sharded" / "tf_model.h5.index.json") is None
    assert hf_tf.sniff(FLAX / "sharded" / "flax_model.msgpack.index.json") is None


def test_a_shard_the_index_misplaces_is_bad_input(tmp_path):
    for name in ("tf_model.h5.index.json", *(p.name for p in (TF / "sharded").glob("*.h5")), "config.json"):
        (tmp_path / name).write_bytes((TF / "sharded" / name).read_bytes())
    index = json.loads((tmp_path / "tf_model.h5.index.json").read_text())
    first = next(iter(index["weight_map"]))
    index["weight_map"][first] = "tf_model-00003-of-00003.h5"
    (tmp_path / "tf_model.h5.index.json").write_text(json.dumps(index))
    with pytest.raises(BadInput, match="that shard holds no dataset"):
        formats.read(tmp_path)


def test_a_chunked_flax_array_is_refused_with_a_reason(tmp_path):
    import msgpack
    path = tmp_path / "flax_model.msgpack"
    path.write_bytes(msgpack.packb({"bert": {"embeddings": {"__msgpack_chunked_array__": True}}}))
    with pytest.raises(BadInput, match="split into chunks"):
        formats.read(path)


# --- writing and converting -----------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(FLAX.glob("*/*.msgpack")), ids=lambda p: f"{p.parent.name}-{p.name}")
def test_msgpack_writer_reproduces_flax_serialization_byte_for_byte(tmp_path, path):
    """Given the arrays in a file's own key order, the writer emits flax's exact bytes (headers,
    ext and bin records alike). `--to hf-flax` uses the order the Flax BERT creates its
    parameters; `save_pretrained` after a `tree_map` (these fixtures) sorts the keys instead."""
    arrays = msgpack_file.read_file(path)
    msgpack_file.write_file(tmp_path / path.name, [(a.path, a.tensor) for a in arrays])
    assert (tmp_path / path.name).read_bytes() == path.read_bytes()


def _same_config(a, b) -> None:
    for field in CONFIG_FIELDS:
        assert getattr(a.config, field) == getattr(b.config, field), field


SOURCES = [TF / "pretraining", TF / "masked_lm", FLAX / "pretraining", FLAX / "model", FLAX / "sharded",
           FIXTURES / "hf" / "pretraining", FIXTURES / "tf" / "full", FIXTURES / "bert4keras" / "v50-pool-nsp-mlm"]


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: f"{p.parent.name}-{p.name}")
@pytest.mark.parametrize("target", ["hf-tf", "hf-flax", "hf", "tf", "bert4keras"])
def test_conversion_round_trips_bit_for_bit(tmp_path, source, target):
    """SRC -> target -> (back to SRC's own format when that writes) is bit-exact, config intact."""
    tree = formats.read(source)
    if source.name == "v50-pool-nsp-mlm":
        tree = formats.read(source / "bert4keras_model.h5")
    destination = tmp_path / ("out.h5" if target == "bert4keras" else "out")
    convert(tree, destination, target)
    written = formats.read(destination, config_path=tree_config_file(source, target, tmp_path, tree))
    report = diff(tree, written)
    assert report["identical"], report["differences"]
    _same_config(tree, written)


def tree_config_file(source: Path, target: str, tmp_path: Path, tree) -> Path | None:
    """bert4keras files carry no config: give the source's, as a user would."""
    if target != "bert4keras":
        return None
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(google_config_dict(tree.config)))
    return path


@pytest.mark.parametrize("target", ["hf-tf", "hf-flax"])
def test_written_files_read_back_as_their_format(tmp_path, target):
    convert(formats.read(FIXTURES / "hf" / "pretraining"), tmp_path / "out", target)
    assert formats.read(tmp_path / "out").format == {"hf-tf": hf_tf.FORMAT, "hf-flax": hf_flax.FORMAT}[target]


def test_bfloat16_is_widened_exactly_for_tf(tmp_path):
    tree = formats.read(FLAX / "bf16")
    convert(tree, tmp_path / "out", "hf-tf")
    written = formats.read(tmp_path / "out")
    assert written["embeddings.word"].tensor.dtype.name == "float32"
    report = diff(tree, written)
    assert report["ok"] and not report["identical"]  # same values, another dtype
    assert json.loads((tmp_path / "out" / "config.json").read_text())["dtype"] == "float32"


def test_an_untied_decoder_is_refused_by_tf_and_kept_by_flax(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=91, hidden_size=24, num_hidden_layers=1, num_attention_heads=3,
                                     intermediate_size=29, max_position_embeddings=33, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(config)
    with torch.no_grad():  # one bias for the head, as Flax's BERT has
        model.cls.predictions.decoder.bias = model.cls.predictions.bias
    model.save_pretrained(tmp_path / "hf")
    tree = formats.read(tmp_path / "hf")
    assert tree.has_untied_decoder
    with pytest.raises(BadInput, match="drop-untied-decoder"):
        convert(tree, tmp_path / "tf", "hf-tf")
    convert(tree, tmp_path / "tf", "hf-tf", options=WriteOptions(drop_untied_decoder=True))
    convert(tree, tmp_path / "flax", "hf-flax")
    flax_tree = formats.read(tmp_path / "flax")
    assert flax_tree.has_untied_decoder
    assert diff(tree, flax_tree)["ok"]
    assert flax_tree["mlm.decoder"].source == "cls/predictions/decoder/kernel"


# --- logits with transformers 5 ---------------------------------------------------------------


@pytest.mark.parametrize("directory,cls_name", [(TF / "pretraining", "BertForPreTraining"),
                                                (TF / "masked_lm", "BertForMaskedLM"),
                                                (TF / "sharded", "BertForPreTraining"),
                                                (FLAX / "pretraining", "BertForPreTraining"),
                                                (FLAX / "masked_lm", "BertForMaskedLM"),
                                                (FLAX / "bf16", "BertForPreTraining")],
                         ids=["tf", "tf-mlm", "tf-sharded", "flax", "flax-mlm", "flax-bf16"])
def test_converted_model_gives_transformers_4_logits_in_transformers_5(tmp_path, directory, cls_name):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    convert(formats.read(directory), tmp_path / "hf", "hf")
    model, info = getattr(transformers, cls_name).from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    model = model.float().eval()
    expected = np.load(directory / "logits.npz")
    feed = {k: torch.from_numpy(expected[k].astype(np.int64)) for k in ("input_ids", "token_type_ids", "attention_mask")}
    with torch.no_grad():
        out = model(**feed)
    mlm = out.prediction_logits if cls_name == "BertForPreTraining" else out.logits
    assert np.abs(mlm.numpy() - expected["mlm_logits"]).max() <= LOGITS_ATOL
    if cls_name == "BertForPreTraining":
        assert np.abs(out.seq_relationship_logits.numpy() - expected["nsp_logits"]).max() <= LOGITS_ATOL


# --- the commands -----------------------------------------------------------------------------


@pytest.mark.parametrize("directory", [TF / "pretraining", FLAX / "sharded"], ids=["tf", "flax-sharded"])
def test_commands_work_on_the_files(tmp_path, directory):
    assert run_in_process("inspect", directory).exit_code == 0
    assert run_in_process("audit", directory).exit_code == 0
    assert run_in_process("verify", directory, "--deep", "--allow-untrained-mlm").exit_code == 0  # random weights
    other = TF / "pretraining" / "pt" if directory.parent == TF else FLAX / "pretraining"
    assert run_in_process("diff", directory, other).exit_code in (0, 1)
    for target in ("hf-tf", "hf-flax"):
        result = run_in_process("convert", directory, tmp_path / target, "--to", target)
        assert result.exit_code == 0, result.stderr
        assert run_in_process("diff", directory, tmp_path / target).exit_code == 0


@requires("tokenizers")
@pytest.mark.parametrize("directory", [TF / "pretraining", FLAX / "sharded"], ids=["tf", "flax-sharded"])
def test_fill_mask_works_on_the_files(directory):
    result = run_in_process("fill-mask", directory, "w1 w2 [MASK] w3", "--json")
    assert result.exit_code == 0, result.stderr


def test_a_broken_file_is_exit_2_naming_it(tmp_path):
    path = tmp_path / "flax_model.msgpack"
    path.write_bytes((FLAX / "pretraining" / "flax_model.msgpack").read_bytes()[:5000])
    result = run_in_process("audit", path)
    assert result.exit_code == 2 and "flax_model.msgpack" in result.stderr and "Traceback" not in result.stderr


# --- transformers 4.x loading what bertconv writes ------------------------------------------


def run_oracle(jobs: list[tuple[Path, Path, Path]]) -> list[dict]:
    """transformers 4.x's loading of each (DIRECTORY, INPUTS.npz, OUT.npz) job: its JSON line
    (tests/oracle_hf_tf_flax.py), in the worker's one oracle process (tests/oracle_process.py)."""
    oracle_process.skip_unless_installed()
    results = [line for job in jobs for line in oracle_process.run("load", *job)]
    assert len(results) == len(jobs), results
    return results


#: (source fixture, target, transformers class expected): written by bertconv, loaded by 4.x.
WRITTEN = [(FLAX / "pretraining", "hf-tf", "TFBertForPreTraining"),
           (FLAX / "model", "hf-tf", "TFBertModel"),
           (TF / "masked_lm", "hf-flax", "FlaxBertForMaskedLM"),
           (FLAX / "bf16", "hf-flax", "FlaxBertForPreTraining")]
#: Fixtures transformers 4.x reads again at test time, to compare with what bertconv reads.
READ_AGAIN = [TF / "sharded", FLAX / "sharded"]


@pytest.fixture(scope="module")
def oracle_runs(tmp_path_factory):
    """One oracle process (TensorFlow and jax start slowly) for every file the tests below check:
    (source, directory loaded, its npz, its JSON line) per WRITTEN entry, then per READ_AGAIN."""
    tmp_path = tmp_path_factory.mktemp("oracle")
    jobs, sources = [], []
    for number, (source, target, _) in enumerate(WRITTEN):
        convert(formats.read(source), tmp_path / f"w{number}", target)
        jobs.append((tmp_path / f"w{number}", source / "logits.npz", tmp_path / f"w{number}.npz"))
        sources.append(source)
    for number, source in enumerate(READ_AGAIN):
        jobs.append((source, source / "logits.npz", tmp_path / f"r{number}.npz"))
        sources.append(source)
    return [(source, directory, out, result) for source, (directory, _, out), result
            in zip(sources, jobs, run_oracle(jobs))]


@pytest.mark.oracle
def test_transformers_4_loads_what_bertconv_writes_with_the_same_logits(oracle_runs):
    for (source, target, cls_name), (_, directory, out, result) in zip(WRITTEN, oracle_runs):
        label = f"{source.name} --to {target}"
        assert result["class"] == cls_name, label
        assert result["missing"] == [] and result["unexpected"] == [], (label, result)
        assert result["parameters"] == audit(formats.read(source))["parameters"], label
        loaded, expected = np.load(out), np.load(source / "logits.npz")
        for key in ("mlm_logits", "nsp_logits", "sequence_output"):
            if key in expected and key in loaded:
                assert np.abs(loaded[key] - expected[key]).max() <= LOGITS_ATOL, (label, key)
        written = formats.read(directory)
        for param in written:
            value = loaded[f"param:{reference_key(written, param)}"]
            assert np.array_equal(bits(param.tensor.read()), bits(value)), (label, param.name)


@pytest.mark.oracle
def test_transformers_4_reads_the_fixtures_as_bertconv_does(oracle_runs):
    for source, directory, out, result in oracle_runs[len(WRITTEN):]:
        loaded = np.load(out)
        tree = formats.read(directory)
        assert result["parameters"] == audit(tree)["parameters"]
        for param in tree:
            assert np.array_equal(bits(param.tensor.read()), bits(loaded[f"param:{reference_key(tree, param)}"]))


@pytest.mark.parametrize("table", [hf_tf.TABLE, hf_flax.TABLE], ids=["tf", "flax"])
def test_tables_spell_every_parameter_of_a_bert_and_read_it_back(table):
    """Both directions of each table agree for every canonical name of a model with all heads
    and an untied decoder (tables as data: complete and bijective)."""
    tree = formats.read(TF / "pretraining")
    # TF BERT ties the decoder by construction: its table has no untied decoder to spell.
    heads = replace(tree.heads, untied_decoder=table is not hf_tf.TABLE)
    names = canonical_names(replace(tree.config, num_hidden_layers=12), heads)
    spelled = {}
    for name in names:
        spelling, layout = table.spelling(name)
        assert table.match(spelling).canonical == name and table.match(spelling).layout == layout
        spelled[spelling] = name
    assert len(spelled) == len(names)
