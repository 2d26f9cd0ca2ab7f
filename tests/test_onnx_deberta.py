"""`convert --to onnx` of DeBERTa-v2/v3 (issue 29; formats/onnx/disentangled.py): the export run by
onnxruntime 1.31 against bertconv's NumPy runtime and against transformers 5's own
`DebertaV2ForMaskedLM` (fixtures made by it: fixtures/make_deberta_fixtures.py), at lengths past
the log buckets and past `max_relative_positions`; the rows each query-key pair reads, exact for
any sequence length; float16; the configs it refuses."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bertconv import formats
from bertconv.conversion import WriteOptions, convert
from bertconv.errors import BadInput
from bertconv.runtime.disentangled import relative_index
from bertconv.runtime.numpy_bert import NumpyBert
from conftest import FIXTURES, needs

onnx = needs("onnx")
ort = needs("onnxruntime")

from bertconv.formats.onnx import check as onnx_check, disentangled as onnx_disentangled, graph as onnx_graph  # noqa: E402 (needs the onnx package)

DEBERTA = FIXTURES / "deberta"
#: v3: c2p and p2c over 8 log buckets (distances past 4 bucketed, up to max_relative_positions 64),
#: keys shared with the content, relative embeddings LayerNorm'd, no absolute positions, no token
#: types; lm_predictions and the discriminator: the other head layout. v2: its own position
#: projections, no buckets (distances clamped at max_relative_positions 12), absolute positions,
#: two token types, tanh GELU.
V3, V2 = "v3/masked_lm", "v2/masked_lm"
EXPORTED = [V3, "v3/lm_predictions", "v3/discriminator", V2]
#: 40 tokens: distances up to 39, past the v3 fixture's buckets and the v2 fixture's clamp.
LENGTH = 40
#: float32, against the NumPy runtime: the check's budget (measured at most 1.4e-6 here).
ATOL = onnx_check.FLOAT32_ATOL
#: against transformers 5 (torch): the same sums in other orders (measured at most 1.9e-6 here).
ORACLE_ATOL = 1e-4


def export(source: Path, tmp_path: Path, dtype: str | None = None) -> Path:
    out = tmp_path / "out"
    result = convert(formats.read(source), out, "onnx", options=WriteOptions(dtype=dtype))
    assert any(note.startswith("checked: onnxruntime") for note in result.notes), result.notes
    return out


def batch(config, shape: tuple[int, int], seed: int = 0) -> dict[str, np.ndarray]:
    """Random ids and token types, int64 [B, S]; every row but the first padded from the middle."""
    rng = np.random.default_rng(seed)
    b, s = shape
    mask = np.ones((b, s), dtype=np.int64)
    mask[1:, s // 2:] = 0
    return {"input_ids": rng.integers(1, config.vocab_size, (b, s)),
            "token_type_ids": rng.integers(0, max(config.type_vocab_size, 1), (b, s)), "attention_mask": mask}


def run(out: Path, feed: dict[str, np.ndarray]) -> np.ndarray:
    runner = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    names = {value.name for value in runner.get_inputs()}
    return runner.run(["logits"], {k: v for k, v in feed.items() if k in names})[0]


def numpy_logits(tree, feed: dict[str, np.ndarray]) -> np.ndarray:
    types = feed["token_type_ids"] if tree.config.type_vocab_size else None
    return NumpyBert(tree)(feed["input_ids"], types, feed["attention_mask"]).mlm_logits


def transformers_logits(source: Path, feed: dict[str, np.ndarray], **config) -> np.ndarray:
    """transformers 5's DebertaV2ForMaskedLM on `feed`, loaded with every parameter."""
    torch = needs("torch")
    transformers = needs("transformers")
    loaded = transformers.DebertaV2Config.from_pretrained(source, **config)
    model, info = transformers.DebertaV2ForMaskedLM.from_pretrained(source, config=loaded, dtype=torch.float32,
                                                                    output_loading_info=True)
    assert not info["missing_keys"], info["missing_keys"]
    with torch.no_grad():
        return model.eval()(**{k: torch.tensor(v) for k, v in feed.items()}).logits.numpy()


def with_config(tmp_path: Path, fixture: str, **changes) -> Path:
    directory = tmp_path / "changed"
    shutil.copytree(DEBERTA / fixture, directory)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, **changes}))
    return directory


