"""XLM-RoBERTa, CamemBERT and DistilBERT against transformers 5, which made their fixtures
(fixtures/make_xlmr_distilbert_fixtures.py): both runtimes' logits, hf outputs byte-identical to
`save_pretrained`'s and loaded by transformers 5 with no missing keys and the same logits, the
closed form, the model type kept, conversions to formats that cannot hold them refused naming why,
and fill-mask with the tokenizers transformers 5 builds from their vocabulary files.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from bertconv import formats
from bertconv.checks.audit import audit
from conftest import FIXTURES, run_in_process

HERE = FIXTURES / "family_hf"
MASKED_LM = {"xlm-roberta": HERE / "xlm_roberta" / "masked_lm", "camembert": HERE / "camembert" / "masked_lm",
             "distilbert": HERE / "distilbert" / "masked_lm"}
BASE = {"xlm-roberta": HERE / "xlm_roberta" / "model", "camembert": HERE / "camembert" / "model",
        "distilbert": HERE / "distilbert" / "model"}
ALL = [*MASKED_LM.values(), *BASE.values(), HERE / "distilbert" / "sinusoidal"]
#: The runtimes against transformers 5 on these fixtures: at most 1.4e-6 measured (NumPy, float32
#: logits of magnitude ~10 from weights drawn at scale 0.5), so 1e-4 leaves a margin for BLAS.
RUNTIME_TOLERANCE = 1e-4
#: transformers 5 computing bertconv's hf output and the source: the same tensors, bit for bit.
OUTPUT_TOLERANCE = 1e-5
#: Short enough for the fixtures' 24 positions (22 tokens past the padding offset).
FILL_MASK_TEXTS = ["le chat <mask> sur le tapis.", "ça coûte <mask> euros", "das ist schön，nicht <mask>?"]


def _ids(vocab_size: int) -> np.ndarray:
    return (np.arange(2 * 7).reshape(2, 7) * 5 + 3) % vocab_size  # [2, 7], no padding index at 1


def _transformers_outputs(directory: Path, ids: np.ndarray, *, masked_lm: bool):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    auto = transformers.AutoModelForMaskedLM if masked_lm else transformers.AutoModel
    model, info = auto.from_pretrained(directory, output_loading_info=True)
    with torch.no_grad():
        out = model.eval()(torch.tensor(ids))
    return (out.logits if masked_lm else out.last_hidden_state).numpy(), info


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_both_runtimes_compute_what_transformers_5_computes(path):
    from bertconv.runtime.numerics import Numerics
    from bertconv.runtime.numpy_bert import NumpyBert

    tree = formats.read(path)
    ids = _ids(tree.config.vocab_size)
    expected, _ = _transformers_outputs(path, ids, masked_lm=tree.heads.mlm)
    numerics = Numerics.for_tree(tree)
    out = NumpyBert(tree, numerics)(ids)
    assert np.abs((out.mlm_logits if tree.heads.mlm else out.sequence_output) - expected).max() <= RUNTIME_TOLERANCE
    from bertconv.runtime.torch_bert import TorchBert

    out = TorchBert(tree, numerics)(ids)
    got = out.mlm_logits if tree.heads.mlm else out.sequence_output
    assert np.abs(np.asarray(got) - expected).max() <= RUNTIME_TOLERANCE


def _closed_form(config: dict, *, pooler: bool, mlm: bool) -> int:
    """The parameter count written out from the config.json alone: embeddings, L layers, heads."""
    V, P = config["vocab_size"], config["max_position_embeddings"]
    H = config.get("hidden_size", config.get("dim"))
    L = config.get("num_hidden_layers", config.get("n_layers"))
    I = config.get("intermediate_size", config.get("hidden_dim"))
    T = config.get("type_vocab_size", 0)
    layer = 4 * H * H + 4 * H + 2 * H + 2 * H * I + I + H + 2 * H
    return (V + P + T) * H + 2 * H + L * layer + (H * H + H if pooler else 0) + (H * H + 3 * H + V if mlm else 0)


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_audit_counts_the_closed_form(path):
    config = json.loads((path / "config.json").read_text())
    masked_lm = config["architectures"][0].endswith("ForMaskedLM")
    # transformers' masked LMs of the fairseq families build their encoder without a pooler; DistilBERT has none.
    expected = _closed_form(config, pooler=not masked_lm and config["model_type"] != "distilbert", mlm=masked_lm)
    report = audit(formats.read(path))
    assert not report["problems"] and report["parameters"] == report["expected_parameters"] == expected


def test_distilbert_has_no_token_types_and_no_pooler_and_reads_its_own_keys():
    config = formats.read(MASKED_LM["distilbert"]).config
    stated = json.loads((MASKED_LM["distilbert"] / "config.json").read_text())
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads, config.intermediate_size) == (
        stated["dim"], stated["n_layers"], stated["n_heads"], stated["hidden_dim"])
    assert config.type_vocab_size == 0 and config.layer_norm_eps == 1e-12 and config.position_offset == 0
    assert not formats.read(MASKED_LM["distilbert"]).heads.pooler


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_hf_output_is_save_pretrained_s_bytes_and_transformers_5_computes_it(path, tmp_path):
    out = tmp_path / "out"
    assert run_in_process("convert", path, out, "--to", "hf").exit_code == 0
    assert (out / "model.safetensors").read_bytes() == (path / "model.safetensors").read_bytes()
    written = json.loads((out / "config.json").read_text())
    source = json.loads((path / "config.json").read_text())
    assert written["model_type"] == source["model_type"] and written["architectures"] == source["architectures"]
    tree = formats.read(path)
    ids = _ids(tree.config.vocab_size)
    expected, _ = _transformers_outputs(path, ids, masked_lm=tree.heads.mlm)
    got, info = _transformers_outputs(out, ids, masked_lm=tree.heads.mlm)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert np.abs(got - expected).max() <= OUTPUT_TOLERANCE


@pytest.mark.parametrize("model_type", MASKED_LM)
def test_a_pytorch_bin_reads_as_its_safetensors(model_type, tmp_path):
    """A `pytorch_model.bin` as torch.save writes the state dict (the tied decoder sharing the word
    embeddings' storage), converted to safetensors: save_pretrained's file, byte for byte."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    source = tmp_path / "bin"
    source.mkdir()
    torch.save(transformers.AutoModelForMaskedLM.from_pretrained(MASKED_LM[model_type]).state_dict(),
               source / "pytorch_model.bin")
    shutil.copy(MASKED_LM[model_type] / "config.json", source / "config.json")
    out = tmp_path / "out"
    assert run_in_process("convert", source, out, "--to", "hf").exit_code == 0
    assert (out / "model.safetensors").read_bytes() == (MASKED_LM[model_type] / "model.safetensors").read_bytes()


@pytest.mark.parametrize("model_type", ["xlm-roberta", "camembert"])
@pytest.mark.parametrize("target", ["tf", "bert4keras"])
def test_google_and_bert4keras_refuse_them_naming_why(model_type, target, tmp_path):
    """(A DistilBERT is written there as its BERT: tests/test_distilbert_as_bert.py.)"""
    out = tmp_path / "out"
    result = run_in_process("convert", MASKED_LM[model_type], out, "--to", target)
    assert result.exit_code == 2 and not out.exists()
    assert f"model_type '{model_type}'" in result.stderr and "Nothing was written" in result.stderr
    assert "positions start at row 2" in result.stderr


def test_diff_tells_xlm_roberta_from_roberta_with_the_same_tensors(tmp_path):
    relabelled = tmp_path / "roberta"
    shutil.copytree(MASKED_LM["xlm-roberta"], relabelled)
    config = json.loads((relabelled / "config.json").read_text())
    (relabelled / "config.json").write_text(json.dumps({**config, "model_type": "roberta"}))
    assert formats.read(relabelled).config.model_type == "roberta"
    result = run_in_process("diff", MASKED_LM["xlm-roberta"], relabelled, "--json")
    assert result.exit_code == 1
    assert [d["field"] for d in json.loads(result.stdout)["config_differences"]] == ["model_type"]


def test_verify_passes_and_sees_the_tied_decoder():
    for path in MASKED_LM.values():
        result = run_in_process("verify", path, "--json")
        report = json.loads(result.stdout)
        assert result.exit_code == 0 and report["ok"], result.stdout


# --- bad input ----------------------------------------------------------------------------------


def test_a_config_of_another_family_is_refused_naming_both(tmp_path):
    directory = tmp_path / "mixed"
    shutil.copytree(FIXTURES / "hf" / "masked_lm", directory)
    config = json.loads((MASKED_LM["xlm-roberta"] / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps(config))
    result = run_in_process("audit", directory)
    assert result.exit_code == 2 and "xlm-roberta" in result.stderr and "bert" in result.stderr


def test_a_distilbert_key_stated_under_both_names_is_refused(tmp_path):
    directory = tmp_path / "both"
    shutil.copytree(MASKED_LM["distilbert"], directory)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "hidden_size": config["dim"]}))
    result = run_in_process("audit", directory)
    assert result.exit_code == 2 and "dim and hidden_size are both stated" in result.stderr


