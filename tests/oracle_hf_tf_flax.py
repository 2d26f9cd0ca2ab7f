"""Load a Hugging Face TF or Flax BERT directory with transformers 4.x and dump what it loaded.

Runs in the oracle environment (.cache/oracle-venv: transformers 4.57.6, tensorflow-cpu 2.21 +
tf-keras, flax, jax): `main` per job in the tests' oracle process (tests/oracle_process.py), or
from the command line:

    python tests/oracle_hf_tf_flax.py DIRECTORY INPUTS.npz OUT.npz [DIRECTORY INPUTS.npz OUT.npz ...]

The class is `TF<architecture>` for a `tf_model.h5`, `Flax<architecture>` for a
`flax_model.msgpack`, the architecture read from `config.json` (or `class_name`, when `main` is
given one: tests/oracle_process.py's `load-as`). OUT.npz gets every loaded
parameter under `param:<transformers' name>` (bfloat16 as uint16 bits) and the outputs on the
inputs (`mlm_logits`, `nsp_logits`, `sop_logits`, `rtd_logits`, `sequence_output`, in float32; a half-precision Flax model
runs in float32). Prints one JSON line per directory: class, transformers version, parameter count, and the
missing / unexpected weights of the load.
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


#: A class's `logits` by bertconv's name, by the end of the class name.
LOGITS = {"ForMaskedLM": "mlm_logits", "LMHeadModel": "mlm_logits", "ForCausalLM": "mlm_logits",
          "ElectraForPreTraining": "rtd_logits", "ForNextSentencePrediction": "nsp_logits"}


def outputs(output, class_name: str) -> dict[str, np.ndarray]:
    """The outputs by bertconv's names (a task head's logits are left out)."""
    found = {}
    logits = getattr(output, "logits", None)
    named = next((ours for end, ours in LOGITS.items() if class_name.endswith(end)), None)
    if logits is not None and named is not None:
        found[named] = logits
    for ours, theirs in (("mlm_logits", "prediction_logits"), ("nsp_logits", "seq_relationship_logits"),
                         ("sop_logits", "sop_logits"), ("sequence_output", "last_hidden_state")):
        value = getattr(output, theirs, None)
        if value is not None and ours not in found:
            found[ours] = value
    return {key: np.asarray(value, dtype=np.float32) for key, value in found.items()}


def flat(params, prefix=()) -> dict[str, np.ndarray]:
    values = {}
    for key, value in params.items():
        if hasattr(value, "items"):
            values.update(flat(value, prefix + (key,)))
        else:
            array = np.asarray(value)
            values["/".join(prefix + (key,))] = array.view(np.uint16) if array.dtype.name == "bfloat16" else array
    return values


def main(directory: Path, inputs_path: Path, out_path: Path, class_name: str | None = None) -> None:
    config = json.loads((directory / "config.json").read_text())
    architecture = config["architectures"][0]
    taken = ("input_ids", "attention_mask") if config["model_type"] == "distilbert" else (
        "input_ids", "token_type_ids", "attention_mask")  # DistilBERT's models take no token types
    feed = {k: v for k, v in np.load(inputs_path).items() if k in taken}
    if (directory / "tf_model.h5").exists() or (directory / "tf_model.h5.index.json").exists():
        cls = getattr(transformers, class_name or "TF" + architecture)
        model, info = cls.from_pretrained(directory, output_loading_info=True)
        values = {"/".join(v.name.split("/")[1:]): v.numpy() for v in model.weights}
        count = model.count_params()
        result = outputs(model(**feed, training=False), cls.__name__)
    else:
        import jax
        from flax.core.frozen_dict import unfreeze
        from flax.serialization import msgpack_restore
        from flax.traverse_util import flatten_dict

        cls = getattr(transformers, class_name or "Flax" + architecture)
        # Without _do_init, from_pretrained loads the file into no randomly initialised model
        # (jax compiles every operation of that initialisation, seconds per class).
        model, params = cls.from_pretrained(directory, _do_init=False)
        # Flax's from_pretrained only logs what it missed: compare the file with the parameters
        # the model has, transformers' own `params_shape_tree` (its initialisation, traced).
        files = sorted(directory.glob("flax_model*.msgpack"))  # the file, or its shards
        stored = {key for file in files for key in flat(msgpack_restore(file.read_bytes()))}
        expected = set(flatten_dict(unfreeze(model.params_shape_tree), sep="/"))
        info = {"missing_keys": expected - stored, "unexpected_keys": stored - expected}
        values = flat(params)
        count = sum(p.size for p in jax.tree_util.tree_leaves(params))
        result = outputs(model(**feed, params=model.to_fp32(params)), cls.__name__)
    np.savez(out_path, **{f"param:{k}": v for k, v in values.items()}, **result)
    print(json.dumps({"class": cls.__name__, "transformers": transformers.__version__, "parameters": int(count),
                      "missing": sorted(info.get("missing_keys", [])),
                      "unexpected": sorted(info.get("unexpected_keys", []))}))


if __name__ == "__main__":
    arguments = sys.argv[1:]
    for start in range(0, len(arguments), 3):  # one process for many jobs: TF and jax start slowly
        main(*map(Path, arguments[start:start + 3]))
