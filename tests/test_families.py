"""The computation contract, by construction: each family is one declaration (bertconv/families/).

- Outside families/ (and the format tables, which spell families), no code compares a value with
  a family's name: generic code reads what the declaration states.
- Every config key a family declares its computation reads, mutated one at a time in each family's
  Hugging Face fixture: `diff` sees it, each conversion keeps it or refuses (exit 2, nothing
  written), and the runtime's logits change wherever the mutated model still runs.
- A key no family declares and none knows to be inert, or a tensor no table row or skip names,
  stops every command that computes or converts (exit 2, naming it) unless `--accept-loss NAME`;
  `inspect` and `audit` note it.
"""

from __future__ import annotations

import ast
import functools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from bertconv import families, formats
from bertconv.conversion import written_as_bert
from bertconv.errors import BadInput, BertconvError
from bertconv.config.dialects import computed_keys
from bertconv.tree import HEAD_NAMES
from conftest import FIXTURES, ROOT, needs, run_in_process
from bertconv.formats.hf.checkpoint import REFUSED_FAMILIES

PACKAGE = ROOT / "bertconv"
#: Each family's Hugging Face masked-LM fixture.
FAMILY_FIXTURES = {
    "bert": FIXTURES / "hf" / "masked_lm",
    "albert": FIXTURES / "family_hf" / "albert" / "masked_lm",
    "electra": FIXTURES / "family_hf" / "electra" / "generator",
    "roberta": FIXTURES / "family_hf" / "roberta" / "masked_lm",
    "xlm-roberta": FIXTURES / "family_hf" / "xlm_roberta" / "masked_lm",
    "camembert": FIXTURES / "family_hf" / "camembert" / "masked_lm",
    "distilbert": FIXTURES / "family_hf" / "distilbert" / "masked_lm",
    "megatron-bert": FIXTURES / "prenorm" / "megatron" / "masked_lm",
    "esm": FIXTURES / "prenorm" / "esm" / "masked_lm",
    "modernbert": FIXTURES / "modernbert" / "masked_lm",
    "roformer": FIXTURES / "roformer" / "hf" / "masked_lm",
    "nezha": FIXTURES / "nezha" / "hf" / "masked_lm",
    "deberta-v2": FIXTURES / "deberta" / "v3" / "masked_lm",
    # No transformers class: its bert4keras fixture, whose config is Google's bert_config.json.
    "roformer_v2": FIXTURES / "roformer_v2" / "bert4keras" / "mlm",
}


def _config_file(fixture: Path) -> Path:
    """The fixture's config: transformers' config.json, or bert4keras' bert_config.json."""
    return fixture / "config.json" if (fixture / "config.json").is_file() else fixture / "bert_config.json"
TARGETS = sorted(formats.TARGETS)


def _family_names() -> set[str]:
    return {*families.FAMILIES, *(v.name for f in families.FAMILIES.values() for v in f.variants)}


def _compares_with_a_family_name(tree: ast.AST) -> list[int]:
    """Lines where a comparison has a family's name (or a tuple of them) on one side."""
    names = _family_names()

    def is_family_literal(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(is_family_literal(e) for e in node.elts)
        return False

    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Compare)
            and any(is_family_literal(side) for side in (node.left, *node.comparators))]


def test_no_code_outside_families_branches_on_a_family_name():
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.is_relative_to(PACKAGE / "families"):
            continue
        lines = _compares_with_a_family_name(ast.parse(path.read_text()))
        if lines:
            found[str(path.relative_to(ROOT))] = lines
    assert not found, f"compare with a family's name instead of reading its declaration: {found}"


def test_the_scan_finds_a_branch_on_a_family_name():
    assert _compares_with_a_family_name(ast.parse('if config.model_type == "albert":\n    pass')) == [1]
    assert _compares_with_a_family_name(ast.parse('x = family in ("bert", "roberta")')) == [1]


def test_every_family_declares_what_generic_code_reads():
    for model_type, family in families.FAMILIES.items():
        assert family.model_type == model_type and family.display and family.heads
        assert set(family.heads) <= set(HEAD_NAMES)
        assert family.position_embedding_types
        assert family.hf_marks or model_type in REFUSED_FAMILIES, (
            f"{model_type}: its Hugging Face files are told apart by marks (or --to hf refuses it, naming why)")


