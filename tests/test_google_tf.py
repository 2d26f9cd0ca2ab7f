"""Google TF1 checkpoints as a format: table, reader, writer, against TensorFlow and transformers."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from bertconv import formats
from bertconv.checks.audit import audit
from bertconv.conversion import WriteOptions, convert
from bertconv.errors import BadInput
from bertconv.formats.tensorflow import google as google_tf
from bertconv.tree import canonical_names
from bertconv.config import Heads

from conftest import FIXTURES, real_file, run_in_process

TF = FIXTURES / "tf"
HF = FIXTURES / "hf"
FIXTURE_NAMES = ["full", "two_shards", "fp16", "bf16", "encoder_only", "snappy"]


def test_table_is_a_bijection_covering_google_names():
    tree = formats.read(TF / "full")
    names = canonical_names(tree.config, Heads())
    spellings = [google_tf.TABLE.spelling(n)[0] for n in names]
    assert len(set(spellings)) == len(names)
    assert all(google_tf.TABLE.match(s).canonical == n for s, n in zip(spellings, names))
    assert google_tf.TABLE.spelling("mlm.decoder") is None  # Google stores no decoder


@pytest.mark.parametrize("fixture", FIXTURE_NAMES)
def test_audit_of_every_fixture(fixture):
    report = audit(formats.read(TF / fixture))
    assert report["ok"], report["problems"]
    assert report["format"] == "google-tf"


def test_optimizer_slots_and_global_step_are_ignored_with_counts():
    report = audit(formats.read(TF / "full"))
    ignored = {i["name"]: i for i in report["ignored"]}
    assert ignored["global_step"]["parameters"] == 1
    slots = [name for name in ignored if name.endswith(("/adam_m", "/adam_v"))]
    assert len(slots) == 2 * len([c for c in formats.read(TF / "full").params])
    assert ignored["bert/embeddings/word_embeddings/adam_m"]["parameters"] == 99 * 32
    assert report["parameters"] == 20_495


@pytest.mark.parametrize("fixture", FIXTURE_NAMES)
def test_every_value_equals_tensorflow_reader(fixture):
    tf = pytest.importorskip("tensorflow")
    tree = formats.read(TF / fixture)
    reader = tf.train.load_checkpoint(str(TF / fixture / "bert_model.ckpt"))
    for param in tree:
        expected = reader.get_tensor(param.source)
        if expected.dtype.name == "bfloat16":
            expected = expected.view(np.uint16)
        if param.name == "nsp.kernel":
            expected = expected.T
        got = param.tensor.read()
        assert got.dtype == expected.dtype and np.array_equal(got, expected), param.source


@pytest.mark.parametrize("name,figure,tensors", [
    ("google-bert-medium-uncased", 41_668_412, 142),
    ("chinese-bert-wwm", 102_882_442, 206),
])
def test_real_index_files_audit_to_the_published_figures(tmp_path, name, figure, tensors):
    shutil.copy(real_file(f"{name}.ckpt.index"), tmp_path / "bert_model.ckpt.index")
    shutil.copy(real_file(f"{name}.bert_config.json"), tmp_path / "bert_config.json")
    tree = formats.read(tmp_path / "bert_model.ckpt.index")
    report = audit(tree)
    assert report["ok"], report["problems"]
    assert report["parameters"] == report["expected_parameters"] == figure
    assert len(tree.params) == tensors
    assert report["heads"] == {"pooler": True, "mlm": True, "nsp": True, "sop": False, "rtd": False, "contact": False}
    # Without the config, shapes and the stated head default give the same counts.
    (tmp_path / "bert_config.json").unlink()
    assert audit(formats.read(tmp_path))["parameters"] == figure


def test_chinese_wwm_global_step_is_ignored_not_counted(tmp_path):
    shutil.copy(real_file("chinese-bert-wwm.ckpt.index"), tmp_path / "bert_model.ckpt.index")
    report = audit(formats.read(tmp_path / "bert_model.ckpt"))
    assert [(i["name"], i["dtype"], i["parameters"]) for i in report["ignored"]] == [("global_step", "int64", 1)]


def test_hf_to_tf_is_read_back_by_tensorflow_and_byte_identical_to_its_saver(tmp_path):
    tf = pytest.importorskip("tensorflow")
    tree = formats.read(HF / "pretraining")
    convert(tree, tmp_path / "ours", "tf")
    written = tf.train.load_checkpoint(str(tmp_path / "ours" / "bert_model.ckpt"))
    reference = {}
    for param in tree:
        spelled = google_tf.TABLE.spelling(param.name)
        if spelled is None:
            continue
        name, layout = spelled
        value = np.ascontiguousarray(layout.to_format(param.tensor).read())
        reference[name] = value
        assert np.array_equal(written.get_tensor(name), value), name
    # TensorFlow's own writer, given the same tensors, writes the same bytes.
    prefix = str(tmp_path / "theirs" / "bert_model.ckpt")
    names = sorted(reference)
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(reference[n]) for n in names])
    for suffix in (".index", ".data-00000-of-00001"):
        ours = (tmp_path / "ours" / ("bert_model.ckpt" + suffix)).read_bytes()
        theirs = (tmp_path / "theirs" / ("bert_model.ckpt" + suffix)).read_bytes()
        assert ours == theirs, suffix


def test_tf_to_hf_gives_the_logits_of_the_tf_weights(tmp_path):
    """The converted model must compute what the TF checkpoint's own weights compute: compare
    against transformers with every weight set by hand from TensorFlow's reader."""
    tf = pytest.importorskip("tensorflow")
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    convert(formats.read(TF / "full"), tmp_path / "hf", "hf")
    converted = transformers.BertForPreTraining.from_pretrained(tmp_path / "hf").eval()

    google = json.loads((TF / "full" / "bert_config.json").read_text())
    config = transformers.BertConfig(**{k: google[k] for k in (
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
        "max_position_embeddings", "type_vocab_size")}, hidden_act="gelu_new")
    by_hand = transformers.BertForPreTraining(config).eval()
    reader = tf.train.load_checkpoint(str(TF / "full" / "bert_model.ckpt"))
    state = by_hand.state_dict()
    with torch.no_grad():
        for name in state:
            tf_name = _google_name(name)
            if tf_name is None:
                continue
            value = reader.get_tensor(tf_name)
            if name.endswith(".weight") and value.ndim == 2 and "embeddings" not in name and "seq_relationship" not in name:
                value = value.T
            state[name].copy_(torch.from_numpy(np.ascontiguousarray(value)))
    by_hand.load_state_dict(state)
    ids = torch.tensor([[2, 5, 17, 40, 98, 3, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0, 0]])
    types = torch.tensor([[0, 0, 0, 1, 1, 1, 0, 0]])
    a = converted(input_ids=ids, attention_mask=mask, token_type_ids=types)
    b = by_hand(input_ids=ids, attention_mask=mask, token_type_ids=types)
    assert converted.config.hidden_act == "gelu_new"  # Google's "gelu" is the tanh form
    assert torch.max(torch.abs(a.prediction_logits - b.prediction_logits)) <= 1e-5
    assert torch.max(torch.abs(a.seq_relationship_logits - b.seq_relationship_logits)) <= 1e-5


