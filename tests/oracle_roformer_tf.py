"""Load a TF1 RoFormer checkpoint as transformers' conversion script does and dump its MLM logits.

Runs in the oracle environment (.cache/oracle-venv: transformers 4.57.6 with torch and TensorFlow),
as a job of the tests' oracle process
(tests/oracle_process.py) for tests/test_positionless_tf.py, or on its own:

    python tests/oracle_roformer_tf.py PREFIX CONFIG INPUTS.npz OUT.npz

What `convert_roformer_original_tf_checkpoint_to_pytorch.py` does (the script is not in the
wheel; its three steps are): `RoFormerConfig.from_json_file(CONFIG)`, `RoFormerForMaskedLM(config)`,
`load_tf_weights_in_roformer(model, config, PREFIX)`. OUT.npz gets `logits` [B, S, V] in float32 on
INPUTS.npz's `input_ids`, `token_type_ids` and `attention_mask`. A checkpoint it cannot load ends
the process with its exception.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import sys  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers.models.roformer.modeling_roformer import load_tf_weights_in_roformer  # noqa: E402


def main(prefix: str, config_path: str, inputs_path: str, out_path: str) -> None:
    config = transformers.RoFormerConfig.from_json_file(config_path)
    model = load_tf_weights_in_roformer(transformers.RoFormerForMaskedLM(config), config, prefix).eval()
    feed = {key: torch.tensor(value) for key, value in np.load(inputs_path).items()}
    with torch.no_grad():
        logits = model(**feed).logits
    np.savez(out_path, logits=logits.numpy().astype(np.float32))


if __name__ == "__main__":
    main(*sys.argv[1:])