# --- mutating each declared key ---------------------------------------------------------------


def _mutations(config: dict, model_type: str) -> list[tuple[str, object]]:
    """(key, another value) for every key the family's computation reads in transformers' dialect."""
    family = families.named(model_type)
    # A base key the family declares inert is none of its computation (ESM's hidden_act).
    keys = [key for key in computed_keys(family, families.HF) if key not in family.inert.get(families.HF, ())]
    own = {bert: name for name, bert in family.key_names.get(families.HF, {}).items()}  # DistilBERT's dim ...
    config = {**config, **{bert: config[name] for bert, name in own.items() if name in config}}
    heads = config["num_attention_heads"]
    other = {
        "num_attention_heads": next(h for h in (2, 1, 4, 8) if h != heads and config["hidden_size"] % h == 0),
        "hidden_act": "relu" if config.get("hidden_act") != "relu" else "gelu",
        "bertconv_hidden_act": "relu" if config.get("hidden_act") != "relu" else "gelu",
        "layer_norm_eps": 0.25,
        "tie_word_embeddings": not config.get("tie_word_embeddings", True),
        "model_type": next(t for t in families.FAMILIES if t != model_type),
        "position_embedding_type": "relative_key",
        "is_decoder": not config.get("is_decoder", False),
        "add_cross_attention": True,
        "pad_token_id": config.get("pad_token_id", 1) + 3,
        "ln_type": "preln",
        "rope_theta": 500.0,
        "mask_token_id": 5,  # a token of `_logits`' batch: token dropout then rescales it
        "token_dropout": not config.get("token_dropout", False),
        "emb_layer_norm_before": not config.get("emb_layer_norm_before", False),
        # ModernBERT's: a window that hides keys of `_logits`' 6-token batch, layer kinds and
        # bases (against the ones stated the other way: refused), a rotary scaling, its biases.
        "local_attention": 2,
        "layer_types": ["sliding_attention"] * config["num_hidden_layers"],
        "global_attn_every_n_layers": config.get("global_attn_every_n_layers", 3) + 1,
        "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 500.0},
                            "sliding_attention": {"rope_type": "default", "rope_theta": 10.0}},
        "global_rope_theta": 500.0,
        "local_rope_theta": 10.0,
        "rope_scaling": {"rope_type": "linear", "factor": 2.0},
        "classifier_activation": "relu",
        **{key: not config.get(key, False) for key in ("norm_bias", "attention_bias", "mlp_bias", "classifier_bias")},
        "decoder_bias": not config.get("decoder_bias", True),
        "rotary_value": not config.get("rotary_value", False),
        # DeBERTa's disentangled attention: each key flipped or moved to a value that computes otherwise
        # (max_relative_positions 6 re-buckets the distances past 4 that a 6-token batch has).
        "relative_attention": not config.get("relative_attention", False),
        "max_relative_positions": 6,
        "pos_att_type": "c2p",
        "norm_rel_ebd": "none" if config.get("norm_rel_ebd") == "layer_norm" else "layer_norm",
        "share_att_key": not config.get("share_att_key", False),
        "position_biased_input": not config.get("position_biased_input", True),
    }
    other.update({name: other[bert] for bert, name in own.items() if bert in other})
    config.update({name: config[bert] for bert, name in own.items() if bert in config})
    mutated = []
    for key in keys:
        if key in other:
            mutated.append((key, other[key]))
        elif isinstance(config.get(key), int) or key in ("conditional_size", "embedding_size"):
            mutated.append((key, config.get(key, config["hidden_size"]) + 1))
        else:
            raise AssertionError(f"{model_type}: no mutation for declared key {key!r}: add one here")
    return mutated


def _cases():
    for model_type, fixture in FAMILY_FIXTURES.items():
        config = json.loads(_config_file(fixture).read_text())
        for key, value in _mutations(config, model_type):
            yield pytest.param(model_type, key, value, id=f"{model_type}-{key}")