@pytest.mark.parametrize("key, value", [("layer_norm_eps", 1e-5), ("type_vocab_size", 2), ("hidden_act", "relu"),
                                        ("intermediate_size", 99)])
def test_bert_keys_distilbert_never_reads_are_unread(key, value, tmp_path):
    directory = tmp_path / "unread"
    shutil.copytree(MASKED_LM["distilbert"], directory)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, key: value}))
    assert dict(formats.read(directory).config.unread) == {key: json.dumps(value)}
    assert formats.read(directory).config == formats.read(MASKED_LM["distilbert"]).config
    assert run_in_process("verify", directory).exit_code == 2


def test_sinusoidal_positions_are_the_stored_table_transformers_5_computes_with(tmp_path):
    """`sinusoidal_pos_embds` is inert for a stored model: the file holds the table, and transformers 5
    computes with the table the file holds, even one that is no longer sinusoidal."""
    safetensors = pytest.importorskip("safetensors.numpy")
    path = HERE / "distilbert" / "sinusoidal"
    assert json.loads((path / "config.json").read_text())["sinusoidal_pos_embds"] is True
    tensors = safetensors.load_file(path / "model.safetensors")
    table = tensors["distilbert.embeddings.position_embeddings.weight"]
    positions, dim = table.shape
    angles = np.arange(positions)[:, None] / np.power(10000, 2 * (np.arange(dim) // 2) / dim)[None, :]
    assert np.allclose(table[:, 0::2], np.sin(angles[:, 0::2]), atol=1e-6)
    assert np.allclose(table[:, 1::2], np.cos(angles[:, 1::2]), atol=1e-6)
    changed = tmp_path / "changed"
    shutil.copytree(path, changed)
    safetensors.save_file({**tensors, "distilbert.embeddings.position_embeddings.weight": table * 3 + 1},
                          changed / "model.safetensors", metadata={"format": "pt"})
    ids = _ids(31)
    expected, _ = _transformers_outputs(changed, ids, masked_lm=True)
    assert not np.allclose(expected, _transformers_outputs(path, ids, masked_lm=True)[0], atol=1e-3)
    from bertconv.runtime.numerics import Numerics
    from bertconv.runtime.numpy_bert import NumpyBert

    tree = formats.read(changed)
    assert np.abs(NumpyBert(tree, Numerics.for_tree(tree))(ids).mlm_logits - expected).max() <= RUNTIME_TOLERANCE


# --- fill-mask ----------------------------------------------------------------------------------


def _reference_tokenizer(model_type: str, directory: Path):
    """transformers 5's tokenizer for the directory. Its CamembertTokenizer fails to build from a
    sentencepiece.bpe.model alone (5.24: the class declares no `model`, so the extractor hands
    `CamembertConverter` a BPE vocabulary); it is built as that path intends, the model's pieces
    extracted as a Unigram and laid out by `CamembertConverter.convert_from_spm`."""
    transformers = pytest.importorskip("transformers")
    if model_type != "camembert":
        return transformers.AutoTokenizer.from_pretrained(directory)
    from tokenizers.models import Unigram
    from transformers.convert_slow_tokenizer import CamembertConverter, SentencePieceExtractor

    extracted = SentencePieceExtractor(str(directory / "sentencepiece.bpe.model")).extract(Unigram)
    return transformers.CamembertTokenizer(**CamembertConverter.convert_from_spm(**extracted))


@pytest.mark.parametrize("model_type", ["xlm-roberta", "camembert"])
def test_the_sentencepiece_tokenizer_is_transformers_5_s(model_type):
    pytest.importorskip("tokenizers")
    from bertconv.runtime.tokenization.select import find, open_tokenizer

    directory = MASKED_LM[model_type]
    reference = _reference_tokenizer(model_type, directory)
    ours = open_tokenizer(find(directory))
    assert ours.vocab == reference.get_vocab()
    texts = [*FILL_MASK_TEXTS, "<s> the <unk> cat</s> <mask>x", "ünïcödé ⅷ ｆｕｌｌ <mask>.", "  spaces   <mask>  "]
    for text in texts:
        assert ours.encode(text).ids == reference(text)["input_ids"], text
    assert ours.encode("le chat", "sur le <mask>").ids == reference("le chat", "sur le <mask>")["input_ids"]


@pytest.mark.parametrize("model_type", ["xlm-roberta", "camembert"])
def test_fill_mask_gives_transformers_5_s_pipeline_ids_and_probabilities(model_type):
    transformers = pytest.importorskip("transformers")
    directory = MASKED_LM[model_type]
    pipeline = transformers.pipeline("fill-mask", model=str(directory),
                                     tokenizer=_reference_tokenizer(model_type, directory), top_k=5)
    for text in FILL_MASK_TEXTS:
        expected = pipeline(text)
        result = run_in_process("fill-mask", directory, text.replace("<mask>", "[MASK]"), "--json", "--top-k", "5")
        assert result.exit_code == 0, result.stderr
        got = json.loads(result.stdout)["masks"][0]["predictions"]
        assert [p["id"] for p in got] == [e["token"] for e in expected], text
        assert np.allclose([p["prob"] for p in got], [e["score"] for e in expected], atol=1e-6), text


def test_fill_mask_reads_a_tokenizer_json_transformers_5_saved(tmp_path):
    pytest.importorskip("tokenizers")
    directory = tmp_path / "xlmr"
    shutil.copytree(MASKED_LM["xlm-roberta"], directory)
    _reference_tokenizer("xlm-roberta", directory).save_pretrained(directory)
    (directory / "sentencepiece.bpe.model").unlink()
    reference = run_in_process("fill-mask", MASKED_LM["xlm-roberta"], FILL_MASK_TEXTS[0], "--json")
    result = run_in_process("fill-mask", directory, FILL_MASK_TEXTS[0], "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["tokenizer"]["kind"] == "tokenizer.json"
    assert json.loads(result.stdout)["masks"] == json.loads(reference.stdout)["masks"]


def test_a_sentencepiece_bpe_model_of_no_known_order_is_albert_s_or_refused(tmp_path):
    """Without a config or settings naming the class, the file is read as ALBERT's spiece.model
    (a Unigram), which it is not: the BPE model type is refused, naming it."""
    pytest.importorskip("tokenizers")
    from bertconv.errors import BadInput
    from bertconv.runtime.tokenization.select import open_tokenizer

    alone = tmp_path / "sentencepiece.bpe.model"
    shutil.copy(MASKED_LM["camembert"] / "sentencepiece.bpe.model", alone)
    with pytest.raises(BadInput, match="bpe model"):
        open_tokenizer(alone)


def test_the_json_schemas_name_every_family():
    from bertconv import families

    schema = json.loads((Path(formats.__file__).parents[1] / "schemas" / "common.json").read_text())
    assert schema["$defs"]["checkpoint"]["properties"]["family"]["enum"] == list(families.FAMILIES)
