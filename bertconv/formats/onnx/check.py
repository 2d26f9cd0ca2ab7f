"""An ONNX export run by onnxruntime against the NumPy runtime on the same random batches.

Shape legend: B batch, S sequence length, V vocab size.

`compare` feeds both the batches of `CHECK_SHAPES` (random ids, token types where the model has
them, and padding at the end of some rows) and reports the largest |ONNX - NumPy| logit; `verify`
is what `convert --to onnx` runs on the file it has just written: the export stands only if the
difference is within the budget of its precision.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...errors import BadInput, CheckFailed, bad_input
from ...tree import ParameterTree
from .graph import ATTENTION_MASK, INPUT_IDS, LOGITS, TOKEN_TYPE_IDS, Precision

#: Two shapes [B, S], so that a graph with a batch or sequence length frozen somewhere fails on
#: one of them; S is cut to the model's usable positions.
CHECK_SHAPES = ((2, 7), (3, 13))
CHECK_SEED = 20240229

#: Largest |logit| difference allowed for a float32 export: float32 noise, as `diff --outputs`
#: (checks/outputs.py OUTPUTS_ATOL). Measured (docs/onnx.md): at most 4.3e-6 on the fixtures,
#: 2.7e-5 on trained models whose logits reach 36 (AntiBERTy, rxnmapper's ALBERT).
FLOAT32_ATOL = 1e-4
#: Largest |logit| difference allowed for a float16 export, relative to the largest |logit| of
#: the float32 computation: float16's weights and products (11-bit significands, unit roundoff
#: 4.9e-4) move logits by about 1e-3 of their scale. Measured (docs/onnx.md): 7.4e-4 (AntiBERTy),
#: 8.7e-4 (rxnfp's BERT), 2.3e-3 (rxnmapper's ALBERT, one layer run 12 times), at most 4.5e-3 on
#: the fixtures (ModernBERT's, N(0, 0.5) weights: 3.2e-3 of it from rounding them to float16 alone);
#: the budget is 4x the worst trained model's, 2.2x that fixture's.
FLOAT16_RTOL = 1e-2
#: What to install for the check.
ONNXRUNTIME = "onnxruntime (pip install 'bertconv[onnx]')"


def budget(precision: Precision, scale: float) -> float:
    """The largest difference allowed for an export in `precision` whose float32 logits reach `scale`."""
    return FLOAT32_ATOL if precision is Precision.FLOAT32 else max(FLOAT32_ATOL, FLOAT16_RTOL * scale)


def verify(tree: ParameterTree, model_path: Path, precision: Precision) -> list[str]:
    """Check a written export; notes for `convert`.

    Raises CheckFailed when its logits differ from the NumPy runtime's beyond `budget` (or are
    not finite where those are), BadInput for a float16 export without onnxruntime (its overflow
    cannot be ruled out unrun). Without onnxruntime a float32 export is written with a note.
    """
    if not _has_onnxruntime():
        if precision is Precision.FLOAT16:
            raise bad_input(model_path.parent, f"a float16 export is written only once onnxruntime has run it "
                                               f"(float16 may overflow where float32 does not), and {ONNXRUNTIME} "
                                               f"is not installed; install it or export with --dtype float32. "
                                               f"Nothing was written")
        return [f"not verified: {ONNXRUNTIME} is not installed, so the export was not run against the NumPy "
                f"runtime; run `bertconv diff SOURCE DST --outputs` once it is"]
    report = compare(tree, model_path, precision=precision)
    shapes = " and ".join(f"[{b}, {s}]" for b, s in report["shapes"])
    if report["overflow"]:
        raise CheckFailed(f"{tree.path}: the {precision.value} export overflows: its value {report['overflow']} is "
                          f"inf or NaN on the check's inputs, where the NumPy runtime's float32 logits are finite "
                          f"(activations past float16's largest value, 65504, overflow float16); export with "
                          f"--dtype float32. Nothing was written")
    if report["nonfinite"]:
        raise CheckFailed(f"{tree.path}: the {precision.value} export computes {report['nonfinite']} logits that are "
                          f"inf or NaN where the NumPy runtime's float32 logits are finite (first at "
                          f"{report['nonfinite_at']}); nothing was written")
    if not report["ok"]:
        raise CheckFailed(f"{tree.path}: the ONNX export's logits differ from the NumPy runtime's by "
                          f"{report['max_abs_diff']} at {report['max_at']} on inputs {shapes}, beyond "
                          f"{report['atol']:.3g}; nothing was written")
    return [f"checked: onnxruntime {report['runtime_version']} ran the export on inputs {shapes}; its logits are "
            f"within {report['max_abs_diff']:.2g} of the NumPy runtime's (budget {report['atol']:.2g}, "
            f"{precision.value})"]


def compare(tree: ParameterTree, model_path: Path, *, precision: Precision | None = None,
            atol: float | None = None) -> dict:
    """Run `model_path` and the NumPy runtime on the `CHECK_SHAPES` batches; a JSON-ready report in
    the shape of `checks.outputs.compare_outputs` (compared, runtime, positions, atol,
    max_abs_diff, max_at, top1_*, ok), with the shapes run, the onnxruntime version, and the
    count and first place of logits not finite in the export but finite in NumPy (`nonfinite`).

    `atol` defaults to the budget of `precision`, which defaults to what the file states.
    """
    from ...checks.arrays import json_number
    from ...runtime.numerics import Numerics
    from ...runtime.numpy_bert import NumpyBert

    from ...threads import Workers

    model = NumpyBert(tree, Numerics.for_tree(tree))
    batches = list(_batches(tree))
    # The NumPy runtime's logits are computed while onnxruntime loads the file (which releases
    # the GIL): a second core does one while the first does the other.
    with Workers(1, "bertconv-reference") as pool:
        reference = pool.submit(lambda: [model.mlm_logits(model.encode(batch[INPUT_IDS], batch[TOKEN_TYPE_IDS],
                                                                        batch[ATTENTION_MASK])) for batch in batches])
        session, float16_values = _session(model_path)
        all_expected = reference.result()
    precision = precision or _stated_precision(session)
    fed = {value.name for value in session.get_inputs()}
    _check_interface(tree, model_path, session)
    worst, worst_at, scale, nonfinite, nonfinite_at, positions = 0.0, [0, 0, 0], 0.0, 0, None, 0
    agree = top1_onnx = top1_numpy = 0
    shapes, overflow = [], None
    for batch, expected in zip(batches, all_expected):
        shapes.append(list(batch[INPUT_IDS].shape))
        feeds = {name: batch[name] for name in fed}
        got, *values = _run(session, [LOGITS, *float16_values], feeds, model_path)
        if overflow is None:
            overflow = next((name for name, value in zip(float16_values, values) if not np.isfinite(value).all()), None)
        expected, got = expected.astype(np.float64), got.astype(np.float64)
        scale = max(scale, float(np.abs(expected[np.isfinite(expected)]).max(initial=0.0)))
        broken = ~np.isfinite(got) & np.isfinite(expected)
        if broken.any() and nonfinite_at is None:
            nonfinite_at = [int(i) for i in np.argwhere(broken)[0]]
        nonfinite += int(broken.sum())
        difference = np.abs(got - expected)
        difference[np.isnan(got) != np.isnan(expected)] = np.inf
        difference[np.isnan(got) & np.isnan(expected)] = 0.0
        at = np.unravel_index(int(np.argmax(difference)), difference.shape)
        if float(difference[at]) > worst or (worst == 0.0 and not shapes[:-1]):
            worst, worst_at = float(difference[at]), [len(shapes) - 1, *(int(i) for i in at)]
        ids = batch[INPUT_IDS]
        agree += int((got.argmax(-1) == expected.argmax(-1)).sum())
        top1_onnx += int((got.argmax(-1) == ids).sum())
        top1_numpy += int((expected.argmax(-1) == ids).sum())
        positions += ids.size
    allowed = budget(precision, scale) if atol is None else atol
    return {
        "compared": "mlm_logits", "runtime": "onnxruntime", "runtime_version": _onnxruntime().__version__,
        "positions": positions, "shapes": shapes, "precision": precision.value, "atol": allowed,
        "max_abs_diff": json_number(worst), "max_at": worst_at, "logit_scale": scale,
        "top1_agreement": agree / positions, "top1_a": top1_numpy / positions, "top1_b": top1_onnx / positions,
        "nonfinite": nonfinite, "nonfinite_at": nonfinite_at, "overflow": overflow,
        "ok": bool(worst <= allowed and not nonfinite and overflow is None),
    }


def _batches(tree: ParameterTree):
    """The check's inputs: for each of `CHECK_SHAPES`, int64 ids, token types and mask [B, S]."""
    config = tree.config
    rng = np.random.default_rng(CHECK_SEED)
    usable = config.max_position_embeddings - config.position_offset
    for batch, length in CHECK_SHAPES:
        length = min(length, usable)
        ids = rng.integers(0, config.vocab_size, size=(batch, length), dtype=np.int64)
        types = rng.integers(0, max(config.type_vocab_size, 1), size=(batch, length), dtype=np.int64)
        kept = rng.integers(1, length + 1, size=(batch, 1))  # tokens per row; the rest is padding
        kept[0] = length  # one row unpadded
        mask = (np.arange(length)[None, :] < kept).astype(np.int64)
        yield {INPUT_IDS: ids, TOKEN_TYPE_IDS: types, ATTENTION_MASK: mask}


