"""Benchmark inputs: BERT checkpoints with random weights, built once and cached.

Every format holds the same values (one seeded NumPy generator per size), written by the library
that owns the format, not by bertconv (the code under test):

  <size>/hf-safetensors/   model.safetensors + config.json    safetensors.numpy.save_file
  <size>/hf-bin/           pytorch_model.bin + config.json    torch.save (zip format)
  <size>/tf/               bert_model.ckpt.{index,data-*}     tf.raw_ops.SaveV2 (TensorFlow)
                           + bert_config.json, checkpoint
  <size>/bert4keras/       model.h5 + bert_config.json        bert4keras model.save_weights
  <size>/keras-object/     bert_model.ckpt.* (object-based, Adam state after one training step;
                           bert4keras' pre-training layout)    tf-keras train_model.save_weights
  <size>/hf-tf/            tf_model.h5 + config.json          bertconv convert --to hf-tf
  <size>/hf-flax/          flax_model.msgpack + config.json   bertconv convert --to hf-flax
  <size>/keras-hub/        a preset: model.weights.h5,        bertconv convert --to keras-hub
                           task.weights.h5, config.json, ...

The last three are the exception: they are written by bertconv itself from the hf-safetensors
input (transformers' TF and Flax classes and keras-hub need environments of their own), so their
rows measure reading those formats, not that bertconv writes them as the libraries do. TF2 Model
Garden inputs are not built: writing one needs the TF2 venv.

Sizes: `base` (L=12, H=768, V=30522: ~440 MB in fp32), `large` (L=24, H=1024, V=30522:
~1.34 GB), `xlmr` (L=12, H=768, V=250002, XLM-R's size: ~1.1 GB, 732 MiB of it one embedding
table) and `xlm-roberta` (the same sizes as an XLMRobertaForMaskedLM, for its TF and Flax files).
The cache lives in $BERTCONV_BENCH_DIR (default `.cache/bench` under the project root); each input directory is built under a temporary name and renamed when complete, so an interrupted
build is redone, never half-used.

Run as `python -m benchmarks.inputs [--size base|large] [--kind KIND]` to build ahead of time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = Path(__file__).resolve().parent / "reference"
sys.path.insert(0, str(REFERENCE))
import bert_names  # noqa: E402  (benchmarks/reference/bert_names.py)

_COMMON = dict(attention_probs_dropout_prob=0.1, hidden_act="gelu", hidden_dropout_prob=0.1,
               initializer_range=0.02, max_position_embeddings=512, type_vocab_size=2, vocab_size=30522)
CONFIGS = {
    "base": dict(_COMMON, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
    "large": dict(_COMMON, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096),
    # The scale row: XLM-R's size (a 250,002-token vocabulary, one 732 MiB embedding table).
    "xlmr": dict(_COMMON, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                 vocab_size=250002),
    # Issue 27's row: XLM-RoBERTa-base (XLMRobertaForMaskedLM: one token type, positions past the
    # padding index), read from tf_model.h5 and flax_model.msgpack.
    "xlm-roberta": dict(_COMMON, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                         intermediate_size=3072, vocab_size=250002, type_vocab_size=1, max_position_embeddings=514),
    # A few-KB model for the smoke test of the harness itself.
    "tiny": dict(_COMMON, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                 max_position_embeddings=40, vocab_size=99),
}
SEEDS = {"base": 1, "large": 2, "tiny": 3, "xlmr": 4, "xlm-roberta": 5}
#: Sizes whose model is an XLM-RoBERTa: BERT's values under XLMRobertaForMaskedLM's names
#: (RoBERTa's: `roberta_weights`).
ROBERTA_SIZES = ("xlm-roberta",)
KINDS = ("hf-safetensors", "hf-bin", "tf", "bert4keras", "keras-object", "hf-tf", "hf-flax", "keras-hub")
#: What a benchmark passes to bertconv / a reference tool for each kind.
ENTRY = {
    "hf-safetensors": "model.safetensors",
    "hf-bin": "pytorch_model.bin",
    "tf": "bert_model.ckpt",
    "bert4keras": "model.h5",
    "keras-object": "bert_model.ckpt",
    "hf-tf": "tf_model.h5",
    "hf-flax": "flax_model.msgpack",
    "keras-hub": "model.weights.h5",
}
#: What a conversion from or to a keras-hub preset accepts losing (`--accept-loss`): keras-hub
#: computes BERT's encoder with the tanh GELU (transformers: erf) and its MLM head with erf GELU
#: and epsilon 1e-5 (transformers: the encoder's); its BertMaskedLM has no next-sentence head.
KERAS_HUB_LOSS = ("hidden_act", "mlm_hidden_act", "mlm_layer_norm_eps", "nsp")
COMPLETE_MARK = ".complete"
INIT_STD = 0.02
#: Oracle libraries need these before TensorFlow / Keras are imported.
ORACLE_ENV = {"TF_KERAS": "1", "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
              "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "TOKENIZERS_PARALLELISM": "false"}


def bench_dir() -> Path:
    return Path(os.environ.get("BERTCONV_BENCH_DIR") or ROOT / ".cache" / "bench").resolve()


def input_dir(size: str, kind: str) -> Path:
    return bench_dir() / size / kind


def entry_path(size: str, kind: str) -> Path:
    """The path a command is given: the weights file, or the TF bundle prefix."""
    return input_dir(size, kind) / ENTRY[kind]


def data_files(size: str, kind: str) -> list[Path]:
    """The files holding the tensors (what `cp` copies in the physical-limit rows)."""
    directory = input_dir(size, kind)
    if kind in ("tf", "keras-object"):
        return sorted(directory.glob("bert_model.ckpt.data-*")) + [directory / "bert_model.ckpt.index"]
    if kind == "keras-hub":
        return [directory / ENTRY[kind], directory / "task.weights.h5"]
    return [directory / ENTRY[kind]]


def accept_loss_flags(*kinds: str) -> list[str]:
    """The `--accept-loss` flags of a conversion between these kinds (`KERAS_HUB_LOSS`)."""
    return [flag for field in KERAS_HUB_LOSS for flag in ("--accept-loss", field)] if "keras-hub" in kinds else []


def oracle_env() -> dict[str, str]:
    """The environment every measured command runs in: the oracles' settings, and bytecode
    caching on, beside the sources as in any normal install (a session with PYTHONDONTWRITEBYTECODE
    would recompile bertconv's modules from source in every process; a PYTHONPYCACHEPREFIX would
    set aside the bytecode pip compiled, and a fresh one compile torch and transformers anew)."""
    env = {**os.environ, **ORACLE_ENV}
    env.pop("PYTHONPYCACHEPREFIX", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


# --- the values -------------------------------------------------------------------------------

def google_weights(size: str):
    """name -> float32 array in Google's layout, the same values on every call."""
    import numpy as np

    config = CONFIGS[size]
    rng = np.random.default_rng(SEEDS[size])
    weights = {}
    for name, shape in bert_names.google_shapes(config).items():
        array = rng.standard_normal(shape, dtype=np.float32)
        array *= INIT_STD
        weights[name] = array
    return weights


