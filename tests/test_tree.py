"""The canonical tree and the closed form, tested as data."""

from __future__ import annotations

import math

import pytest

from bertconv.config import BertConfig, Heads, expected_components, expected_parameters
from bertconv.formats.hf import tables as hf
from bertconv.tree import ROLES, canonical_names, component_of, role_of

BASE = BertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                  intermediate_size=3072, max_position_embeddings=512, type_vocab_size=2)
TINY = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=37, max_position_embeddings=40, type_vocab_size=2)


def test_bert_base_closed_form():
    assert expected_parameters(BASE, Heads()) == 110_106_428


def test_bert4keras_figures_from_formats_md():
    config = BertConfig(vocab_size=21128, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                        intermediate_size=3072, max_position_embeddings=512, type_vocab_size=2)
    c = expected_components(config, Heads())
    assert c["embeddings.word"] == 16_226_304
    assert c["embeddings.token_type"] == 1_536
    assert c["embeddings.position"] == 393_216
    assert c["embeddings.norm"] == 1_536
    for i in range(12):
        assert c[f"layers.{i}.attention"] == 2_362_368
        assert c[f"layers.{i}.ffn"] == 4_722_432
        assert c[f"layers.{i}.attention_norm"] == c[f"layers.{i}.ffn_norm"] == 1_536
    assert (c["mlm.transform"], c["mlm.norm"], c["mlm.output_bias"]) == (590_592, 1_536, 21_128)


def test_conditional_layer_norm_count():
    config = BertConfig(vocab_size=21128, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                        intermediate_size=3072, max_position_embeddings=512, type_vocab_size=2,
                        conditional_size=128)
    assert expected_components(config, Heads())["embeddings.norm"] == 198_144


@pytest.mark.parametrize("heads", [Heads(), Heads(False, False, False), Heads(True, True, False),
                                   Heads(False, True, False, untied_decoder=True), Heads(True, False, True),
                                   Heads(True, True, True, untied_decoder=True, untied_decoder_bias=True)])
def test_role_shapes_sum_to_the_closed_form(heads):
    """The role table and the closed form are written independently; they must agree."""
    per_component: dict[str, int] = {}
    for name in canonical_names(TINY, heads):
        shape = role_of(name).expected_shape(TINY)
        per_component[component_of(name)] = per_component.get(component_of(name), 0) + math.prod(shape)
    assert per_component == expected_components(TINY, heads)


def test_role_templates_are_unique():
    templates = [r.template for r in ROLES]
    assert len(templates) == len(set(templates))


def test_hf_table_is_a_bijection_covering_the_model():
    everything = canonical_names(TINY, Heads(untied_decoder=True, untied_decoder_bias=True))
    spellings = {}
    for name in everything:
        spelled = hf.TABLE.spelling(name)
        assert spelled is not None, f"HF table cannot write {name}"
        spellings[name] = spelled[0]
        assert hf.TABLE.match(spelled[0]).canonical == name
    assert len(set(spellings.values())) == len(spellings)


def test_table_rejects_lookalike_layer_numbers():
    assert hf.TABLE.match("bert.encoder.layer.01.output.dense.bias") is None
    assert hf.TABLE.match("bert.encoder.layer.10.output.dense.bias").canonical == "layers.10.ffn.output.bias"


def test_a_table_answers_a_name_asked_again_as_the_first_time(monkeypatch):
    """`Table.match` keeps its answers (a reader asks each name several times), a bounded number."""
    from bertconv.formats import table as tables

    monkeypatch.setattr(tables, "MATCHES_KEPT", 3)
    table = tables.Table("test", (tables.Row("layers.{i}.ffn.output.bias", "layer.{i}.out.bias"),))
    names = ["layer.1.out.bias", "layer.01.out.bias", "other", "layer.12.out.bias"]
    first = [table.match(name) for name in names]
    assert [m and m.canonical for m in first] == ["layers.1.ffn.output.bias", None, None, "layers.12.ffn.output.bias"]
    assert [table.match(name) for name in names] == first
    assert len(table._matches) <= 3


def test_every_table_of_every_format_names_real_roles_once():
    """Tables index (and check) their rows on first use; here every table every format module
    declares is indexed: each row names a canonical role, no name or role appears twice."""
    import gc
    import importlib

    from bertconv.formats.registry import FORMATS
    from bertconv.formats.table import Table
    from bertconv.lazy import module_name

    for entry in FORMATS:
        importlib.import_module(module_name(entry.module))
    tables = [obj for obj in gc.get_objects() if isinstance(obj, Table)]
    assert len(tables) > 20
    for table in tables:
        by_name, by_canonical = table._indexed()
        assert len(by_canonical) == len(table.rows), table.format_name
