"""The MLM probe's figures: its context gain on real trained heads, on the same models with their
head re-initialized or perturbed, and on the fixtures' heads (docs/probe.md).

    python -m benchmarks.probe_figures [--seeds N] [--batch B --length S --rounds R] [--timing]

Models: the fixtures' heads (fixtures/trained), and the real trained masked LMs that PyPI wheels
ship, extracted by `make .cache/probe-models` (absent ones are listed as such):

  rxnfp       rxnfp 0.1.0, models/transformers/bert_pretrained: BERT, reaction SMILES,
              V=591, H=256, 12 layers
  rxnmapper   rxnmapper 0.4.3, albert_heads_8_uspto_all_1310k: ALBERT, reaction SMILES,
              V=591, E=128, H=256, 12 layers sharing one
  antiberty   antiberty 0.1.3, AntiBERTy_md_smooth: BERT, antibody protein sequences,
              V=25, H=512, 8 layers

Each real model is measured as it ships (`trained`), with its head re-initialized as
transformers' `_init_weights` does (`re-initialized`: transform kernel and an untied decoder
N(0, 0.02), biases zero, LayerNorm gamma one and beta zero), with that fresh head's biases and
LayerNorm then moved by N(0, 0.02) noise (`perturbed`: the values show no sign of fresh
initialization), and with a fresh head whose output bias alone is large (`bias only`: +8, +6, +5
on three tokens, a context-free predictor that is sure of itself). Every head but the shipped one
is drawn with --seeds seeds, and every trained head is probed from --seeds starting samples
(verify's, PROBE_SEED, and the next ones); the table gives the smallest and largest gain.

Prints a Markdown table on stdout; --timing adds the probe's CPU time on a bert-base-size input
(benchmarks.inputs, random weights).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np

from bertconv import formats
from bertconv.checks import trained
from bertconv.dtypes import FLOAT32
from bertconv.tensor import ArrayTensor
from bertconv.tree import ParameterTree, role_of

ROOT = Path(__file__).resolve().parents[1]
PROBE_MODELS = ROOT / ".cache" / "probe-models"
TRAINED_FIXTURES = ROOT / "fixtures" / "trained"

#: name -> (directory under .cache/probe-models, what it is).
REAL_MODELS = {
    "rxnfp": ("rxnfp/rxnfp/models/transformers/bert_pretrained", "BERT, reaction SMILES, V=591, H=256, L=12"),
    "rxnmapper": ("rxnmapper/rxnmapper/models/transformers/albert_heads_8_uspto_all_1310k",
                  "ALBERT, reaction SMILES, V=591, E=128, H=256, L=12 (shared)"),
    "antiberty": ("antiberty/antiberty/trained_models/AntiBERTy_md_smooth",
                  "BERT, antibody sequences, V=25, H=512, L=8"),
}
#: fixture -> (what its head is, whether it is trained).
FIXTURES = {
    "hf": ("trained 400 steps (transformers), V=83, H=40, L=2", True),
    "tf": ("the same weights as hf/, a Google checkpoint", True),
    "hf_untied": ("trained 400 steps, untied decoder", True),
    "bert4keras": ("trained 400 steps (bert4keras), V=71", True),
    "encoder_then_mlm": ("fresh head (BertForMaskedLM.from_pretrained of an encoder)", False),
    "perturbed_fresh": ("fresh head, biases and LayerNorm moved by N(0, 0.02)", False),
    "copied_head": ("the MLM head of another trained model", False),
}
INIT_STD = 0.02
BIAS_ONLY = (8.0, 6.0, 5.0)


def _with_arrays(tree: ParameterTree, arrays: dict[str, np.ndarray]) -> ParameterTree:
    params = dict(tree.params)
    for name, array in arrays.items():
        params[name] = replace(params[name], tensor=ArrayTensor(array.astype(np.float32), FLOAT32), shared_with=None)
    return replace(tree, params=params)


def reinitialized(tree: ParameterTree, seed: int, *, perturb: bool = False) -> ParameterTree:
    """`tree` with its MLM head as transformers' `_init_weights` makes one (kernels and an untied
    decoder N(0, 0.02), biases 0, LayerNorm 1 and 0); with `perturb`, biases and LayerNorm then
    moved by N(0, 0.02)."""
    rng = np.random.default_rng(seed)
    fresh = {}
    for name, param in tree.params.items():
        if role_of(name).head != "mlm":
            continue
        shape = param.tensor.shape
        random = name.endswith(".kernel") or name == "mlm.decoder"
        if random:
            fresh[name] = rng.normal(0.0, INIT_STD, shape)
        else:
            fresh[name] = np.ones(shape) if name.endswith(".gamma") else np.zeros(shape)
            if perturb:
                fresh[name] = fresh[name] + rng.normal(0.0, INIT_STD, shape)
    return _with_arrays(tree, fresh)


def bias_only(tree: ParameterTree, seed: int) -> ParameterTree:
    """A fresh head (seeded) whose output bias puts BIAS_ONLY on three tokens: a context-free guess."""
    fresh = reinitialized(tree, seed)
    bias = np.zeros(tree["mlm.output_bias"].tensor.shape)
    tokens = np.random.default_rng(seed).choice(bias.size, size=len(BIAS_ONLY), replace=False)
    bias[tokens] = BIAS_ONLY
    arrays = {"mlm.output_bias": bias}
    if "mlm.decoder_bias" in fresh.params:
        arrays["mlm.decoder_bias"] = bias
    return _with_arrays(fresh, arrays)


@dataclass(frozen=True)
class Row:
    model: str
    head: str
    gains: list[float]
    trained: bool  # what the head is

    def cell(self) -> str:
        low, high = min(self.gains), max(self.gains)
        return f"{low:+.2f}" if len(self.gains) == 1 else f"{low:+.2f} to {high:+.2f}"


Probe = Callable[[ParameterTree, int], trained.ProbeResult]


def measure(tree: ParameterTree, probe: Probe, seed: int = trained.PROBE_SEED) -> float:
    result = probe(tree, seed)
    return result.gain if result.finite else float("nan")


def sample_seeds(tree: ParameterTree, probe: Probe, seeds: int) -> list[float]:
    """The gain with verify's sample (PROBE_SEED) and seeds - 1 other starting samples."""
    return [measure(tree, probe, trained.PROBE_SEED + k) for k in range(seeds)]


