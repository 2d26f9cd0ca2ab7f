"""Reading the Keras 3 weights layout (`*.weights.h5`): its layer groups and their datasets, as
lazy tensors; see `keras_h5` for the layout."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from ...errors import bad_input
from ...records import record
from ...tensor import LazyTensor, file_size

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    import h5py
from .keras import KERAS3_LAYERS, KERAS3_VARS, KerasWeight, is_keras3, read_guarded, dataset_at
from ..one_reading import remembered
from .nodes import dataset_paths, file_number, is_group


@record
class Keras3Layer:
    """One group of a Keras 3 layout's `layers` container.

    `group` is its name there (`multi_head_attention_1`); `weights` every dataset below it, each
    named by its path under the group (`vars/0`, `q_dense/vars/1`), sorted by name.
    """

    group: str
    weights: tuple[KerasWeight, ...]


@record
class Keras3WeightsFile:
    """A Keras 3 layout weights file.

    Attributes:
      container: the path of the `layers` group holding the model's layers: `layers`, or
        `layers/<group>/layers` when the file's model has one nested model and nothing else with
        weights (`nested` is then that group's name).
      layers: the container's groups, weightless ones too, sorted by name.
      extra: datasets outside the container (the model's own `vars`, an optimizer's state), each
        named by its path in the file.
    """

    path: Path
    container: str
    layers: tuple[Keras3Layer, ...]
    extra: tuple[KerasWeight, ...]
    nested: str | None = None


def read_keras3_file(path: Path, *, shard: bool = False) -> Keras3WeightsFile:
    """Parse a Keras 3 layout weights file: its layer groups and their datasets, as lazy tensors
    (no data read). Which group is which layer the file does not say (see the module docstring).
    A `shard` of sharded weights may hold sub-layers' variables alone (no `layers/<group>/vars`).
    Parsed once per reading (`one_reading`): bert4keras' sniffer parses a preset's files too."""
    path = Path(path)
    return remembered(path, f"keras 3 layout, shard={shard}",
                      lambda: read_guarded(path, partial(_read_keras3_open, shard=shard)))


def _read_keras3_open(path: Path, f: h5py.File, *, shard: bool = False) -> Keras3WeightsFile:
    if not (is_keras3(f) or shard and is_group(f.get(KERAS3_LAYERS))):
        roots = ", ".join(sorted(f.keys())[:8]) or "nothing"
        raise bad_input(path, f"not in the Keras 3 weights layout (no /{KERAS3_LAYERS}/<group>/"
                              f"{KERAS3_VARS}; the root holds: {roots})")
    datasets: list[str] = []
    for name in dataset_paths(f):
        try:
            datasets.append(name.decode("utf-8"))
        except UnicodeDecodeError:
            raise bad_input(path, f"holds a dataset whose name is not UTF-8: {name!r}") from None
    size, home = file_size(path), file_number(f)
    weights = {name: dataset_at(path, f, name, size, home, f"dataset {name!r}",
                                lambda _: f"holds no dataset at {name!r}")
               for name in sorted(datasets)}
    container, nested = _keras3_container(f, weights)
    prefix = container + "/"
    groups: dict[str, list[KerasWeight]] = {
        name: [] for name, child in sorted(f[container].items()) if is_group(child)}
    extra = []
    for name, tensor in weights.items():
        group, _, relative = name[len(prefix):].partition("/")
        if name.startswith(prefix) and relative:
            groups[group].append(KerasWeight(relative, tensor))
        else:
            extra.append(KerasWeight(name, tensor))
    layers = tuple(Keras3Layer(group, tuple(ws)) for group, ws in groups.items())
    return Keras3WeightsFile(path, container, layers, tuple(extra), nested)


def _keras3_container(f: h5py.File, weights: dict[str, LazyTensor]) -> tuple[str, str | None]:
    """The `layers` group holding the model's layers, and the nested model's group if it is one
    level down: a root container whose only group with weights is a model with a container of
    its own (a model called as a layer inside another)."""
    weighted = sorted({name.split("/")[1] for name in weights if name.startswith(KERAS3_LAYERS + "/")})
    only = f[KERAS3_LAYERS].get(weighted[0]) if len(weighted) == 1 else None
    if is_group(only) and is_group(only.get(KERAS3_LAYERS)):
        return f"{KERAS3_LAYERS}/{weighted[0]}/{KERAS3_LAYERS}", weighted[0]
    return KERAS3_LAYERS, None