def _check_interface(tree: ParameterTree, model_path: Path, session) -> None:
    """The export takes the inputs the model does (token types exactly when it has them) and
    returns logits over its vocabulary."""
    fed = sorted(value.name for value in session.get_inputs())
    expected = sorted({INPUT_IDS, ATTENTION_MASK} | ({TOKEN_TYPE_IDS} if tree.config.type_vocab_size else set()))
    outputs = {value.name: value.shape for value in session.get_outputs()}
    if fed != expected:
        raise bad_input(model_path, f"takes inputs {fed}, but {tree.path} is a model with inputs {expected}: it "
                                    f"is not an export of this checkpoint")
    shape = outputs.get(LOGITS)
    if shape is None or len(shape) != 3 or shape[2] != tree.config.vocab_size:
        raise bad_input(model_path, f"returns {LOGITS} of shape {shape}, but {tree.path} has "
                                    f"{tree.config.vocab_size} tokens: expected [batch, sequence, "
                                    f"{tree.config.vocab_size}]; it is not an export of this checkpoint")


def _run(session, outputs: list[str], feeds: dict, model_path: Path) -> list[np.ndarray]:
    try:
        return session.run(outputs, feeds)
    except Exception as error:  # onnxruntime's own exception types
        raise bad_input(model_path, f"onnxruntime cannot run it on inputs of shape "
                                    f"{list(feeds[INPUT_IDS].shape)}: {str(error).splitlines()[0]}") from None