def rows(seeds: int, probe: Probe) -> list[Row]:
    out = []
    for name, (what, is_trained) in FIXTURES.items():
        tree = formats.read(TRAINED_FIXTURES / name)
        out.append(Row(f"fixtures/trained/{name}: {what}", "as stored", sample_seeds(tree, probe, seeds), is_trained))
    for name, (where, what) in REAL_MODELS.items():
        path = PROBE_MODELS / where
        if not path.exists():
            print(f"{name}: {path} absent (make .cache/probe-models)", file=sys.stderr)
            continue
        tree = formats.read(path)
        label = f"{name}: {what}"
        out.append(Row(label, "trained", sample_seeds(tree, probe, seeds), True))
        heads = {"re-initialized": lambda s: reinitialized(tree, s), "perturbed": lambda s: reinitialized(tree, s, perturb=True),
                 "bias only": lambda s: bias_only(tree, s)}
        for head, make in heads.items():
            out.append(Row(label, head, [measure(make(100 + seed), probe) for seed in range(seeds)], False))
    return out


def table(measured: list[Row], seeds: int) -> str:
    lines = [f"| model | head | context gain (nats), {seeds} seeds | verdict |", "| --- | --- | --- | --- |"]
    for row in measured:
        verdict = "trained" if min(row.gains) >= trained.PROBE_GAIN_TRAINED else (
            "untrained" if max(row.gains) < trained.PROBE_GAIN_TRAINED else "mixed")
        lines.append(f"| {row.model} | {row.head} "
                     f"| {row.cell()} | {verdict} |")
    good = [g for row in measured if row.trained for g in row.gains]
    bad = [g for row in measured if not row.trained for g in row.gains]
    lines.append("")
    lines.append(f"Trained heads: smallest gain {min(good):+.2f}. Other heads: largest gain {max(bad):+.2f}. "
                 f"Threshold: {trained.PROBE_GAIN_TRAINED:+.2f}.")
    return "\n".join(lines)


def timing(probe: Probe) -> str:
    from . import inputs

    path = inputs.ensure("base", "hf-safetensors", log=lambda message: print(message, file=sys.stderr))
    tree = formats.read(path)
    probe(tree, trained.PROBE_SEED)  # warm: the page cache and BLAS
    start = time.process_time()
    probe(tree, trained.PROBE_SEED)
    return f"bert-base size (V=30522, H=768, L=12, random weights): {time.process_time() - start:.2f} s of CPU"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.probe_figures", description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="heads drawn per kind (default 5)")
    parser.add_argument("--batch", type=int, default=trained.SAMPLE_BATCH)
    parser.add_argument("--length", type=int, default=trained.SAMPLE_LENGTH)
    parser.add_argument("--rounds", type=int, default=trained.FILL_ROUNDS)
    parser.add_argument("--timing", action="store_true", help="also time the probe at bert-base size")
    args = parser.parse_args(argv)

    def probe(tree: ParameterTree, seed: int) -> trained.ProbeResult:
        return trained.probe(tree, batch=args.batch, length=args.length, rounds=args.rounds, seed=seed)

    print(f"Sample: {args.batch} x {args.length} tokens, {args.rounds} refilling rounds.\n")
    print(table(rows(args.seeds, probe), args.seeds))
    if args.timing:
        print("\n" + timing(probe))
    return 0


if __name__ == "__main__":
    sys.exit(main())
