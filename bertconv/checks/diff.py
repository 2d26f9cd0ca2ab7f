"""Two checkpoints compared in canonical space, tensor by tensor, streaming.

A and B may be in different formats: both are read into canonical trees, so names, layouts
(transposes) and spellings no longer matter, only the canonical parameters. Each tensor pair is
first compared as the bytes its files store, two pairs at a time (`same_bytes`: `memcmp` of
blocks read or windows mapped, without NumPy); a pair that this does not show bit-equal is read
in chunks along one axis (at most `arrays.CHUNK_ELEMENTS` values at a time), in the layout each
file stores it in (a transposed kernel is a strided view of its stored array, see
`stored_view`), and described.
Memory stays bounded by blocks, windows or a chunk, and the largest matrix being transposed: no
whole transpose is ever made.

What counts as a difference:
- a parameter one side has and the other lacks (`only_in_a`, `only_in_b`);
- a shape difference (the values are then not compared);
- values: at `atol == 0` the raw bits must be equal (so -0.0 vs 0.0 and different NaN payloads
  count); with `atol > 0` the largest absolute difference, computed in float64 of the
  float32-widened values, must not exceed `atol` (NaN against NaN counts as equal there, NaN
  against a number as an infinite difference).
- a dtype difference is reported (`dtype_differences`, and `identical` is false) but is not a
  difference by itself: the values are compared after widening both sides to float32, bit for
  bit at the default tolerance. A bfloat16 file and its float32 widening (bert4keras' HDF5 has
  no bfloat16) are equal; a float32 file and its float16 rounding differ unless `atol` allows.

Stored copies (`Role.copy_of`: a tied MLM decoder, the decoder bias) are compared by what they
stand for: a side that does not store the copy stands for it with the tensor it copies (the
decoder *is* the word-embedding table when tied). So a tied copy stored in only one side is not
a difference as long as it equals the other side's table; a decoder that differs from it is.
A copy with nothing to stand for it on the other side (that side has no MLM head) is listed as
only in its side. A RoFormer-v2 norm scale (keras-hub stores one) stands against ones on a side
whose norms have none (bert4keras').

A tensor that cannot be read (a TF checksum mismatch, a truncated file) raises `BadInput` from
its `read()`: for diff that is bad input (exit 2), unlike `verify --deep`, whose job is to find it.

Config fields that decide the computation (`config.COMPUTATION_FIELDS`: sizes, heads,
activation, LayerNorm epsilon, tying) are compared too: the same tensors run with another head
count or activation are another model, so a field that differs is a difference (`ok` false).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from ..dtypes import FLOAT32
from ..families import computation_fields
from ..lazy import lazy_module
from ..records import record
from ..tensor import ArrayTensor, LazyTensor
from ..threads import Workers
from ..tree import Parameter, ParameterTree, model_order_key, role_of
from .arrays import BIT_EXACT, Comparison, compare_arrays, format_value
from .report import checkpoint
from .same_bytes import same_stored_bits

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    import numpy as np
    from ..threads import Task
else:  # imported by the first pair whose bytes do not show it equal (see `same_bytes`)
    np = lazy_module("numpy")

#: Tensor pairs compared at once (`same_bytes`: each thread's memcmp, CRC32C and transposes let go
#: of the GIL), one per core of a small machine.
COMPARING_THREADS = 2


def stored_view(tensor: LazyTensor) -> np.ndarray:
    """`tensor`'s values in its own (canonical) shape, as a view of the array it is stored as
    (`LazyTensor.read_view`): a transposed tensor is the `.T` of its stored array, not its
    `read()`, which copies the whole transpose. A chunk of such a view is a strided slice of the
    stored array, so only the chunk is ever copied.
    """
    return np.asarray(tensor.read_view())  # a plain view: slicing a np.memmap makes a memmap object per chunk


def compare_tensors(a: Parameter, b: Parameter) -> Comparison:
    """Compare two same-shaped parameters in the layouts they are stored in (see `stored_view`,
    `compare_arrays`): positions are canonical, no whole transpose is made."""
    return compare_arrays(stored_view(a.tensor), a.tensor.dtype, stored_view(b.tensor), b.tensor.dtype)


# --- two trees ------------------------------------------------------------------------------


@record
class Stand:
    """The tensor that stands for a canonical name in one tree, and how it was found."""

    param: Parameter
    stored: bool  # False: a copy not stored, stood for by the tensor it copies

    @property
    def label(self) -> str:
        if self.stored:
            return self.param.source
        if self.param.source == _NO_SCALE:
            return _NO_SCALE
        return f"not stored (tied: {self.param.source})"


#: What stands for a RoFormer-v2 norm scale in a tree whose norms have none (bert4keras'): ones.
_NO_SCALE = "not stored (a norm without a scale: ones)"


def stand_in(tree: ParameterTree, name: str) -> Stand | None:
    """The tensor `name` stands for in `tree`: stored, or, for a copy the tree does not store,
    the tensor it copies (when the tree has an MLM head); None otherwise."""
    if name in tree.params:
        return Stand(tree[name], stored=True)
    copy_of = role_of(name).copy_of
    if copy_of and tree.heads.mlm and copy_of in tree.params:
        return Stand(tree[copy_of], stored=False)
    if tree.config.rms_norm and not tree.config.norm_scale and name.endswith(".gamma"):
        ones = ArrayTensor(np.ones(role_of(name).expected_shape(tree.config), np.float32), FLOAT32)
        return Stand(Parameter(name, ones, _NO_SCALE, tree.path), stored=False)
    return None


def _compare_pair(name: str, a: Stand, b: Stand, atol: float, shown_equal: Task) -> dict:
    """The report's entry for a pair: bit-equal where `shown_equal` (`same_stored_bits` on a
    worker) says so, else compared value by value."""
    ta, tb = a.param.tensor, b.param.tensor
    entry = {"name": name, "a": a.label, "b": b.label, "dtype_a": str(ta.dtype), "dtype_b": str(tb.dtype),
             "shape_a": list(ta.shape), "shape_b": list(tb.shape)}
    if tuple(ta.shape) != tuple(tb.shape):
        return {**entry, "compared": False, "bit_equal": False, "max_abs_diff": None, "max_at": None,
                "first_difference": None, "within_tolerance": False}
    comparison = Comparison() if shown_equal.result() else compare_tensors(a.param, b.param)
    return {**entry, "compared": True, **comparison.as_dict(), "within_tolerance": comparison.within(atol)}


def _describe(entry: dict, atol: float) -> str:
    """One sentence naming a tensor that differs beyond `atol`, and how."""
    sources = entry["a"] if entry["a"] == entry["b"] else f"A: {entry['a']}, B: {entry['b']}"
    where = f"{entry['name']} ({sources})"
    if entry["shape_a"] != entry["shape_b"]:
        return f"{where}: shape {entry['shape_a']} in A, {entry['shape_b']} in B"
    parts = []
    if entry["dtype_a"] != entry["dtype_b"]:
        parts.append(f"dtype {entry['dtype_a']} in A, {entry['dtype_b']} in B")
    first = entry["first_difference"]
    if first is not None:
        parts.append(f"first differing value at {first['index']}: {format_value(first['a'])} in A, "
                     f"{format_value(first['b'])} in B; max abs difference {format_value(entry['max_abs_diff'])} "
                     f"at {entry['max_at']}")
    beyond = f" (beyond atol {atol})" if atol != BIT_EXACT else ""
    return f"{where}: " + "; ".join(parts) + beyond


def _config_differences(a: ParameterTree, b: ParameterTree) -> list[dict]:
    """Computation fields that differ, with where each side's value came from (file, shapes, default);
    then the config keys bertconv does not compute with (`BertConfig.unread`, accepted by the user)
    whose values differ: the library that reads them may compute otherwise, so they differ too."""
    fields = [{"field": f, "a": getattr(a.config, f), "b": getattr(b.config, f),
               "a_from": a.config.provenance.get(f, "default"), "b_from": b.config.provenance.get(f, "default")}
              for f in computation_fields(a.config) if getattr(a.config, f) != getattr(b.config, f)]
    unread_a, unread_b = dict(a.config.unread), dict(b.config.unread)
    for key in sorted(unread_a.keys() | unread_b.keys()):
        if unread_a.get(key) != unread_b.get(key):
            fields.append({"field": key, "a": _stated(unread_a, key), "b": _stated(unread_b, key),
                           "a_from": "file" if key in unread_a else "default",
                           "b_from": "file" if key in unread_b else "default"})
    return fields


def _stated(unread: dict[str, str], key: str):
    """An unread key's value as the config states it, or None where it states none."""
    return json.loads(unread[key]) if key in unread else None


