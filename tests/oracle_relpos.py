"""Load a Hugging Face directory with transformers 4.x as a named class and dump its logits.

Runs in the oracle environment (.cache/oracle-venv: transformers 4.57.6 with torch, TensorFlow and
Flax), as a job of the tests' oracle process
(tests/oracle_process.py) for tests/test_relpos_formats.py, or on its own:

    python tests/oracle_relpos.py CLASS DIRECTORY INPUTS.npz OUT.npz [CLASS DIRECTORY INPUTS.npz OUT.npz ...]

CLASS is a transformers class name (`BertForMaskedLM`, `TFBertLMHeadModel`, `FlaxBertForCausalLM`,
...). The PyTorch classes run eager attention and, for a decoder, no cache (as in training: with
its cache, 4.57 gives every query of a prompt the last position's relative distances). OUT.npz
gets `logits` [B, S, V] in float32 (a pre-training class's MLM logits) on INPUTS.npz's `input_ids`, `token_type_ids` and
`attention_mask`. Prints one JSON line per job: class, transformers version, the missing and
unexpected weights of the load (PyTorch and TF; Flax only logs them).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import transformers  # noqa: E402


def run(class_name: str, directory: Path, inputs_path: Path, out_path: Path) -> None:
    cls = getattr(transformers, class_name)
    feed = {k: v for k, v in np.load(inputs_path).items() if k in ("input_ids", "token_type_ids", "attention_mask")}
    info: dict = {}
    if class_name.startswith("TF"):
        model, info = cls.from_pretrained(directory, output_loading_info=True)
        logits = model(**feed, training=False).logits
    elif class_name.startswith("Flax"):
        model = cls.from_pretrained(directory)
        logits = model(**feed).logits
    else:
        import torch

        model, info = cls.from_pretrained(directory, output_loading_info=True, attn_implementation="eager")
        options = {"use_cache": False} if model.config.is_decoder else {}
        with torch.no_grad():
            output = model.eval()(**{k: torch.from_numpy(v) for k, v in feed.items()}, **options)
        logits = getattr(output, "logits", None)
        if logits is None:  # a pre-training class (NezhaForPreTraining): its MLM logits
            logits = output.prediction_logits
    np.savez(out_path, logits=np.asarray(logits, dtype=np.float32))
    print(json.dumps({"class": class_name, "transformers": transformers.__version__,
                      "missing": sorted(info.get("missing_keys", [])),
                      "unexpected": sorted(info.get("unexpected_keys", []))}))


if __name__ == "__main__":
    arguments = sys.argv[1:]
    for start in range(0, len(arguments), 4):  # one process for many jobs: TF and jax start slowly
        run(arguments[start], *map(Path, arguments[start + 1:start + 4]))