def hf_weights(size: str):
    """name -> contiguous float32 array in Hugging Face's layout."""
    import numpy as np

    out = {}
    for name, array in google_weights(size).items():
        hf_name, transpose = bert_names.google_to_hf(name)
        out[hf_name] = np.ascontiguousarray(array.T) if transpose else array
    return out


# --- the writers (each runs in its own process: `python -m benchmarks.inputs --write KIND`) -----

#: BERT's Hugging Face names -> (XLM-)RobertaForMaskedLM's (None: a tensor it does not have).
_ROBERTA_NAMES = (("bert.pooler.", None), ("cls.seq_relationship.", None), ("bert.", "roberta."),
                  ("cls.predictions.transform.dense.", "lm_head.dense."),
                  ("cls.predictions.transform.LayerNorm.", "lm_head.layer_norm."),
                  ("cls.predictions.bias", "lm_head.bias"))


def roberta_weights(size: str):
    """name -> array of an (XLM-)RobertaForMaskedLM: `hf_weights` renamed, the pooler and NSP head left out."""
    out = {}
    for name, array in hf_weights(size).items():
        prefix, renamed = next(((p, r) for p, r in _ROBERTA_NAMES if name.startswith(p)), (None, None))
        if prefix is None:
            out[name] = array
        elif renamed is not None:
            out[renamed + name[len(prefix):]] = array
    return out


def roberta_config(config: dict) -> dict:
    return {**bert_names.hf_config(config), "model_type": "xlm-roberta", "architectures": ["XLMRobertaForMaskedLM"],
            "layer_norm_eps": 1e-5, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2}


def write_hf_safetensors(size: str, out: Path) -> None:
    from safetensors.numpy import save_file

    roberta = size in ROBERTA_SIZES
    save_file(roberta_weights(size) if roberta else hf_weights(size), str(out / ENTRY["hf-safetensors"]),
              metadata={"format": "pt"})
    _write_json(out / "config.json", (roberta_config if roberta else bert_names.hf_config)(CONFIGS[size]))