def _stated_precision(session) -> Precision:
    stated = session.get_modelmeta().custom_metadata_map.get("bertconv.dtype", "float32")
    return Precision(stated) if stated in {p.value for p in Precision} else Precision.FLOAT32


def _session(model_path: Path):
    """(an onnxruntime session of the export, the float16 values it returns beside the logits).

    onnxruntime's CPU provider computes float16 nodes it has no float16 kernel for in float32
    (it inserts casts, then removes the casts between two such nodes), so a float16 value that
    overflows may never be float16 there, and its logits stay finite where another provider's
    are inf. In a float16 export every float16 value of the graph is therefore made an output,
    which onnxruntime rounds to float16: an overflow shows, wherever it is computed.
    """
    import onnx

    session = _load(model_path, str(model_path))
    if _stated_precision(session) is Precision.FLOAT32:
        return session, []
    del session
    model = onnx.load(model_path, load_external_data=False)
    inferred = onnx.shape_inference.infer_shapes(model)
    float16_values = [value for value in inferred.graph.value_info
                      if value.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16]
    model.graph.output.extend(float16_values)
    if not any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
        return _load(model_path, model.SerializeToString()), [value.name for value in float16_values]
    exposed = model_path.with_name(f".{model_path.name}.check")  # beside it: external data is found relative to it
    try:
        onnx.save(model, exposed)
        return _load(model_path, str(exposed)), [value.name for value in float16_values]
    finally:
        exposed.unlink(missing_ok=True)


def _load(model_path: Path, source):
    """An onnxruntime session of `source` (a path or the model's bytes) for the check.

    Without prepacking: onnxruntime otherwise reorders every MatMul weight for its GEMM kernels
    when the session is made, which pays off over many runs, not over the check's two batches.
    Making the session of a bert-base export took 0.46-0.57 s without it, 0.76-1.08 s with it
    (medians of 4: 0.53 and 1.01 s)."""
    runtime = _onnxruntime()
    options = runtime.SessionOptions()
    options.add_session_config_entry("session.disable_prepacking", "1")
    try:
        return runtime.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime raises its own exception types for a file it cannot load
        raise bad_input(model_path, f"onnxruntime cannot load it: {str(error).splitlines()[0]}") from None


def _onnxruntime():
    try:
        import onnxruntime
    except ImportError:
        raise BadInput(f"running an ONNX export needs {ONNXRUNTIME}, which is not installed") from None
    return onnxruntime


def _has_onnxruntime() -> bool:
    try:
        _onnxruntime()
    except BadInput:
        return False
    return True
