"""Keras 3 sharded weights: `<base>.weights.json` and its `<base>_NNNNN.weights.h5` files, as
`model.save_weights(path.json, max_shard_size=...)` writes them (keras/src/saving/saving_lib.py
`ShardedH5IOStore`; keras-hub's `save_to_preset` past its `max_shard_size`, in GB).

    {"metadata": {"total_size": <bytes, a float>},
     "weight_map": {"/layers/<group>/.../vars": "model_00000.weights.h5" | [file, file, ...], ...}}

Each shard is a Keras 3 weights file holding some objects' variables (datasets `<path>/vars/N`);
an object whose variables did not fit in one shard is listed with every file holding some. Keras
loads an object's variables from the files the map lists for its `vars` group, so a dataset in a
file the map does not list for its group would not load: such a file is refused here, as are
file names outside the index's directory and a dataset stored twice.

Written with whole objects per shard (a new shard when the next object would pass the limit; an
object larger than the limit alone in its own), which Keras loads as it loads its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from ...errors import bad_input
from ...json_text import loads as json_loads
from ...lazy import lazy_module
from .keras3 import Keras3WeightsFile, read_keras3_file

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from . import keras3_write
    from .keras3_write import Keras3Object
else:  # imported on first use: reading shards writes nothing
    keras3_write = lazy_module("bertconv.containers.hdf5.keras3_write")

#: A shard's file name as the index may list it (no directory).
SHARD_NAME = re.compile(r"[A-Za-z0-9_.-]+\.weights\.h5")


def shard_files(index: Path) -> dict[str, list[Path]]:
    """The index's weight map: each object's `vars` group (`/layers/.../vars`) -> the shard files
    listed for it, each checked to be a plain file name beside the index, present."""
    try:
        data = json_loads(index.read_text(encoding="utf-8"))
        weight_map = data["weight_map"]
        if not isinstance(weight_map, dict):
            raise TypeError("weight_map is not an object")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise bad_input(index, f"is not a Keras sharded weights index (a weight_map of vars groups to files): {exc}") \
            from None
    out = {}
    for group, files in weight_map.items():
        names = files if isinstance(files, list) else [files]
        for name in names:
            if not isinstance(name, str) or not SHARD_NAME.fullmatch(name) or name.startswith("."):
                raise bad_input(index, f"weight_map lists {json.dumps(name)[:80]} for {group}: expected the name of a "
                                       f"*.weights.h5 file beside the index")
            if not (index.parent / name).is_file():
                raise bad_input(index.parent / name, f"is missing: {index.name} lists it for {group}")
        out[group] = [index.parent / name for name in names]
    return out


def read_sharded(index: Path) -> list[Keras3WeightsFile]:
    """Every shard the index lists, parsed (lazy tensors, no data read), in file-name order;
    refused when a dataset lies in a file its group is not listed with, or in two files."""
    index = Path(index)
    listed = shard_files(index)
    paths = sorted({path for files in listed.values() for path in files})
    shards = [read_keras3_file(path, shard=True) for path in paths]
    seen: dict[str, Path] = {}
    for shard in shards:
        for name in _dataset_names(shard):
            group = "/" + name.rpartition("/")[0]
            if shard.path not in listed.get(group, ()):
                raise bad_input(shard.path, f"holds {name}, which {index.name} does not list in this file (Keras "
                                            f"would not load it)")
            if name in seen:
                raise bad_input(shard.path, f"holds {name}, which {seen[name].name} holds too")
            seen[name] = shard.path
    return shards


def _dataset_names(shard: Keras3WeightsFile) -> list[str]:
    names = [f"{shard.container}/{layer.group}/{w.name}" for layer in shard.layers for w in layer.weights]
    return names + [w.name for w in shard.extra]


def plan_shards(objects: Sequence[Keras3Object], max_bytes: int) -> list[list[Keras3Object]]:
    """`objects` in order, in shards of at most `max_bytes` each (an object past it alone)."""
    shards: list[list[Keras3Object]] = [[]]
    size = 0
    for obj in objects:
        nbytes = total_bytes([obj])
        if shards[-1] and size + nbytes > max_bytes:
            shards.append([])
            size = 0
        shards[-1].append(obj)
        size += nbytes
    return shards


def write_sharded(index: Path, objects: Sequence[Keras3Object], max_bytes: int, *,
                  on_tensor: Callable[[int], None] | None = None) -> list[Path]:
    """Write `objects` as `<base>_NNNNN.weights.h5` shards of at most `max_bytes` beside the
    new `index` (`<base>.weights.json`), and the index; the files written, the index last."""
    index = Path(index)
    base = index.name.removesuffix(".weights.json")
    written, weight_map = [], {}
    for number, shard in enumerate(plan_shards(objects, max_bytes)):
        path = index.with_name(f"{base}_{number:05}.weights.h5")
        keras3_write.write_keras3_file(path, shard, on_tensor=on_tensor)
        written.append(path)
        vars_group = keras3_write.VARS
        weight_map.update({f"/{obj.path}/{vars_group}" if obj.path else f"/{vars_group}": path.name for obj in shard})
    index.write_text(json.dumps({"metadata": {"total_size": float(total_bytes(objects))}, "weight_map": weight_map},
                                indent=4))
    return written + [index]


def total_bytes(objects: Sequence[Keras3Object]) -> int:
    """The bytes of every variable of `objects`."""
    return sum(t.nbytes for obj in objects for t in obj.variables)
