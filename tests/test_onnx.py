"""`convert --to onnx` (issue 29): the export of every family run by onnxruntime 1.31 against
bertconv's NumPy runtime and against the models' own libraries (transformers 5 for the Hugging
Face fixtures; transformers 4.57's and brightmart's TensorFlow logits stored beside the
relative-position and albert_zh fixtures); float16 and its overflow; the check that removes a
wrong export; `diff --outputs` against an export; the refusal to read one."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bertconv import formats
from bertconv.conversion import WriteOptions, convert
from bertconv.dtypes import FLOAT32
from bertconv.errors import BadInput, CheckFailed
from bertconv.runtime.numpy_bert import NumpyBert
from bertconv.tensor import ArrayTensor
from bertconv.tree import ParameterTree
from conftest import FIXTURES, needs, run_in_process

onnx = needs("onnx")
ort = needs("onnxruntime")

from bertconv.formats.onnx import check as onnx_check, export as onnx_export, graph as onnx_graph  # noqa: E402 (needs the onnx package)

#: Every fixture with an MLM head that the runtimes run, by family: BERT, ALBERT (shared layers,
#: factorized embeddings, groups), the ELECTRA generator, RoBERTa (position offset), relative
#: positions, causal models, brightmart's albert_zh, trained heads (tied and untied), TF and
#: bert4keras sources (google-tf and bert4keras numerics: tanh GELU, -10000 and -inf adders).
EXPORTED = ["hf/pretraining", "hf/pretraining_bin", "hf/masked_lm", "hf/legacy_bin", "hf/sharded", "hf/fp16", "hf/bf16",
            "family_hf/albert/masked_lm", "family_hf/albert/pretraining_bin", "family_hf/albert/pretraining_groups",
            "family_hf/electra/generator", "family_hf/roberta/masked_lm",
            *(f"relpos/{p.name}" for p in sorted((FIXTURES / "relpos").iterdir()) if p.is_dir()),
            "albert_zh/tf", *(f"trained/{p.name}" for p in sorted((FIXTURES / "trained").iterdir())),
            "family_google/fairseq/roberta", "family_google/tf/albert", "bert4keras/v50-mlm",
            # pre-LayerNorm (Megatron-BERT; ESM-2 with rotary positions and token dropout), their own formats too
            "prenorm/megatron/pretraining", "prenorm/megatron/masked_lm", "prenorm/esm/masked_lm",
            "fair_esm/released/esm2_t2_16_fixture.pt", "megatron_lm/v3"]
#: The Hugging Face fixtures transformers 5 computes as bertconv does (relative positions: 4.57 only).
TRANSFORMERS_5 = [f for f in EXPORTED if f.startswith(("hf/", "family_hf/", "prenorm/"))
                  or f in ("trained/hf", "trained/hf_untied")]
#: A third shape, beside the check's two: the axes are dynamic, not two shapes frozen.
OTHER_SHAPE = (4, 11)
#: float32 exports against the NumPy runtime: the check's budget (measured at most 3.6e-6 here).
ATOL = onnx_check.FLOAT32_ATOL
#: against transformers (torch): the same sums in other orders, as tests/test_family_hf.py allows.
ORACLE_ATOL = 1e-4


def export(fixture: str, tmp_path: Path, dtype: str | None = None) -> Path:
    out = tmp_path / "out"
    result = convert(formats.read(FIXTURES / fixture), out, "onnx", options=WriteOptions(dtype=dtype))
    assert any(note.startswith("checked: onnxruntime") for note in result.notes), result.notes
    return out


def session(out: Path):
    return ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])


def batch(config, shape: tuple[int, int], seed: int = 0) -> dict[str, np.ndarray]:
    """Random ids and token types with padding at the end of the second row, as int64 [B, S]."""
    rng = np.random.default_rng(seed)
    b, s = shape
    s = min(s, config.max_position_embeddings - config.position_offset)
    mask = np.ones((b, s), dtype=np.int64)
    mask[1, s // 2:] = 0
    return {"input_ids": rng.integers(0, config.vocab_size, (b, s)),
            "token_type_ids": rng.integers(0, max(config.type_vocab_size, 1), (b, s)), "attention_mask": mask}


def run(out: Path, feed: dict[str, np.ndarray]) -> np.ndarray:
    runner = session(out)
    names = {value.name for value in runner.get_inputs()}
    return runner.run(["logits"], {k: v for k, v in feed.items() if k in names})[0]


def check_interface(tree: ParameterTree, out: Path) -> None:
    """The export is a valid opset-17 graph, inline, with the model's inputs and logits on dynamic axes."""
    model = onnx.load(out / "model.onnx")
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version >= 17 and not (out / "model.onnx.data").exists()
    inputs = {value.name: [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]
              for value in model.graph.input}
    expected_inputs = {"input_ids", "attention_mask"} | ({"token_type_ids"} if tree.config.type_vocab_size else set())
    assert set(inputs) == expected_inputs and all(dims == ["batch", "sequence"] for dims in inputs.values())
    (output,) = model.graph.output
    assert output.name == "logits"
    assert [d.dim_param or d.dim_value for d in output.type.tensor_type.shape.dim] == \
        ["batch", "sequence", tree.config.vocab_size]