def diff(tree_a: ParameterTree, tree_b: ParameterTree, *, atol: float = BIT_EXACT,
         on_tensor: Callable[[int], None] | None = None) -> dict:
    """Compare two canonical trees, tensor by tensor, streaming; a JSON-ready report.

    Keys: a, b (each the checkpoint's fields: see `report.checkpoint`), atol, identical (same names, shapes, dtypes and bits),
    ok (same names and shapes, no value differing beyond `atol`: what the exit status follows), only_in_a, only_in_b
    ([{name, source}]), shape_differences, dtype_differences ([{name, a, b}]), tensors (one entry
    per compared name: sources, dtypes, shapes, bit_equal, max_abs_diff, max_at,
    first_difference {index, a, b}, within_tolerance), problems (a sentence naming each
    tensor that differs beyond `atol`, and each config field), notes (a sentence per tensor whose
    dtype differs), config_differences ([{field, a, b,
    a_from, b_from}]: computation fields that differ, each a difference).

    `on_tensor(nbytes)`, when given, is called once per canonical name with the bytes both trees
    store under it, so that over the whole diff it receives the total bytes of both trees.
    """
    if atol < 0 or math.isnan(atol):
        raise ValueError(f"atol must be a non-negative number, got {atol}")
    names = sorted(set(tree_a.params) | set(tree_b.params), key=model_order_key)
    stands = [(name, stand_in(tree_a, name), stand_in(tree_b, name)) for name in names]
    only_in_a, only_in_b, tensors = [], [], []
    workers = Workers(COMPARING_THREADS, "diff")
    try:
        shown_equal = {name: workers.submit(same_stored_bits, a.param.tensor, b.param.tensor)
                       for name, a, b in stands if a is not None and b is not None}
        for name, a, b in stands:
            if b is None:
                only_in_a.append({"name": name, "source": a.label})
            elif a is None:
                only_in_b.append({"name": name, "source": b.label})
            else:
                tensors.append(_compare_pair(name, a, b, atol, shown_equal[name]))
            if on_tensor is not None:
                on_tensor(sum(tree.params[name].tensor.nbytes for tree in (tree_a, tree_b) if name in tree.params))
    except BaseException:
        workers.shutdown(cancel=True)
        raise
    workers.shutdown()
    shape_differences = [{"name": t["name"], "a": t["shape_a"], "b": t["shape_b"]}
                         for t in tensors if t["shape_a"] != t["shape_b"]]
    dtype_differences = [{"name": t["name"], "a": t["dtype_a"], "b": t["dtype_b"]}
                         for t in tensors if t["dtype_a"] != t["dtype_b"]]
    differences = [f"only in A: {o['name']} ({o['source']})" for o in only_in_a]
    differences += [f"only in B: {o['name']} ({o['source']})" for o in only_in_b]
    differences += [_describe(t, atol) for t in tensors if not t["within_tolerance"]]
    config_differences = _config_differences(tree_a, tree_b)
    differences += [f"config: {c['field']} is {c['a']!r} in A ({c['a_from']}), {c['b']!r} in B ({c['b_from']})"
                    for c in config_differences]
    identical = (not only_in_a and not only_in_b and not dtype_differences and not config_differences
                 and all(t["compared"] and t["bit_equal"] for t in tensors))
    ok = (not only_in_a and not only_in_b and not config_differences
          and all(t["within_tolerance"] for t in tensors))
    return {
        "a": checkpoint(tree_a),
        "b": checkpoint(tree_b),
        "atol": atol,
        "identical": identical,
        "ok": ok,
        "compared": len(tensors),
        "only_in_a": only_in_a,
        "only_in_b": only_in_b,
        "shape_differences": shape_differences,
        "dtype_differences": dtype_differences,
        "tensors": tensors,
        "problems": differences,
        "notes": [f"{d['name']}: {d['a']} in A, {d['b']} in B; values compared as float32"
                  for d in dtype_differences],
        "config_differences": config_differences,
    }
