"""XLM-RoBERTa, CamemBERT and DistilBERT in `tf_model.h5` (hf-tf) and `flax_model.msgpack` (hf-flax).

The fixtures are transformers 4.57.6's (fixtures/make_hf_tf_flax_family_fixtures.py, beside
RoBERTa's, ALBERT's and ELECTRA's): tests/test_hf_tf_flax_families.py reads every one of them
against transformers' own view (values, parameter counts, logits, its conversion to PyTorch) and
writes every float32 class back byte for byte (Flax) or laid out as `save_pretrained` lays it out
(TF). The tests here are what those families' share does not cover: the model types kept, the
tied copies DistilBERT's `vocab_projector` holds, CamemBERT refused --to hf-flax (4.57 has no Flax
CamemBERT), transformers 4.57 loading what bertconv writes, and transformers 5 loading the
safetensors converted from them.
"""

from __future__ import annotations

import json
import shutil

import h5py
import numpy as np
import pytest

from bertconv import formats
from bertconv.checks.copies import differing_copies
from bertconv.checks.diff import diff
from bertconv.conversion import convert
from bertconv.errors import BadInput
from bertconv.formats.hf.tf_tables import LAYOUTS as TF_LAYOUTS
from conftest import FIXTURES, run_in_process
from test_hf_tf_flax import LOGITS_ATOL
from test_hf_tf_flax_families import FLAX, TF, check_transformers_4_loads, task_heads, written_and_run

PT = FIXTURES / "family_hf"
FAMILIES = ("xlm-roberta", "camembert", "distilbert")


@pytest.mark.parametrize("directory", [d for family in FAMILIES for d in sorted((TF / family).glob("*"))
                                       + sorted((FLAX / family).glob("*"))],
                         ids=lambda p: f"{p.parent.parent.name[11:]}-{p.parent.name}-{p.name}")
def test_the_model_type_is_the_configs_and_kept_on_every_output(tmp_path, directory):
    """A file spelled as RoBERTa's is the config's family; each output keeps it."""
    tree = formats.read(directory)
    assert tree.config.model_type == directory.parent.name
    targets = ["hf", "hf-tf"] + ([] if tree.config.model_type == "camembert" else ["hf-flax"])
    for target in targets:
        convert(tree, tmp_path / target, target)
        assert json.loads((tmp_path / target / "config.json").read_text())["model_type"] == tree.config.model_type
        assert formats.read(tmp_path / target).config.model_type == tree.config.model_type


def test_distilberts_vocab_projector_holds_the_embeddings_checked_by_value(tmp_path):
    """TF DistilBERT's `vocab_projector` holds the embeddings layer: its four copies are read, the
    base model's are ignored copies; one changed, verify names both and fails."""
    layout = TF_LAYOUTS["distilbert"]
    tree = formats.read(TF / "distilbert" / "masked_lm")
    assert layout.holder == "vocab_projector" and len(layout.embedding_rows) == 4
    assert all(tree[row.canonical].source == f"vocab_projector/{row.name}" for row in layout.embedding_rows)
    held = sorted((i.name, i.copy_of) for i in tree.ignored if i.copy_of)
    assert held == sorted((row.name, row.canonical) for row in layout.embedding_rows)
    assert differing_copies(tree) == [] and "embeddings.token_type" not in tree and "pooler.kernel" not in tree
    shutil.copytree(TF / "distilbert" / "masked_lm", tmp_path / "tampered")
    with h5py.File(tmp_path / "tampered" / "tf_model.h5", "r+") as file:
        file["distilbert/tf_distil_bert_for_masked_lm/distilbert/embeddings/position_embeddings/embeddings:0"][0] = 0
    result = run_in_process("verify", tmp_path / "tampered", "--json")
    assert result.exit_code == 1 and "distilbert/embeddings/position_embeddings/embeddings:0 differs" in result.stdout


@pytest.mark.parametrize("directory", [TF / "distilbert" / "classifier", FLAX / "distilbert" / "classifier",
                                       TF / "xlm-roberta" / "classifier"], ids=["tf-distilbert", "flax-distilbert",
                                                                                "tf-xlmr"])
def test_task_heads_are_listed_as_ignored(directory):
    tree = formats.read(directory)
    names = {i.name.split("/")[0].split(":")[0] for i in task_heads(tree)}
    assert names == ({"pre_classifier", "classifier"} if tree.config.model_type == "distilbert" else {"classifier"})
    assert all("fine-tuning head" in i.reason for i in task_heads(tree))


def test_camembert_to_hf_flax_is_refused_naming_why(tmp_path):
    result = run_in_process("convert", TF / "camembert" / "masked_lm", tmp_path / "out", "--to", "hf-flax")
    assert result.exit_code == 2 and "transformers 4.57 has no Flax CamemBERT" in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


def test_a_flax_distilbert_with_sinusoidal_positions_is_exit_2_naming_them(tmp_path):
    """It stores no position table (Flax computes the sinusoids): refused, not read as missing one."""
    for stored in (FIXTURES / "unread_hf_tf_flax" / "distilbert_sinusoidal_flax").iterdir():
        shutil.copy(stored, tmp_path / stored.name.removeprefix("distilbert_"))
    result = run_in_process("convert", tmp_path, tmp_path / "out", "--to", "hf")
    assert result.exit_code == 2 and "sinusoidal_pos_embds" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_camembert_config_on_an_xlmr_file_is_read_as_camembert_and_no_other():
    """The three RoBERTa-spelled families are told apart by config.json alone."""
    tree = formats.read(TF / "xlm-roberta" / "masked_lm" / "tf_model.h5",
                        config_path=TF / "camembert" / "masked_lm" / "config.json")
    assert tree.config.model_type == "camembert"