def _logits(path: Path):
    from bertconv.runtime.numerics import Numerics
    from bertconv.runtime.numpy_bert import NumpyBert

    tree = formats.read(path)
    model = NumpyBert(tree, Numerics.for_tree(tree))
    ids = np.arange(3, 3 + 2 * 6).reshape(2, 6) % tree.config.vocab_size
    return model(ids).mlm_logits


@functools.cache
def _fixture_logits(model_type: str):
    """`_logits` of a family's unmutated fixture: computed once for all its keys' mutations."""
    logits = _logits(FAMILY_FIXTURES[model_type])
    logits.setflags(write=False)
    return logits


@pytest.mark.parametrize("model_type, key, value", list(_cases()))
def test_a_declared_key_mutated_is_seen_kept_or_refused_and_computed(model_type, key, value, tmp_path):
    fixture = FAMILY_FIXTURES[model_type]
    mutated = tmp_path / "mutated"
    shutil.copytree(fixture, mutated)
    config = json.loads(_config_file(mutated).read_text())
    _config_file(mutated).write_text(json.dumps({**config, key: value}))

    seen = run_in_process("diff", fixture, mutated, "--json")
    if key in families.named(model_type).uncomputed:  # its libraries never compute with it: the same model
        assert seen.exit_code == 0, seen.stdout
    else:
        assert seen.exit_code in (1, 2), f"diff did not see {key} = {value!r}: {seen.stdout}"
    if seen.exit_code == 1:
        assert json.loads(seen.stdout)["config_differences"], seen.stdout

    try:
        source = formats.read(mutated)
    except BadInput:
        return  # refused on reading: no command computes or converts it
    for target in TARGETS:
        out = tmp_path / f"out-{target}"
        result = run_in_process("convert", mutated, out, "--to", target)
        if result.exit_code == 2:
            assert not out.exists(), f"--to {target} refused {key} but left {out}"
            continue
        assert result.exit_code == 0, result.stderr
        if formats.TARGETS[target].check_written is not None:  # an export: run against the runtime, not read
            assert "checked: onnxruntime" in result.stderr or "not verified" in result.stderr, result.stderr
            continue
        written = formats.read(out).config
        expected = written_as_bert(source, target)[0].config  # a DistilBERT is written as its BERT there
        # A field the family's libraries never compute with may change (RoFormer-v2's max_position_embeddings).
        lost = [f for f in families.computation_fields(expected) if getattr(written, f) != getattr(expected, f)]
        assert not lost, f"--to {target} changed {lost} after {key} = {value!r}"

    try:
        changed = _logits(mutated)
    except BertconvError:
        return  # the runtime refuses the mutated model (its tensors disagree with the config)
    if key == "max_position_embeddings" and not source.config.position_table:
        # No position table: the bound only caps the input's length (transformers' ESM has none;
        # RoFormer's stored sinusoids are then not the config's, which every command refuses),
        # or sets DeBERTa-v3's log-bucket range, under which a 6-token batch's distances
        # (at most 5, 8 buckets) fall into the same rows at 64 and 65 (test_deberta.py tests the buckets).
        np.testing.assert_array_equal(changed, _fixture_logits(model_type))
        return
    assert not np.allclose(changed, _fixture_logits(model_type), atol=1e-6), f"{key} = {value!r} changed no logit"


# --- keys nobody declared -----------------------------------------------------------------------


@pytest.fixture
def unread(tmp_path) -> Path:
    """The BERT fixture with a key no family reads and none knows to be inert."""
    directory = tmp_path / "unread"
    shutil.copytree(FAMILY_FIXTURES["bert"], directory)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "rotary_base": 10000}))
    return directory


def _computing_commands(path: Path, tmp_path: Path) -> dict[str, list[str]]:
    return {
        "convert": ["convert", str(path), str(tmp_path / "out"), "--to", "hf"],
        "diff": ["diff", str(FAMILY_FIXTURES["bert"]), str(path)],
        "verify": ["verify", str(path)],
        "fill-mask": ["fill-mask", str(path), "a [MASK] b"],
    }


