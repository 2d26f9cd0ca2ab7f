"""Two checkpoints compared by what they compute: the same probe batch through both.

A lossy conversion (float16, bfloat16) changes every tensor a little; whether it matters is a
question about the model's outputs, not its bits. `compare_outputs` runs both checkpoints with one
runtime on the probe batch of `checks.trained` (seeded random token ids, unmasked, token types 0)
and compares their MLM logits [B, S, V], or the encoder's last hidden states [B, S, H] when either
side has no MLM head.

Shape legend: B probe batch, S probe length, V vocab size, H hidden size.
"""

from __future__ import annotations

import numpy as np

from ..errors import BadInput
from ..tree import ParameterTree
from .arrays import json_number
from .trained import build_model, probe_ids, usable_positions

#: Default largest |logit A - logit B| allowed: float32 noise. The same float32 weights run by the
#: NumPy and the torch runtime (other summation orders) differ by 1.2e-5 on MiniLM-L6 (H=384) and
#: 1.4e-6 on fixtures/trained/hf, while a float16 copy of those weights moves the logits by 8e-3 and
#: 2.4e-3, a bfloat16 copy of the fixture by 2e-2. A lossy conversion is accepted by naming its
#: budget with --outputs-atol.
OUTPUTS_ATOL = 1e-4

LOGITS, HIDDEN = "mlm_logits", "sequence_output"


def _outputs(model, ids: np.ndarray, what: str) -> np.ndarray:
    """`what` (LOGITS or HIDDEN) of `model` on `ids` [B, S], unmasked, as float64 NumPy."""
    ones, zeros = np.ones_like(ids), np.zeros_like(ids)
    values = model.encode(ids, zeros, ones)
    if what == LOGITS:
        values = model.mlm_logits(values)
    if not isinstance(values, np.ndarray):  # a torch tensor
        values = values.detach().cpu().float().numpy()
    return values.astype(np.float64)


def compare_outputs(tree_a: ParameterTree, tree_b: ParameterTree, *, runtime: str = "numpy",
                    atol: float = OUTPUTS_ATOL) -> dict:
    """Run A and B on the probe batch and compare; a JSON-ready report.

    Keys: compared (`mlm_logits` | `sequence_output`), runtime, positions, atol, max_abs_diff
    (largest |A - B|, "nan"/"inf" when one side is not finite), max_at ([b, s, v] of it),
    top1_agreement (fraction of positions where A and B rank the same token first; None for
    hidden states), top1_a / top1_b (how often each reconstructs the shown token), ok (max_abs_diff
    within atol).

    Raises BadInput when the two cannot take the same batch (vocab sizes differ) or a side cannot
    be run (see `runtime.weights.plan`).
    """
    if tree_a.config.vocab_size != tree_b.config.vocab_size:
        raise BadInput(f"cannot compare outputs: {tree_a.path} has vocab size {tree_a.config.vocab_size}, "
                       f"{tree_b.path} has {tree_b.config.vocab_size}")
    model_a, model_b = build_model(tree_a, runtime), build_model(tree_b, runtime)
    what = LOGITS if model_a.heads.mlm and model_b.heads.mlm else HIDDEN
    positions = min(usable_positions(tree_a.config), usable_positions(tree_b.config))
    ids = probe_ids(tree_a.config.vocab_size, positions)
    a, b = _outputs(model_a, ids, what), _outputs(model_b, ids, what)
    difference = np.abs(a - b)
    # A NaN on one side only is an infinite difference; NaN on both sides at one place is agreement.
    difference[np.isnan(a) != np.isnan(b)] = np.inf
    difference[np.isnan(a) & np.isnan(b)] = 0.0
    at = np.unravel_index(int(np.argmax(difference)), difference.shape)
    largest = float(difference[at])
    report = {
        "compared": what,
        "runtime": runtime,
        "positions": int(ids.size),
        "atol": atol,
        "max_abs_diff": json_number(largest),
        "max_at": [int(i) for i in at],
        "top1_agreement": None,
        "top1_a": None,
        "top1_b": None,
        "ok": bool(largest <= atol),
    }
    if what == LOGITS:
        first_a, first_b = a.argmax(axis=-1), b.argmax(axis=-1)
        report.update(top1_agreement=float(np.mean(first_a == first_b)), top1_a=float(np.mean(first_a == ids)),
                      top1_b=float(np.mean(first_b == ids)))
    return report