ROUND_TRIP_SOURCES = [TF / "xlm-roberta" / "sharded", FLAX / "xlm-roberta" / "bf16", TF / "camembert" / "sharded",
                      TF / "distilbert" / "sharded", FLAX / "distilbert" / "fp16", FLAX / "distilbert" / "model",
                      PT / "xlm_roberta" / "masked_lm", PT / "camembert" / "masked_lm",
                      PT / "distilbert" / "masked_lm", PT / "distilbert" / "sinusoidal"]


@pytest.mark.parametrize("source", ROUND_TRIP_SOURCES, ids=lambda p: f"{p.parent.parent.name}-{p.parent.name}-{p.name}")
@pytest.mark.parametrize("target", ["hf-tf", "hf-flax", "hf"])
def test_conversion_round_trips(tmp_path, source, target):
    """SRC -> target reads back with the same values (bfloat16 widened for TF) and config."""
    tree = formats.read(source)
    if target == "hf-flax" and tree.config.model_type == "camembert":
        with pytest.raises(BadInput, match="no Flax CamemBERT"):
            convert(tree, tmp_path / "out", target)
        assert not (tmp_path / "out").exists()
        return
    convert(tree, tmp_path / "out", target)
    written = formats.read(tmp_path / "out")
    report = diff(tree, written)
    widened = target == "hf-tf" and any(p.tensor.dtype.name == "bfloat16" for p in tree)
    assert report["ok"] and (report["identical"] or widened), report["differences"]
    for field in ("model_type", "vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size", "hidden_act",
                  "layer_norm_eps", "position_offset", "type_vocab_size"):
        assert getattr(written.config, field) == getattr(tree.config, field), field


# --- transformers 5 loading the safetensors converted from transformers 4.57's files -----------

TO_SAFETENSORS = [(TF / family / kind) for family in FAMILIES for kind in ("masked_lm", "model", "sharded")] + [
    FLAX / family / kind for family in ("xlm-roberta", "distilbert") for kind in ("masked_lm", "model", "sharded")] + [
    FLAX / "xlm-roberta" / "bf16", FLAX / "distilbert" / "fp16"]


@pytest.mark.parametrize("directory", TO_SAFETENSORS, ids=lambda p: "-".join((p.parent.parent.name[11:], *p.parts[-2:])))
def test_transformers_5_loads_the_safetensors_with_no_missing_keys_and_the_same_logits(tmp_path, directory):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    convert(formats.read(directory), tmp_path / "hf", "hf")
    architecture = json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"][0]
    model, info = getattr(transformers, architecture).from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    model = model.float().eval()
    expected = np.load(directory / "logits.npz")
    names = ("input_ids", "attention_mask") + (() if directory.parent.name == "distilbert" else ("token_type_ids",))
    with torch.no_grad():
        out = model(**{k: torch.from_numpy(expected[k].astype(np.int64)) for k in names})
    if architecture.endswith("ForMaskedLM"):
        assert np.abs(out.logits.numpy() - expected["mlm_logits"]).max() <= LOGITS_ATOL
    else:
        assert np.abs(out.last_hidden_state.numpy() - expected["sequence_output"]).max() <= LOGITS_ATOL


# --- transformers 4.57 loading what bertconv writes ------------------------------------------

#: (source, target, class transformers should load): both directions, half precision, shards.
WRITTEN = [
    (FLAX / "xlm-roberta" / "masked_lm", "hf-tf", "TFXLMRobertaForMaskedLM"),
    (FLAX / "xlm-roberta" / "model", "hf-tf", "TFXLMRobertaModel"),
    (FLAX / "xlm-roberta" / "bf16", "hf-tf", "TFXLMRobertaForMaskedLM"),
    (TF / "xlm-roberta" / "sharded", "hf-flax", "FlaxXLMRobertaForMaskedLM"),
    (TF / "xlm-roberta" / "model", "hf-flax", "FlaxXLMRobertaModel"),
    (TF / "camembert" / "sharded", "hf-tf", "TFCamembertForMaskedLM"),
    (FLAX / "distilbert" / "masked_lm", "hf-tf", "TFDistilBertForMaskedLM"),
    (FLAX / "distilbert" / "model", "hf-tf", "TFDistilBertModel"),
    (FLAX / "distilbert" / "fp16", "hf-tf", "TFDistilBertForMaskedLM"),
    (FLAX / "distilbert" / "fp16", "hf-flax", "FlaxDistilBertForMaskedLM"),
    (TF / "distilbert" / "sharded", "hf-flax", "FlaxDistilBertForMaskedLM"),
    (TF / "distilbert" / "masked_lm", "hf-flax", "FlaxDistilBertForMaskedLM"),
]
#: transformers 5's PyTorch fixtures written to TF and Flax (logits from bertconv's runtime).
FROM_PYTORCH = [(PT / "xlm_roberta" / "masked_lm", "hf-flax"), (PT / "xlm_roberta" / "masked_lm", "hf-tf"),
                (PT / "camembert" / "masked_lm", "hf-tf"), (PT / "distilbert" / "masked_lm", "hf-tf"),
                (PT / "distilbert" / "masked_lm", "hf-flax"), (PT / "distilbert" / "sinusoidal", "hf-flax"),
                (PT / "distilbert" / "sinusoidal", "hf-tf")]


@pytest.mark.oracle
def test_transformers_4_loads_what_bertconv_writes_with_the_same_logits(tmp_path):
    check_transformers_4_loads(written_and_run(tmp_path, WRITTEN, FROM_PYTORCH), WRITTEN, FROM_PYTORCH)
