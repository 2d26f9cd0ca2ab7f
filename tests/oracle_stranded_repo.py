"""Build two stranded XLM-R repositories with transformers 4.x, as a TF-only and a Flax-only
publisher left them: `config.json`, the tokenizer files `save_pretrained` writes for
XLMRobertaTokenizerFast (`sentencepiece.bpe.model`, `tokenizer.json`, `tokenizer_config.json`,
`special_tokens_map.json`) and the weights. Runs in the oracle environment (.cache/oracle-venv),
as a job of the tests' oracle process (tests/oracle_process.py) for tests/test_recover_tf_flax.py,
or on its own:

    python tests/oracle_stranded_repo.py SENTENCEPIECE_MODEL TOKENIZER_JSON OUT_DIRECTORY

The oracle environment has no `sentencepiece`, so its fast tokenizer cannot convert the
SentencePiece model itself: it loads TOKENIZER_JSON (that model as transformers 5 converts it),
its `save_pretrained` writes `tokenizer.json`, `tokenizer_config.json` and
`special_tokens_map.json`, and the SentencePiece model, which 4.57 saves beside them where
`sentencepiece` is installed, is copied in.

writes OUT_DIRECTORY/xlmr-tf, OUT_DIRECTORY/xlmr-flax, and beside them `expected.npz`: the ids
4.57's tokenizer gives `TEXT` (`input_ids`) and each model's MLM logits on them (`tf`, `flax`).
Every weight is drawn at random from a fixed seed (a trained head's values are not an
initializer's, which `verify` would rightly call untrained).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import shutil  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import transformers  # noqa: E402

TEXT = "Hello world, this is a <mask> test."


def randomized(params, rng):
    """Every Flax array drawn anew, each dict keeping its key order."""
    if hasattr(params, "items"):
        return {key: randomized(value, rng) for key, value in params.items()}
    return (rng.standard_normal(params.shape) * 0.5).astype(params.dtype)


def main(spm: Path, tokenizer_json: Path, out: Path) -> None:
    tokenizer = transformers.XLMRobertaTokenizerFast(vocab_file=str(spm), tokenizer_file=str(tokenizer_json))
    config = transformers.XLMRobertaConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=2,
                                           num_attention_heads=2, intermediate_size=19, max_position_embeddings=40,
                                           type_vocab_size=1, pad_token_id=1, layer_norm_eps=1e-5)
    ids = tokenizer(TEXT, return_tensors="np")["input_ids"].astype(np.int32)
    rng = np.random.default_rng(27)
    tf_model = transformers.TFXLMRobertaForMaskedLM(config)
    tf_model(tf_model.dummy_inputs)
    for variable in tf_model.weights:
        variable.assign((rng.standard_normal(variable.shape) * 0.5).astype(variable.dtype.as_numpy_dtype))
    # Not initialised (`_do_init=False`): its parameters' shapes come from transformers' own
    # initialisation, traced, not run op by op (seconds of jax compiling) before being redrawn.
    flax_model = transformers.FlaxXLMRobertaForMaskedLM(config, _do_init=False)
    flax_params = randomized(flax_model.params_shape_tree, rng)
    expected = {"input_ids": ids, "tf": np.asarray(tf_model(input_ids=ids, training=False).logits),
                "flax": np.asarray(flax_model(input_ids=ids, params=flax_params).logits)}
    tf_model.save_pretrained(out / "xlmr-tf")
    flax_model.save_pretrained(out / "xlmr-flax", params=flax_params)
    for name in ("xlmr-tf", "xlmr-flax"):
        tokenizer.save_pretrained(out / name)
        shutil.copyfile(spm, out / name / "sentencepiece.bpe.model")
    np.savez(out / "expected.npz", **expected)


if __name__ == "__main__":
    main(*map(Path, sys.argv[1:4]))
