"""Load a keras-hub preset directory with keras-hub 0.32 and dump what it loaded.

Runs in the keras-hub environment (.cache/kerashub-venv: keras-hub 0.32.0, Keras 3 on
tensorflow-cpu 2.21, no tf-keras), by subprocess from tests/test_keras_hub.py:

    python tests/oracle_kerashub.py DIRECTORY INPUTS.npz OUT.npz [DIRECTORY INPUTS.npz OUT.npz ...]

The task class is task.json's (`keras_hub.models.<class>.from_preset`), the backbone's alone
when the preset has no task. OUT.npz gets every loaded variable under `param:<Keras path>` and
the outputs on the inputs: `mlm_logits` [B, M, V] at `mask_positions`, `sequence_output`. Prints
one JSON line per directory: class, keras-hub version, parameter count, and whether the
preprocessor and its tokenizer loaded (with the tokenizer's vocabulary size).
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import keras_hub  # noqa: E402
import numpy as np  # noqa: E402


def main(directory: Path, inputs_path: Path, out_path: Path, dtype: str | None = None) -> None:
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
    print(json.dumps({"class": cls.__name__, "keras_hub": keras_hub.__version__, "parameters": int(model.count_params()),
                      "preprocessor": type(preprocessor).__name__ if preprocessor is not None else None,
                      "vocabulary_size": int(tokenizer.vocabulary_size()) if tokenizer is not None else None}))


def _exact(values) -> np.ndarray:
    """NumPy-readable values: bfloat16 (ml_dtypes, which np.load cannot rebuild) as its exact float32."""
    values = np.asarray(values)
    return values.astype(np.float32) if values.dtype.name == "bfloat16" else values


if __name__ == "__main__":
    arguments = sys.argv[1:]
    for start in range(0, len(arguments), 3):  # one process for many jobs: TensorFlow starts slowly
        main(*map(Path, arguments[start:start + 3]))