def intact(fixture: str) -> dict:
    """The config that loads the lm_predictions layout with its head: legacy false."""
    return {} if fixture.endswith("masked_lm") else {"legacy": False}


# --- the logits, against the runtime and transformers ---------------------------------------------


@pytest.mark.parametrize("fixture", EXPORTED)
def test_deberta_exports_a_valid_graph_that_computes_the_numpy_runtimes_logits(fixture, tmp_path):
    tree = formats.read(DEBERTA / fixture)
    out = export(DEBERTA / fixture, tmp_path)
    model = onnx.load(out / "model.onnx")
    onnx.checker.check_model(model, full_check=True)
    inputs = {value.name: [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]
              for value in model.graph.input}
    expected_inputs = {"input_ids", "attention_mask"} | ({"token_type_ids"} if tree.config.type_vocab_size else set())
    assert set(inputs) == expected_inputs and all(dims == ["batch", "sequence"] for dims in inputs.values())
    for shape in ((4, 11), (2, LENGTH), (1, tree.config.max_position_embeddings), (3, 1)):
        feed = batch(tree.config, shape, seed=shape[1])
        got = run(out, feed)
        assert got.dtype == np.float32 and got.shape == (*shape, tree.config.vocab_size)
        np.testing.assert_allclose(got, numpy_logits(tree, feed), rtol=0, atol=ATOL)


@pytest.mark.parametrize("fixture", EXPORTED)
def test_deberta_exports_compute_transformers_5s_logits(fixture, tmp_path):
    """At the real tokens: transformers zeroes the padding's embeddings and masks its queries too,
    so its outputs there, which are never read, differ from the runtimes' (tests/test_deberta.py)."""
    tree = formats.read(DEBERTA / fixture)
    out = export(DEBERTA / fixture, tmp_path)
    feed = batch(tree.config, (2, LENGTH), seed=3)
    expected = transformers_logits(DEBERTA / fixture, feed, **intact(fixture))
    real = feed["attention_mask"].astype(bool)
    assert np.abs(run(out, feed) - expected)[real].max() <= ORACLE_ATOL


@pytest.mark.parametrize("fixture, changes", [(V3, {"pos_att_type": "c2p"}), (V3, {"pos_att_type": "p2c"}),
                                             (V3, {"position_buckets": -1, "max_relative_positions": 8}),
                                             (V3, {"max_relative_positions": 20})],
                         ids=lambda value: value if isinstance(value, str) else
                         "-".join(f"{k}={v}" for k, v in value.items()))
def test_other_configs_compute_transformers_5s_logits(fixture, changes, tmp_path):
    directory = with_config(tmp_path, fixture, **changes)
    tree = formats.read(directory)
    out = export(directory, tmp_path)
    feed = batch(tree.config, (2, LENGTH), seed=5)
    got = run(out, feed)
    np.testing.assert_allclose(got, numpy_logits(tree, feed), rtol=0, atol=ATOL)
    real = feed["attention_mask"].astype(bool)
    assert np.abs(got - transformers_logits(directory, feed))[real].max() <= ORACLE_ATOL


def test_terms_named_without_relative_attention_still_scale_the_scores(tmp_path):
    """transformers counts pos_att_type's terms in the scaling, 1 / sqrt(3 D), with relative attention
    off; it has no relative embeddings then (their LayerNorm it keeps, and reads nowhere)."""
    directory = with_config(tmp_path, V3, relative_attention=False)
    tree = formats.read(directory)
    tree = replace(tree, params={name: param for name, param in tree.params.items() if name != "relative_embeddings"})
    assert tree.config.pos_att_type == ("c2p", "p2c") and not tree.config.relative_attention
    out = tmp_path / "out"
    convert(tree, out, "onnx")
    feed = batch(tree.config, (2, LENGTH), seed=5)
    got = run(out, feed)
    np.testing.assert_allclose(got, numpy_logits(tree, feed), rtol=0, atol=ATOL)
    real = feed["attention_mask"].astype(bool)
    assert np.abs(got - transformers_logits(directory, feed))[real].max() <= ORACLE_ATOL
    assert np.abs(got - transformers_logits(directory, feed, pos_att_type=None)).max() > 1e-2