def write_hf_bin(size: str, out: Path) -> None:
    import torch

    state = {name: torch.from_numpy(array) for name, array in hf_weights(size).items()}
    torch.save(state, out / ENTRY["hf-bin"])
    _write_json(out / "config.json", bert_names.hf_config(CONFIGS[size]))


def write_tf(size: str, out: Path) -> None:
    import tensorflow as tf

    weights = google_weights(size)
    names = sorted(weights)
    tf.raw_ops.SaveV2(prefix=str(out / ENTRY["tf"]), tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[weights[n] for n in names])
    _write_google_extras(size, out)


def _write_google_extras(size: str, out: Path) -> None:
    _write_json(out / "bert_config.json", bert_names.google_config(CONFIGS[size]))
    (out / "checkpoint").write_text(f'model_checkpoint_path: "{ENTRY["tf"]}"\n'
                                    f'all_model_checkpoint_paths: "{ENTRY["tf"]}"\n')


def write_bert4keras(size: str, out: Path) -> None:
    """bert4keras builds the model, loads the TF input (same values), and saves its own h5."""
    from bert4keras.models import build_transformer_model

    tf_dir = input_dir(size, "tf")
    shutil.copyfile(tf_dir / "bert_config.json", out / "bert_config.json")
    model = build_transformer_model(str(out / "bert_config.json"), str(tf_dir / ENTRY["tf"]),
                                    with_pool=True, with_nsp=True, with_mlm=True)
    model.save_weights(str(out / ENTRY["bert4keras"]))


def write_keras_object(size: str, out: Path) -> None:
    """bert4keras' pre-training layout: the flat `train_model` (BERT + weightless loss layers),
    compiled with Adam, trained one step, saved with `save_weights('bert_model.ckpt')`: a
    TensorFlow object-based checkpoint with the Adam slots (3x the weights)."""
    import numpy as np
    from bert4keras.backend import K, keras
    from bert4keras.models import build_transformer_model

    tf_dir = input_dir(size, "tf")
    shutil.copyfile(tf_dir / "bert_config.json", out / "bert_config.json")
    bert = build_transformer_model(str(out / "bert_config.json"), str(tf_dir / ENTRY["tf"]),
                                   with_mlm="linear", return_keras_model=False)
    proba = bert.model.output
    token_ids = keras.layers.Input(shape=(None,), dtype="float32", name="token_ids")
    is_masked = keras.layers.Input(shape=(None,), dtype="float32", name="is_masked")

    def mlm_loss(inputs):
        y_true, y_pred, mask = inputs
        loss = K.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True)
        return K.sum(loss * mask) / (K.sum(mask) + K.epsilon())

    def mlm_acc(inputs):
        y_true, y_pred, mask = inputs
        y_true = K.cast(y_true, K.floatx())
        acc = keras.metrics.sparse_categorical_accuracy(y_true, y_pred)
        return K.sum(acc * mask) / (K.sum(mask) + K.epsilon())

    loss = keras.layers.Lambda(mlm_loss, name="mlm_loss")([token_ids, proba, is_masked])
    acc = keras.layers.Lambda(mlm_acc, name="mlm_acc")([token_ids, proba, is_masked])
    train_model = keras.models.Model(bert.model.inputs + [token_ids, is_masked], [loss, acc])
    train_model.compile(loss={"mlm_loss": lambda t, p: p, "mlm_acc": lambda t, p: K.stop_gradient(p)},
                        optimizer=keras.optimizers.Adam(1e-5))
    rng = np.random.default_rng(SEEDS[size])
    batch, length = 2, 16
    ids = rng.integers(1, CONFIGS[size]["vocab_size"], (batch, length)).astype("float32")
    segments = np.zeros((batch, length), "float32")
    masked = (rng.random((batch, length)) < 0.15).astype("float32")
    masked[:, 1] = 1
    dummy = np.zeros((batch,), "float32")
    train_model.train_on_batch([ids, segments, ids, masked], [dummy, dummy])
    train_model.save_weights(str(out / ENTRY["keras-object"]))


def write_with_bertconv(target: str):
    """A writer that converts the hf-safetensors input with `bertconv convert --to target`."""

    def write(size: str, out: Path) -> None:
        converted = out / "converted"  # convert refuses an existing destination
        subprocess.run([sys.executable, "-m", "bertconv.cli", "convert", str(entry_path(size, "hf-safetensors")),
                        str(converted), "--to", target, "--quiet", *accept_loss_flags(target)], check=True, cwd=ROOT)
        for path in converted.iterdir():
            path.rename(out / path.name)
        converted.rmdir()

    return write