# --- every family, by its runtime and its library ------------------------------------------------


@pytest.mark.parametrize("fixture", EXPORTED)
def test_every_family_exports_a_valid_graph_that_computes_the_numpy_runtimes_logits(fixture, tmp_path):
    tree = formats.read(FIXTURES / fixture)
    out = export(fixture, tmp_path)
    check_interface(tree, out)
    feed = batch(tree.config, OTHER_SHAPE, seed=7)
    got = run(out, feed)
    expected = NumpyBert(tree)(feed["input_ids"], feed["token_type_ids"] if tree.config.type_vocab_size else None,
                               feed["attention_mask"]).mlm_logits
    assert got.dtype == np.float32 and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=ATOL)


def transformers_5_logits(fixture: str, feed: dict[str, np.ndarray]) -> np.ndarray:
    """transformers 5's MLM logits of `fixture`, loaded whole, on the inputs of `feed` its model takes."""
    torch = needs("torch")
    transformers = needs("transformers")
    model, info = transformers.AutoModelForMaskedLM.from_pretrained(FIXTURES / fixture, dtype=torch.float32,
                                                                    output_loading_info=True)
    assert not info["missing_keys"], info["missing_keys"]
    types = getattr(model.config, "type_vocab_size", 0)  # ESM and ModernBERT have none
    taken = {"input_ids", "attention_mask"} | ({"token_type_ids"} if types else set())
    with torch.no_grad():
        return model.eval()(**{k: torch.tensor(v) for k, v in feed.items() if k in taken}).logits.numpy()


@pytest.mark.parametrize("fixture", TRANSFORMERS_5)
def test_hf_exports_compute_transformers_5s_logits(fixture, tmp_path):
    tree = formats.read(FIXTURES / fixture)
    out = export(fixture, tmp_path)
    feed = batch(tree.config, OTHER_SHAPE, seed=3)
    if tree.config.position_offset:  # RoBERTa pads with its padding id
        feed["input_ids"][feed["attention_mask"] == 0] = tree.config.position_offset - 1
    expected = transformers_5_logits(fixture, feed)
    got = run(out, feed)
    if "esm" in fixture:  # transformers zeroes ESM's padding vectors: outputs never read (families/esm.py)
        real = feed["attention_mask"].astype(bool)
        got, expected = got[real], expected[real]
    np.testing.assert_allclose(got, expected, rtol=0, atol=ORACLE_ATOL)


@pytest.mark.parametrize("name", sorted({key.split(":")[0] for key in np.load(FIXTURES / "relpos" / "reference.npz")}))
def test_relative_position_and_causal_exports_compute_transformers_4s_logits(name, tmp_path):
    """fixtures/relpos/reference.npz: transformers 4.57's logits, made with the fixtures."""
    reference = np.load(FIXTURES / "relpos" / "reference.npz")
    feed = {key: reference[f"{name}:{key}"] for key in ("input_ids", "token_type_ids", "attention_mask")}
    out = export(f"relpos/{name}", tmp_path)
    np.testing.assert_allclose(run(out, feed), reference[f"{name}:logits"], rtol=0, atol=1e-5)


def test_albert_zh_export_computes_brightmarts_logits(tmp_path):
    """fixtures/albert_zh/reference.npz: brightmart's TensorFlow model's MLM logits at its masked positions."""
    reference = np.load(FIXTURES / "albert_zh" / "reference.npz")
    out = export("albert_zh/tf", tmp_path)
    logits = run(out, {"input_ids": reference["input_ids"].astype(np.int64),
                       "token_type_ids": reference["segment_ids"].astype(np.int64),
                       "attention_mask": reference["input_mask"].astype(np.int64)})
    positions = reference["masked_lm_positions"]
    gathered = np.take_along_axis(logits, positions[..., None].astype(np.int64), axis=1).reshape(-1, logits.shape[-1])
    np.testing.assert_allclose(gathered, reference["mlm_logits"], rtol=0, atol=1e-5)


