"""keras-hub 0.32 as an oracle: load presets and compute what the tests compare, one request a line.

Runs in the keras-hub environment (.cache/kerashub-venv: keras-hub 0.32.0, Keras 3 on
tensorflow-cpu 2.21, no tf-keras), started once per test session by tests/kerashub_process.py
(TensorFlow takes seconds to start) and served over tests/shared_server.py. Each JSON line it
reads is a request, each answered by one JSON line (what the libraries print goes to its log):

    {"load": [DIRECTORY, INPUTS.npz, OUT.npz], "dtype": null | "float32"}
        The task class is task.json's (`keras_hub.models.<class>.from_preset`), the backbone's
        alone when the preset has no task; `dtype`, when given, is the dtype policy in place of
        the config's (a bfloat16 preset computed in float32). OUT.npz gets every loaded variable
        under `param:<Keras path>` and the outputs on the inputs: `mlm_logits` [B, M, V] at
        `mask_positions`, `sequence_output`. Answers the class, keras-hub's version, the
        parameter count, and the preprocessor and its tokenizer's vocabulary size (or null).
    {"buckets": [[BUCKET_SIZE, LENGTH], ...], "out": OUT.npz}
        DeBERTa-v3's relative positions: OUT.npz gets, under `<bucket_size>_<length>`, the row
        `DisentangledSelfAttention` reads for query l and key r in its c2p term, [S, S] with
        S = length. Answers {}.

A request that fails is answered {"error": its traceback}; the process ends when its last client has gone.
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json  # noqa: E402
from pathlib import Path  # noqa: E402

import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402
from keras_hub.src.models.deberta_v3.disentangled_self_attention import DisentangledSelfAttention  # noqa: E402

import shared_server  # noqa: E402


def load(directory: Path, inputs_path: Path, out_path: Path, dtype: str | None = None) -> dict:
    """Load `directory` (with the dtype policy `dtype` in place of its config's, when given)."""
    feed = dict(np.load(inputs_path))
    policy = {"dtype": dtype} if dtype else {}
    task_file = directory / "task.json"
    task = None
    if task_file.exists():
        cls = getattr(keras_hub.models, json.loads(task_file.read_text())["class_name"])
        task = cls.from_preset(str(directory), **policy)
        backbone = task.backbone
    else:
        cls = getattr(keras_hub.models, json.loads((directory / "config.json").read_text())["class_name"])
        backbone = cls.from_preset(str(directory), **policy)
    names = [i.name for i in backbone.inputs]
    backbone_feed = {k: v for k, v in feed.items() if k in names}
    output = backbone(backbone_feed)  # a dict with the pooled output (BERT), or the sequence alone (RoBERTa)
    outputs = {"sequence_output": np.asarray(output["sequence_output"] if isinstance(output, dict) else output)}
    model = task or backbone
    if task is not None:
        outputs["mlm_logits"] = np.asarray(task({**backbone_feed, "mask_positions": feed["mask_positions"]}))
    params = {f"param:{w.path}": _exact(w.numpy()) for w in model.weights}
    np.savez(out_path, **params, **{k: _exact(v) for k, v in outputs.items()})
    preprocessor = getattr(task, "preprocessor", None)
    tokenizer = getattr(preprocessor, "tokenizer", None)
    return {"class": cls.__name__, "keras_hub": keras_hub.__version__, "parameters": int(model.count_params()),
            "preprocessor": type(preprocessor).__name__ if preprocessor is not None else None,
            "vocabulary_size": int(tokenizer.vocabulary_size()) if tokenizer is not None else None}


def bucket_rows(bucket_size: int, length: int) -> np.ndarray:
    """keras-hub's relative-position row for every (query, key), [S, S] with S = `length`."""
    layer = DisentangledSelfAttention(num_heads=1, hidden_dim=8, max_position_embeddings=length,
                                      bucket_size=bucket_size)
    relative = layer._get_rel_pos(length)[0, 0]
    return np.asarray(ops.clip(relative + bucket_size, 0, 2 * bucket_size - 1))


def answer(request: dict) -> dict:
    if "load" in request:
        return load(*map(Path, request["load"]), dtype=request.get("dtype"))
    np.savez(request["out"], **{f"{b}_{s}": bucket_rows(b, s) for b, s in request["buckets"]})
    return {}


def _exact(values) -> np.ndarray:
    """NumPy-readable values: bfloat16 (ml_dtypes, which np.load cannot rebuild) as its exact float32."""
    values = np.asarray(values)
    return values.astype(np.float32) if values.dtype.name == "bfloat16" else values


if __name__ == "__main__":  # in the keras-hub environment, tests/ first on its path
    shared_server.serve(answer)
