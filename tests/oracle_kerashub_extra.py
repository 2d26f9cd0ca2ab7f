"""keras-hub 0.32 for tests/test_keras_hub_deberta.py and test_keras_hub_shards.py: DeBERTa-v3's
relative-position rows, then the presets of tests/oracle_kerashub.py, in one process (TensorFlow
starts slowly).

    python tests/oracle_kerashub_extra.py BUCKETS.npz [DIRECTORY[@DTYPE] INPUTS.npz OUT.npz ...]

A DIRECTORY@DTYPE is loaded with the dtype policy DTYPE in place of its config's (`from_preset(
dtype=...)`: a bfloat16 preset computed in float32). BUCKETS.npz gets, for each (bucket_size, max_sequence_length) of `BUCKET_CASES`, the row
`DisentangledSelfAttention` reads for query l and key r in its c2p term, [S, S] with S =
max_sequence_length, under `<bucket_size>_<max_sequence_length>`.
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from keras import ops  # noqa: E402
from keras_hub.src.models.deberta_v3.disentangled_self_attention import DisentangledSelfAttention  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from oracle_kerashub import main  # noqa: E402

#: DeBERTa-v3's own (256, 512), and settings where keras-hub rounds a far bucket apart.
BUCKET_CASES = ((256, 512), (128, 256), (64, 512), (4, 16))


def bucket_rows(bucket_size: int, length: int) -> np.ndarray:
    layer = DisentangledSelfAttention(num_heads=1, hidden_dim=8, max_position_embeddings=length,
                                      bucket_size=bucket_size)
    relative = layer._get_rel_pos(length)[0, 0]
    return np.asarray(ops.clip(relative + bucket_size, 0, 2 * bucket_size - 1))


if __name__ == "__main__":
    np.savez(sys.argv[1], **{f"{b}_{s}": bucket_rows(b, s) for b, s in BUCKET_CASES})
    arguments = sys.argv[2:]
    for start in range(0, len(arguments), 3):
        directory, _, dtype = arguments[start].partition("@")
        main(Path(directory), *map(Path, arguments[start + 1:start + 3]), dtype=dtype or None)