WRITERS = {
    "hf-safetensors": write_hf_safetensors,
    "hf-bin": write_hf_bin,
    "tf": write_tf,
    "bert4keras": write_bert4keras,
    "keras-object": write_keras_object,
    "hf-tf": write_with_bertconv("hf-tf"),
    "hf-flax": write_with_bertconv("hf-flax"),
    "keras-hub": write_with_bertconv("keras-hub"),
}
#: Inputs built from another input (which must exist first).
DEPENDS = {"bert4keras": "tf", "keras-object": "tf", "hf-tf": "hf-safetensors", "hf-flax": "hf-safetensors",
           "keras-hub": "hf-safetensors"}


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


# --- the cache ----------------------------------------------------------------------------------

#: Words of the fill-mask benchmark's text, in the vocabulary it writes.
FILL_MASK_TEXT = "the capital of france is [MASK] ."
SPECIAL_TOKENS = {0: "[PAD]", 100: "[UNK]", 101: "[CLS]", 102: "[SEP]", 103: "[MASK]"}


def fill_mask_dir(size: str) -> Path:
    """A directory transformers' fill-mask pipeline loads: the hf-safetensors input (linked, not
    copied), its config, and a WordPiece vocab.txt of the model's size (BERT's special-token ids,
    the text's words, single letters and their `##` pieces, then filler tokens)."""
    source = ensure(size, "hf-safetensors", log=lambda message: None)
    directory = bench_dir() / size / "fill-mask"
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("model.safetensors", "config.json"):
        if not (directory / name).exists():
            (directory / name).symlink_to(source / name)
    vocab = directory / "vocab.txt"
    if not vocab.exists():
        size_v = CONFIGS[size]["vocab_size"]
        words = [w for w in FILL_MASK_TEXT.split() if not w.startswith("[")]
        letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
        tokens = [SPECIAL_TOKENS.get(i, f"[unused{i}]") for i in range(104)]
        tokens += list(dict.fromkeys(words + letters + ["##" + c for c in letters]))
        tokens += [f"tok{i}" for i in range(size_v - len(tokens))]
        vocab.write_text("\n".join(tokens) + "\n")
    return directory


def ensure(size: str, kind: str, *, log=print) -> Path:
    """The directory of input `kind` at `size`, built first if the cache lacks it."""
    directory = input_dir(size, kind)
    record = {"config": CONFIGS[size], "seed": SEEDS[size]}
    if not is_complete(directory, record) and kind in DEPENDS:
        ensure(size, DEPENDS[kind], log=log)
    # A process of its own: TensorFlow and torch stay out of the harness, and memory is returned.
    return build_once(directory, [sys.executable, "-m", "benchmarks.inputs", "--write", kind, "--size", size, "--out"],
                      record, what=f"{size} {kind}", log=log)


def is_complete(directory: Path, record: dict) -> bool:
    """Whether `directory` holds a complete build of what `record` describes."""
    mark = directory / COMPLETE_MARK
    return mark.exists() and json.loads(mark.read_text()) == record


def build_once(directory: Path, command: list[str], record: dict, *, what: str, log=print) -> Path:
    """`directory`, built by running `command` with a temporary directory appended (where it
    writes) unless a complete build of `record` (a JSON object: what was built) is there. The
    build is renamed into place when complete and marked with `record`, so an interrupted build
    is redone, never half-used, and a changed `record` rebuilds."""
    if is_complete(directory, record):
        return directory
    partial = directory.with_name(directory.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(directory, ignore_errors=True)
    partial.mkdir(parents=True)
    log(f"building {what} input in {directory} ...")
    started = time.perf_counter()
    subprocess.run([*map(str, command), str(partial)], check=True, cwd=ROOT, env=oracle_env())
    (partial / COMPLETE_MARK).write_text(json.dumps(record) + "\n")
    partial.rename(directory)
    log(f"  built in {time.perf_counter() - started:.1f} s "
        f"({sum(f.stat().st_size for f in directory.iterdir()) / 2**20:.0f} MiB)")
    return directory


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(CONFIGS), action="append")
    parser.add_argument("--kind", choices=KINDS, action="append")
    parser.add_argument("--write", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.write:
        WRITERS[args.write](args.size[0], args.out)
        return
    for size in args.size or ["base", "large"]:
        for kind in args.kind or ["hf-safetensors", "hf-bin", "tf"]:
            print(ensure(size, kind))


if __name__ == "__main__":
    main()