def test_a_shared_layer_and_a_tied_decoder_are_one_initializer_each(tmp_path):
    out = export("family_hf/albert/masked_lm", tmp_path)
    model = onnx.load(out / "model.onnx")
    names = [t.name for t in model.graph.initializer]
    assert len(names) == len(set(names)) and "mlm.decoder" not in names
    gemm = next(node for node in model.graph.node if node.op_type == "Gemm")
    assert gemm.input[1] == "embeddings.word"  # the tied decoder is the word table itself
    tree = formats.read(FIXTURES / "family_hf" / "albert" / "masked_lm")
    assert tree.config.num_hidden_layers > tree.config.stored_layers
    assert sum("layers.0.attention.query.kernel" in node.input for node in model.graph.node) == \
        tree.config.num_hidden_layers


def test_the_export_is_a_directory_with_the_tokenizer_files_and_its_tensors_and_set_aside_entries(tmp_path):
    source = FIXTURES / "trained" / "tf"
    convert(formats.read(source), tmp_path / "tf", "onnx")
    assert sorted(p.name for p in (tmp_path / "tf").iterdir()) == ["model.onnx", "vocab.txt"]
    assert (tmp_path / "tf" / "vocab.txt").read_bytes() == (source / "vocab.txt").read_bytes()
    result = convert(formats.read(FIXTURES / "hf" / "pretraining"), tmp_path / "out", "onnx")
    assert "embeddings.word" in result.tensors and not any(t.startswith(("pooler", "nsp")) for t in result.tensors)
    assert {entry.reason for entry in result.ignored if "pooler" in entry.name} == \
        {"not part of the export, which computes the MLM logits alone"}, result.ignored


# --- float16 --------------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", ["hf/pretraining", "family_hf/roberta/masked_lm", "relpos/bert_relative_key_query",
                                     "albert_zh/tf", "trained/hf"])
def test_a_float16_export_keeps_layer_norm_and_softmax_in_float32_within_its_budget(fixture, tmp_path):
    tree = formats.read(FIXTURES / fixture)
    out = export(fixture, tmp_path, dtype="float16")
    model = onnx.load(out / "model.onnx")
    dtypes = {t.name: onnx.helper.tensor_dtype_to_np_dtype(t.data_type) for t in model.graph.initializer}
    assert {name for name, dtype in dtypes.items() if dtype == np.float32} == \
        {name for name in dtypes if name.endswith((".gamma", ".beta"))}
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {value.name: value.type.tensor_type.elem_type for value in inferred.graph.value_info}
    guarded = [node for node in model.graph.node if node.op_type in ("LayerNormalization", "Softmax")]
    assert len(guarded) == 3 * tree.config.num_hidden_layers + 2  # a softmax and 2 LNs a layer, 2 more LNs:
    for node in guarded:  # every one computed in float32
        assert {types[node.input[0]], types[node.output[0]]} == {onnx.TensorProto.FLOAT}, node.name
    feed = batch(tree.config, OTHER_SHAPE, seed=5)
    expected = NumpyBert(tree)(feed["input_ids"], feed["token_type_ids"] if tree.config.type_vocab_size else None,
                               feed["attention_mask"]).mlm_logits
    got = run(out, feed)
    assert got.dtype == np.float32
    difference = float(np.abs(got - expected).max())
    assert 0 < difference <= onnx_check.budget(onnx_graph.Precision.FLOAT16, float(np.abs(expected).max()))


def with_array(tree: ParameterTree, name: str, array: np.ndarray) -> ParameterTree:
    params = dict(tree.params)
    params[name] = replace(params[name], tensor=ArrayTensor(np.ascontiguousarray(array, dtype=np.float32), FLOAT32))
    return replace(tree, params=params)


def overflowing_tree() -> ParameterTree:
    """fixtures/hf/pretraining with its first feed-forward kernel x 20000: its weights stay within
    float16's range (|w| < 65504), its intermediate activations do not."""
    tree = formats.read(FIXTURES / "hf" / "pretraining")
    name = "layers.0.ffn.intermediate.kernel"
    return with_array(tree, name, tree[name].tensor.read().astype(np.float32) * 20000)