def test_an_unread_key_stops_every_command_that_computes_or_converts(unread, tmp_path):
    for name, args in _computing_commands(unread, tmp_path).items():
        result = run_in_process(*args)
        assert result.exit_code == 2, f"{name}: {result.stdout}{result.stderr}"
        assert "rotary_base = 10000" in result.stderr and "--accept-loss rotary_base" in result.stderr, name
    assert not (tmp_path / "out").exists()


def test_an_accepted_unread_key_goes_on_and_says_so(unread, tmp_path):
    converted = run_in_process("convert", unread, tmp_path / "out", "--to", "hf", "--accept-loss", "rotary_base")
    assert converted.exit_code == 0 and "accepted loss" in converted.stderr and "rotary_base" in converted.stderr
    assert "rotary_base" not in json.loads((tmp_path / "out" / "config.json").read_text())
    verified = run_in_process("verify", unread, "--accept-loss", "rotary_base", "--json")
    assert any("accepted loss" in note and "rotary_base" in note for note in json.loads(verified.stdout)["notes"])


def test_inspect_and_audit_note_an_unread_key(unread):
    for command in ("inspect", "audit"):
        result = run_in_process(command, unread, "--json")
        report = json.loads(result.stdout)
        assert result.exit_code == 0 and report["config"]["unread"] == {"rotary_base": 10000}
        assert any("rotary_base" in note and "--accept-loss" in note for note in report["notes"]), command


def test_diff_counts_an_unread_key_that_differs(unread, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(unread, other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "rotary_base": 500}))
    result = run_in_process("diff", unread, other, "--accept-loss", "rotary_base", "--json")
    report = json.loads(result.stdout)
    assert result.exit_code == 1 and [d["field"] for d in report["config_differences"]] == ["rotary_base"]


@pytest.mark.parametrize("model_type, key, value", [
    ("albert", "net_structure_type", 1),            # fixed at 0 in bertconv's ALBERT
    ("albert", "gap_size", 1),
    ("bert", "pruned_heads", {"0": [1]}),
])
def test_a_fixed_key_at_another_value_is_unread(model_type, key, value, tmp_path):
    directory = tmp_path / "fixed"
    shutil.copytree(FAMILY_FIXTURES[model_type], directory)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, key: value}))
    assert dict(formats.read(directory).config.unread) == {key: json.dumps(value)}
    assert run_in_process("verify", directory).exit_code == 2


def test_inert_keys_of_real_configs_are_not_unread():
    """The keys real checkpoints' configs carry (Google's Chinese BERT, transformers' saves) read."""
    for fixture in FAMILY_FIXTURES.values():
        assert formats.read(fixture).config.unread == ()


# --- tensors nobody's table names -----------------------------------------------------------


@pytest.fixture
def unnamed_tensor(tmp_path) -> Path:
    """The BERT fixture with one more tensor inside the encoder that no table row names (as a
    relative-position table was before bertconv knew it)."""
    numpy = needs("safetensors.numpy")
    directory = tmp_path / "unnamed"
    shutil.copytree(FAMILY_FIXTURES["bert"], directory)
    tensors = numpy.load_file(directory / "model.safetensors")
    tensors["bert.encoder.layer.0.attention.self.rotary.inv_freq"] = np.ones(4, np.float32)
    numpy.save_file(tensors, directory / "model.safetensors")
    return directory


def test_a_tensor_no_table_names_stops_every_command_that_computes_or_converts(unnamed_tensor, tmp_path):
    name = "bert.encoder.layer.0.attention.self.rotary.inv_freq"
    for command, args in _computing_commands(unnamed_tensor, tmp_path).items():
        result = run_in_process(*args)
        assert result.exit_code == 2 and name in result.stderr and f"--accept-loss {name}" in result.stderr, command
    accepted = run_in_process("convert", unnamed_tensor, tmp_path / "out", "--to", "hf", "--accept-loss", name)
    assert accepted.exit_code == 0 and "accepted loss" in accepted.stderr
    inspected = json.loads(run_in_process("inspect", unnamed_tensor, "--json").stdout)
    assert any(name in note and "--accept-loss" in note for note in inspected["notes"])


# No fixture holds an entry nobody names: tests/test_registry.py checks it on every fixture it reads.