def _google_name(hf_name: str) -> str | None:
    """The TensorFlow name transformers' old converter would pair with `hf_name` (written out
    by hand here, independently of bertconv's table)."""
    if "decoder" in hf_name:
        return None
    name = hf_name.replace("bert.encoder.layer.", "bert/encoder/layer_").replace(".", "/")
    name = name.replace("LayerNorm/weight", "LayerNorm/gamma").replace("LayerNorm/bias", "LayerNorm/beta")
    name = name.replace("_embeddings/weight", "_embeddings")
    name = name.replace("/weight", "/kernel")
    if name == "cls/predictions/bias":
        return "cls/predictions/output_bias"
    if name.startswith("cls/seq_relationship"):
        return name.replace("/kernel", "/output_weights").replace("/bias", "/output_bias")
    return name


def test_untied_decoder_is_refused_unless_dropped(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=37, max_position_embeddings=40, tie_word_embeddings=False)
    model = transformers.BertForMaskedLM(config)
    with torch.no_grad():
        model.cls.predictions.decoder.weight.normal_()
    model.save_pretrained(tmp_path / "untied")
    tree = formats.read(tmp_path / "untied")
    assert tree.has_untied_decoder
    with pytest.raises(BadInput, match="--drop-untied-decoder"):
        convert(tree, tmp_path / "tf", "tf")
    assert not (tmp_path / "tf").exists()
    convert(tree, tmp_path / "tf", "tf", options=WriteOptions(drop_untied_decoder=True))
    assert "mlm.decoder" not in formats.read(tmp_path / "tf").params