def test_the_overflow_model_overflows_float16_and_not_float32():
    tree = overflowing_tree()
    assert float(np.abs(tree["layers.0.ffn.intermediate.kernel"].tensor.read()).max()) < 65504
    model = NumpyBert(tree)
    feed = batch(tree.config, (2, 7))
    hidden = model.encode(feed["input_ids"], feed["token_type_ids"], feed["attention_mask"])
    assert np.isfinite(model.mlm_logits(hidden)).all()
    first = model._layer_norm(model.params["embeddings.word"][feed["input_ids"]], "embeddings.norm")  # roughly
    assert float(np.abs(model._dense(first, "layers.0.ffn.intermediate")).max()) > 65504


def test_a_float16_export_that_overflows_is_refused_and_nothing_is_left(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(CheckFailed, match=r"export overflows: its value layers\.0\.ffn\.intermediate"):
        convert(overflowing_tree(), out, "onnx", options=WriteOptions(dtype="float16"))
    assert list(tmp_path.iterdir()) == []
    result = convert(overflowing_tree(), out, "onnx")  # float32 computes it
    assert any(note.startswith("checked:") for note in result.notes)


def test_a_weight_beyond_float16s_range_is_refused_before_writing(tmp_path):
    tree = formats.read(FIXTURES / "hf" / "pretraining")
    tree = with_array(tree, "mlm.output_bias", np.full(tree.config.vocab_size, 1e5))
    with pytest.raises(BadInput, match="mlm.output_bias .* beyond float16"):
        convert(tree, tmp_path / "out", "onnx", options=WriteOptions(dtype="float16"))
    assert list(tmp_path.iterdir()) == []


# --- the check after writing -----------------------------------------------------------------------


def test_an_export_that_computes_otherwise_is_removed_and_exits_1(tmp_path, monkeypatch):
    """A graph with ReLU where the model has GELU: the check finds it, and nothing is left."""
    monkeypatch.setattr(onnx_graph._Builder, "activation", lambda self, x, name=None: self.op("Relu", x))
    out = tmp_path / "out"
    result = run_in_process("convert", FIXTURES / "hf" / "pretraining", out, "--to", "onnx")
    assert result.exit_code == 1, result.stderr
    assert "differ from the NumPy runtime's" in result.stderr and "nothing was written" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_without_onnxruntime_float32_is_written_with_a_note_and_float16_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(onnx_check, "_has_onnxruntime", lambda: False)
    tree = formats.read(FIXTURES / "hf" / "pretraining")
    result = convert(tree, tmp_path / "f32", "onnx")
    assert any(note.startswith("not verified: onnxruntime") for note in result.notes)
    with pytest.raises(BadInput, match="float16 export is written only once onnxruntime has run it"):
        convert(tree, tmp_path / "f16", "onnx", options=WriteOptions(dtype="float16"))
    assert not (tmp_path / "f16").exists()


def test_past_2_gb_the_weights_go_to_external_data_through_onnx(tmp_path, monkeypatch):
    monkeypatch.setattr(onnx_export, "EXTERNAL_DATA_BYTES", 0)
    out = export("family_hf/roberta/masked_lm", tmp_path)
    assert {"model.onnx", "model.onnx.data"} <= {p.name for p in out.iterdir()}
    model = onnx.load(out / "model.onnx", load_external_data=False)
    for tensor in model.graph.initializer:
        assert tensor.data_location == onnx.TensorProto.EXTERNAL
        info = {entry.key: entry.value for entry in tensor.external_data}
        assert info["location"] == "model.onnx.data" and int(info["offset"]) % onnx_export.EXTERNAL_DATA_ALIGNMENT == 0
    onnx.checker.check_model(str(out / "model.onnx"), full_check=True)


def test_progress_counts_every_tensor_written(tmp_path):
    tree = formats.read(FIXTURES / "hf" / "pretraining")
    seen = []
    result = convert(tree, tmp_path / "out", "onnx", options=WriteOptions(on_tensor=seen.append))
    assert sum(seen) == sum(tree[name].tensor.nbytes for name in result.tensors) and len(seen) == len(result.tensors)


def test_dtype_is_refused_by_targets_that_write_tensors_as_stored(tmp_path):
    result = run_in_process("convert", FIXTURES / "hf" / "pretraining", tmp_path / "out", "--to", "hf",
                            "--dtype", "float16")
    assert result.exit_code == 2 and "--dtype float16 does not apply to --to hf" in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_model_without_an_mlm_head_is_refused(tmp_path):
    result = run_in_process("convert", FIXTURES / "hf" / "bert_model", tmp_path / "out", "--to", "onnx")
    assert result.exit_code == 2 and "has no MLM head" in result.stderr and not (tmp_path / "out").exists()


# --- diff --outputs, and no reading -------------------------------------------------------------


def test_diff_outputs_runs_an_export_against_its_source(tmp_path):
    out = export("hf/pretraining", tmp_path)
    same = run_in_process("diff", FIXTURES / "hf" / "pretraining", out / "model.onnx", "--outputs", "--json")
    assert same.exit_code == 0, same.stdout
    report = json.loads(same.stdout)
    assert report["ok"] and report["b"] == {"path": str(out / "model.onnx"), "format": "onnx", "export": True}
    assert report["outputs"]["runtime"] == "onnxruntime" and report["outputs"]["max_abs_diff"] <= ATOL
    half = tmp_path / "half"
    convert(formats.read(FIXTURES / "hf" / "pretraining"), half, "onnx", options=WriteOptions(dtype="float16"))
    strict = run_in_process("diff", FIXTURES / "hf" / "pretraining", half, "--outputs")
    assert strict.exit_code == 1 and "DIFFERENT outputs" in strict.stdout
    assert run_in_process("diff", FIXTURES / "hf" / "pretraining", half, "--outputs", "--outputs-atol", "0.05").exit_code == 0
    other = run_in_process("diff", FIXTURES / "trained" / "perturbed_fresh", out, "--outputs")
    assert other.exit_code in (1, 2) and "equal outputs" not in other.stdout


def test_an_export_is_not_read_as_a_checkpoint(tmp_path):
    out = export("hf/pretraining", tmp_path)
    for args in (["inspect", out], ["audit", out / "model.onnx"], ["verify", out],
                 ["convert", out, tmp_path / "back", "--to", "hf"], ["diff", out, FIXTURES / "hf" / "pretraining"]):
        result = run_in_process(*args)
        assert result.exit_code == 2, args
        assert "an ONNX file is an export target, not a checkpoint bertconv reads" in result.stderr, args
    bare = run_in_process("diff", FIXTURES / "hf" / "pretraining", out)
    assert bare.exit_code == 2 and "pass --outputs" in bare.stderr
    assert not (tmp_path / "back").exists()


def test_esm_export_rescales_for_its_mask_tokens_as_transformers_5(tmp_path):
    """Token dropout depends on each sequence's count of <mask> tokens: sequences with none, one and
    several (random ids rarely hold the mask id), against the NumPy runtime and transformers 5."""
    torch = needs("torch")
    transformers = needs("transformers")
    fixture = FIXTURES / "prenorm" / "esm" / "masked_lm"
    tree = formats.read(fixture)
    feed = batch(tree.config, (3, 12), seed=5)
    ids = feed["input_ids"]
    ids[ids == tree.config.mask_token_id] = 4  # none in row 0, one in row 1, three in row 2
    ids[1, 3] = tree.config.mask_token_id
    ids[2, [2, 5, 6]] = tree.config.mask_token_id
    out = export("prenorm/esm/masked_lm", tmp_path)
    got = run(out, feed)
    expected = NumpyBert(tree)(feed["input_ids"], None, feed["attention_mask"]).mlm_logits
    np.testing.assert_allclose(got, expected, rtol=0, atol=ATOL)
    model = transformers.AutoModelForMaskedLM.from_pretrained(fixture, dtype=torch.float32).eval()
    with torch.no_grad():
        reference = model(input_ids=torch.tensor(feed["input_ids"]),
                          attention_mask=torch.tensor(feed["attention_mask"])).logits.numpy()
    real = feed["attention_mask"].astype(bool)
    assert np.abs(got - reference)[real].max() <= ORACLE_ATOL
    unscaled = NumpyBert(replace_config(tree, token_dropout=False))(feed["input_ids"], None,
                                                                   feed["attention_mask"]).mlm_logits
    assert np.abs(got - unscaled)[2].max() > 1e-2  # the rescaling is computed, not skipped


def replace_config(tree: ParameterTree, **changes) -> ParameterTree:
    tree.config = replace(tree.config, **changes)
    return tree


@pytest.mark.parametrize("fixture", ["prenorm/megatron/pretraining", "prenorm/esm/masked_lm"])
def test_pre_layer_norm_exports_in_float16_pass_their_check(fixture, tmp_path):
    """The residual stream of a pre-LayerNorm encoder, unnormalized between layers, is kept in float32."""
    out = export(fixture, tmp_path, dtype="float16")
    model = onnx.load(out / "model.onnx")
    assert any(init.data_type == onnx.TensorProto.FLOAT16 for init in model.graph.initializer)