def test_the_relative_terms_are_computed_not_skipped(tmp_path):
    tree = formats.read(DEBERTA / V3)
    out = export(DEBERTA / V3, tmp_path)
    feed = batch(tree.config, (2, LENGTH))
    without = replace(tree.config, relative_attention=False)
    tree.config = without
    assert np.abs(run(out, feed) - numpy_logits(tree, feed)).max() > 1e-2


# --- the rows each pair reads ------------------------------------------------------------------------


def index_graph(config):
    """The export's row-index nodes alone, as a session: input_ids [B, S] -> int64 [S, S]."""
    builder = onnx_graph._Builder(config, None, onnx_graph.Precision.FLOAT32)
    ids = builder._input("input_ids")
    index = onnx_disentangled.row_index(builder, builder.op("Shape", ids, start=1, end=2))
    builder.graph.outputs.append(onnx.helper.make_tensor_value_info(index, onnx.TensorProto.INT64, ["S", "S"]))
    model = onnx.helper.make_model(builder.graph.graph_proto("index"),
                                   opset_imports=[onnx.helper.make_opsetid("", onnx_graph.OPSET)])
    model.ir_version = onnx_graph.IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return lambda length: session.run([index], {"input_ids": np.zeros((1, length), dtype=np.int64)})[0]


@pytest.mark.parametrize("settings", [dict(position_buckets=256, max_relative_positions=512),  # deberta-v3-base
                                      dict(position_buckets=8, max_relative_positions=64),  # the v3 fixture
                                      dict(position_buckets=8, max_relative_positions=6),
                                      dict(position_buckets=16, max_relative_positions=100),
                                      dict(position_buckets=0, max_relative_positions=12)],  # the v2 fixture
                         ids=lambda s: f"{s['position_buckets']}-{s['max_relative_positions']}")
def test_the_row_index_is_the_runtimes_for_any_length(settings):
    """Sequences far past the buckets, max_relative_positions and the table's reach (2 x 512 + 100)."""
    config = replace(formats.read(DEBERTA / V3).config, **settings)
    index = index_graph(config)
    for length in (1, 2, 7, 13, 300, 1124):
        np.testing.assert_array_equal(index(length), relative_index(config, length))


def test_log_buckets_that_never_settle_are_refused_by_name(tmp_path):
    """max_relative_positions 4 with 8 buckets: the logarithms' ratio turns negative, the rows
    keep changing with the distance, and no table of distances holds them."""
    directory = with_config(tmp_path, V3, max_relative_positions=4)
    assert not onnx_disentangled.saturates(formats.read(directory).config)
    with pytest.raises(BadInput, match="does not compute a model with max_relative_positions 4"):
        convert(formats.read(directory), tmp_path / "out", "onnx")
    assert not (tmp_path / "out").exists()


# --- float16 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", [V3, V2])
def test_a_float16_export_keeps_layer_norm_softmax_and_the_relative_terms_in_float32(fixture, tmp_path):
    tree = formats.read(DEBERTA / fixture)
    out = export(DEBERTA / fixture, tmp_path, dtype="float16")
    model = onnx.load(out / "model.onnx")
    dtypes = {t.name: onnx.helper.tensor_dtype_to_np_dtype(t.data_type) for t in model.graph.initializer}
    assert {name for name, dtype in dtypes.items() if dtype == np.float32} == \
        {name for name in dtypes if name.endswith((".gamma", ".beta"))}
    types = {value.name: value.type.tensor_type.elem_type
             for value in onnx.shape_inference.infer_shapes(model).graph.value_info}
    guarded = [node for node in model.graph.node
               if node.op_type in ("LayerNormalization", "Softmax", "GatherElements")]
    terms = len(tree.config.pos_att_type)  # a softmax, 2 LNs and the terms a layer; 2 LNs, and the relative one
    assert len(guarded) == (3 + terms) * tree.config.num_hidden_layers + 2 + tree.config.relative_embedding_norm
    for node in guarded:
        assert {types[node.input[0]], types[node.output[0]]} == {onnx.TensorProto.FLOAT}, node.name
    feed = batch(tree.config, (2, LENGTH), seed=5)
    expected = numpy_logits(tree, feed)
    got = run(out, feed)
    assert got.dtype == np.float32 and np.isfinite(got).all()
    difference = float(np.abs(got - expected).max())
    assert 0 < difference <= onnx_check.budget(onnx_graph.Precision.FLOAT16, float(np.abs(expected).max()))
