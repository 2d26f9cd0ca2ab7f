"""What keras-hub's `DebertaV3Backbone` can hold of a DeBERTa-v2 model, and where its relative
positions differ from transformers' (keras_hub/src/models/deberta_v3/disentangled_self_attention.py).

keras-hub computes the disentangled attention with its settings fixed (`table.py` states them):
a model computed otherwise has tensors it has no place for (its own position projections, an
absolute position table, relative embeddings without their LayerNorm) or lacks some it reads,
and is refused by the field that says so. Unbucketed relative positions (`position_buckets` 0)
are refused too: keras-hub buckets always, over 2 x `bucket_size` rows.

Its log buckets are transformers' formula in another float32 order: ceil(log(|d| / m) (m - 1) /
log((P - 1) / m)) where transformers divides before it multiplies. For some (buckets, P) the two
round apart at the farthest distances (measured: 128 buckets with P = 256 at d = -255, 64 with
P = 512 at -511; none at DeBERTa-v3's 256 with 512), which `caveats` names.
"""

from __future__ import annotations


from ...errors import bad_input
from ...lazy import lazy_module
from ...tree import ParameterTree
from .table import KerasHubFamily

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    import numpy as np
else:  # imported on first use: reading a preset (the format module imports this one) needs no NumPy
    np = lazy_module("numpy")


def refuse_unrepresented(tree: ParameterTree, family: KerasHubFamily) -> None:
    """Exit 2 naming the first field of `tree` whose value keras-hub's layout cannot hold."""
    config = tree.config
    for name in family.required:
        if getattr(config, name) != family.stated[name]:
            raise bad_input(tree.path, f"{name} is {getattr(config, name)!r}; keras-hub's {family.backbone} computes "
                                       f"with {family.stated[name]!r} and has no place for the tensors of another "
                                       f"value; nothing was written")
    if "position_buckets" in family.config_keys.values() and config.position_buckets <= 0:
        raise bad_input(tree.path, f"position_buckets is {config.position_buckets} (relative positions unbucketed, "
                                   f"span max_relative_positions {config.max_relative_positions}); keras-hub's "
                                   f"{family.backbone} buckets them always (bucket_size); nothing was written")


def keras_hub_index(seq_len: int, buckets: int, max_position: int) -> np.ndarray:
    """int64 [S, S]: the relative-embedding row keras-hub's c2p term reads for query l, key r."""
    distance = np.arange(seq_len)[:, None] - np.arange(seq_len)[None, :]
    mid = buckets // 2
    magnitude = np.where((distance < mid) & (distance > -mid), mid - 1, np.abs(distance))
    numerator = np.log(magnitude.astype(np.float32) / np.float32(mid)) * np.float32(mid - 1)
    denominator = np.log(np.float32(max_position - 1) / np.float32(mid))
    logarithmic = np.ceil(numerator / denominator).astype(np.int64) + mid
    bucket = np.where(magnitude <= mid, distance, logarithmic * np.sign(distance))
    return np.clip(bucket + buckets, 0, 2 * buckets - 1)


def caveats(tree: ParameterTree) -> list[str]:
    """The distances (up to max_position_embeddings - 1) whose relative-embedding row keras-hub
    rounds otherwise than transformers (see the module's docstring); none for most models."""
    config = tree.config
    if not config.relative_attention or config.position_buckets <= 0:
        return []
    from ...runtime.disentangled import relative_index  # noqa: PLC0415 (imports NumPy and the runtime: DeBERTa's only)

    length = config.max_position_embeddings
    ours = relative_index(config, length)
    theirs = keras_hub_index(length, config.position_buckets, length)  # the preset's max_sequence_length
    differ = sorted({int(d) for d in (np.arange(length)[:, None] - np.arange(length)[None, :])[ours != theirs]})
    if not differ:
        return []
    return [f"keras-hub rounds the log bucket of relative distance {', '.join(map(str, differ[:6]))} otherwise "
            f"than transformers (position_buckets {config.position_buckets}, max_relative_positions "
            f"{config.max_relative_positions}): a query and key that far apart read another relative-embedding row"]
