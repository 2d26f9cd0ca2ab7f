"""Runtime benchmark: one pre-training loss step of bertconv's NumPy and torch runtimes, next to
transformers' BertForPreTraining computing the same loss.

    python -m benchmarks.runtime [--reps N] [--quick]

The model is bert-base size (L12 H768 A12 I3072 V30522), random weights from transformers'
own initializer, saved with `save_pretrained` (model.safetensors) into a temporary directory
and loaded by bertconv from there. The batch is 8 sequences x 128 tokens with 20 masked
positions each and NSP labels. Each step is timed in-process (models already loaded), after one
warm-up run; the median of the repetitions is reported.

What each row computes:
  bertconv numpy   NumpyBert.pretraining_loss: encoder, gather at the 20 positions, MLM head
                   there only (Google's get_masked_lm_output), NSP loss
  bertconv torch   TorchBert.pretraining_loss: the same, in torch
  transformers     BertForPreTraining(..., labels, next_sentence_label) in eval mode, no grad:
                   the MLM head at all 128 positions, cross-entropy over the 20 labelled ones
The losses agree (all weights are 1, so Google's sum / (20 x 8 + 1e-5) is the mean over the
labelled positions to 6e-8 relative); the table prints them.

Prints a Markdown table on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

BATCH = 8
SEQ_LEN = 128
MASKED_PER_SEQUENCE = 20
DEFAULT_REPS = 5
SEED = 0
#: bert-base, as transformers' BertConfig defaults.
BERT_BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, max_position_embeddings=512, type_vocab_size=2)
#: transformers' label for a position that takes no part in the MLM loss.
IGNORE_INDEX = -100


@dataclass(frozen=True)
class Row:
    name: str
    median_s: float
    times_s: list[float]
    loss: float


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build_model(directory: Path) -> Path:
    """A random bert-base BertForPreTraining saved as model.safetensors in `directory`."""
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    torch.manual_seed(SEED)
    model = transformers.BertForPreTraining(transformers.BertConfig(**BERT_BASE))
    model.save_pretrained(directory)
    return directory


def make_batch(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """ids, token types (two segments), full mask, 20 sorted masked positions per sequence (never
    [CLS] at 0), their original ids as labels, unit weights, NSP labels."""
    ids = rng.integers(1000, BERT_BASE["vocab_size"], (BATCH, SEQ_LEN))
    types = np.zeros((BATCH, SEQ_LEN), dtype=np.int64)
    types[:, SEQ_LEN // 2:] = 1
    positions = np.sort(np.stack([rng.choice(np.arange(1, SEQ_LEN), MASKED_PER_SEQUENCE, replace=False)
                                  for _ in range(BATCH)]), axis=1)
    return {
        "input_ids": ids,
        "token_type_ids": types,
        "attention_mask": np.ones((BATCH, SEQ_LEN), dtype=np.int64),
        "masked_lm_positions": positions,
        "masked_lm_ids": np.take_along_axis(ids, positions, axis=1),
        "masked_lm_weights": np.ones((BATCH, MASKED_PER_SEQUENCE), dtype=np.float32),
        "next_sentence_labels": rng.integers(0, 2, BATCH),
    }


def time_step(step: Callable[[], float], reps: int) -> tuple[list[float], float]:
    """(seconds per repetition, the loss) after one untimed warm-up call."""
    loss = step()
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return times, loss


def run(reps: int) -> list[Row]:
    import torch
    import transformers

    from bertconv import load
    from bertconv.runtime import NumpyBert, TorchBert

    batch = make_batch(np.random.default_rng(SEED))
    args = [batch[k] for k in ("input_ids", "token_type_ids", "attention_mask", "masked_lm_positions",
                               "masked_lm_ids", "masked_lm_weights", "next_sentence_labels")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bertconv-runtime-bench-") as directory:
        log("building a random bert-base BertForPreTraining ...")
        path = build_model(Path(directory))
        tree = load(path)

        log("bertconv numpy ...")
        numpy_model = NumpyBert(tree)
        times, loss = time_step(lambda: float(numpy_model.pretraining_loss(*args).total), reps)
        rows.append(Row("bertconv numpy", statistics.median(times), times, loss))
        del numpy_model

        log("bertconv torch ...")
        torch_model = TorchBert(tree)
        with torch.inference_mode():
            times, loss = time_step(lambda: float(torch_model.pretraining_loss(*args).total), reps)
        rows.append(Row("bertconv torch", statistics.median(times), times, loss))
        del torch_model

        log("transformers BertForPreTraining ...")
        reference = transformers.BertForPreTraining.from_pretrained(path).eval()
        labels = np.full((BATCH, SEQ_LEN), IGNORE_INDEX, dtype=np.int64)
        np.put_along_axis(labels, batch["masked_lm_positions"], batch["masked_lm_ids"], axis=1)
        inputs = {k: torch.from_numpy(batch[k]) for k in ("input_ids", "token_type_ids", "attention_mask")}
        labels_t, nsp_t = torch.from_numpy(labels), torch.from_numpy(batch["next_sentence_labels"])

        def reference_step() -> float:
            return float(reference(**inputs, labels=labels_t, next_sentence_label=nsp_t).loss)

        with torch.inference_mode():
            times, loss = time_step(reference_step, reps)
        rows.append(Row("transformers BertForPreTraining", statistics.median(times), times, loss))
    return rows


def render(rows: list[Row], reps: int) -> str:
    import torch
    import transformers

    reference = rows[-1]
    lines = [
        f"Pre-training loss step (MLM + NSP), bert-base random weights, batch {BATCH} x {SEQ_LEN} tokens, "
        f"{MASKED_PER_SEQUENCE} masked positions each; median of {reps} after a warm-up.",
        "",
        "| runtime | median s | transformers / this | loss |",
        "|---|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(f"| {row.name} | {row.median_s:.3f} | {reference.median_s / row.median_s:.2f}x | {row.loss:.6f} |")
    lines += [
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}; "
        f"Python {platform.python_version()}, NumPy {np.__version__}, torch {torch.__version__}, "
        f"transformers {transformers.__version__}.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.runtime", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=None, help=f"timed repetitions (default {DEFAULT_REPS})")
    parser.add_argument("--quick", action="store_true", help="1 timed repetition unless --reps says otherwise")
    args = parser.parse_args(argv)
    reps = args.reps or (1 if args.quick else DEFAULT_REPS)
    if reps < 1:
        parser.error("--reps must be at least 1")
    rows = run(reps)
    print(render(rows, reps))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