@pytest.mark.parametrize("damage,expected", [
    ("truncate_index", "truncated"),
    ("bad_magic", "magic"),
    ("missing_shard", "missing data file"),
    ("short_data", "truncated"),
])
def test_damaged_bundles_exit_two_with_a_clear_message(tmp_path, damage, expected):
    shutil.copytree(TF / "full", tmp_path / "ckpt")
    index = tmp_path / "ckpt" / "bert_model.ckpt.index"
    data = tmp_path / "ckpt" / "bert_model.ckpt.data-00000-of-00001"
    if damage == "truncate_index":
        index.write_bytes(index.read_bytes()[:-20])
    elif damage == "bad_magic":
        index.write_bytes(index.read_bytes()[:-1] + b"\x00")
    elif damage == "missing_shard":
        data.unlink()
    else:
        data.write_bytes(data.read_bytes()[:1000])
    command = "audit" if damage in ("truncate_index", "bad_magic") else "convert"
    args = [tmp_path / "ckpt"] if command == "audit" else [tmp_path / "ckpt", tmp_path / "out", "--to", "hf"]
    result = run_in_process(command, *args)
    assert result.exit_code == 2, result
    assert expected in result.stderr.lower() and "bert_model.ckpt" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_prefix_index_data_and_directory_all_name_the_same_checkpoint():
    paths = [TF / "full", TF / "full" / "bert_model.ckpt", TF / "full" / "bert_model.ckpt.index",
             TF / "full" / "bert_model.ckpt.data-00000-of-00001"]
    trees = [formats.read(p) for p in paths]
    assert {t.path for t in trees} == {TF / "full" / "bert_model.ckpt"}
    assert trees[0].vocab == TF / "full" / "vocab.txt"


def _indexes() -> list:
    from conftest import SHARED_REAL

    found = sorted(FIXTURES.rglob("*.index"))
    return found + (sorted(SHARED_REAL.glob("*.ckpt.index")) if SHARED_REAL.is_dir() else [])


def test_telling_the_model_apart_stops_early_only_where_the_choice_is_the_same():
    """Once a family of one model reads every name of a bundle, the families after it are not
    asked (none can read more, nor win a tie): the choice is the one asking them all gives."""
    from bertconv.containers.tensorflow.bundle import BundleReader

    early = full = 0
    for index in _indexes():
        prefix = index.with_suffix("")
        try:
            names = list(BundleReader(prefix).entries)
            chosen, _ = google_tf._choose_model(index, names, None, prefix, None)
        except BadInput:
            continue
        readings = [google_tf._reading(index, names, model, None) for model in google_tf.ALL_MODELS]
        best = max(readings, key=lambda r: r.matches)
        if best.model.name is not None:  # ELECTRA's two models: never stopped early
            continue
        if best.model is google_tf.BERT:
            best = google_tf._positionless(index, best, names, prefix, None)
        assert chosen == best, index
        early += best.matches == len(names)
        full += best.matches < len(names)
    assert early >= 3 and full >= 3, (early, full)
