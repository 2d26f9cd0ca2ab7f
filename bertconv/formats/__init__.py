"""The checkpoint formats bertconv reads and writes, and how a path is matched to one.

Each format is one module (its table, sniffer, reader and writer) and one declarative entry in
`registry.FORMATS`. Everything that differs by format derives from those entries: `resolve`
below, the `convert --to` targets (`TARGETS`), the numerics a runtime uses for a checkpoint
(`runtime.numerics` looks its format name up with `registry.format_named`), and the fixtures
the tests run on every format. No other code dispatches on a format.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .. import paths
from ..containers.one_reading import one_reading
from ..errors import bad_input
from ..records import replace
from .registry import (FORMATS, MODELS, SNIFF_ORDER, TARGETS, Format, Output, Specificity, container_hints,
                       expected_checkpoints, format_named)

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from ..tree import ParameterTree

__all__ = ["FORMATS", "MODELS", "TARGETS", "Format", "Output", "Specificity", "format_named", "read", "resolve",
           "TRANSFORMERS_PREFERENCE", "preferred"]

#: transformers' weight files in the order `from_pretrained` takes them from a directory (4.57's
#: `_get_resolved_checkpoint_files`, 5's alike): safetensors, then its index, then a PyTorch pickle,
#: then its index; a TF or Flax file only when asked (`from_tf` tried before `from_flax`), so last.
TRANSFORMERS_PREFERENCE = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                           "pytorch_model.bin.index.json", "tf_model.h5", "tf_model.h5.index.json",
                           "flax_model.msgpack", "flax_model.msgpack.index.json")


def preferred(found: Iterable[Path]) -> tuple[Path, list[Path]] | None:
    """When a directory's checkpoints are all transformers weight files (a Hub snapshot: one model
    saved in several formats), the one transformers reads and the others, in preference order;
    None when any other checkpoint is among them (then which one is meant is not known)."""
    found = list(found)
    if len(found) < 2 or any(path.name not in TRANSFORMERS_PREFERENCE for path in found):
        return None
    ordered = sorted(found, key=lambda path: TRANSFORMERS_PREFERENCE.index(path.name))
    return ordered[0], ordered[1:]


def resolve(path: Path) -> tuple[Format, Path]:
    """The format of `path` and the exact path its reader takes.

    A file (or TF bundle prefix) goes to the first format in `SNIFF_ORDER` (most specific sniffer
    first) whose sniffer claims it. A directory must hold exactly one checkpoint, or copies of
    one model in transformers' formats, of which it takes the one transformers reads (`preferred`);
    a checkpoint that several formats list as a candidate is the most specific one's. The errors list what
    was found, or what was expected. Only the formats that may claim the path (`Format.may_claim`)
    are asked, so only their modules are imported.
    """
    fmt, exact, _ = _resolve(path)
    return fmt, exact


def _resolve(path: Path, only: Format | None = None) -> tuple[Format, Path, list[Path]]:
    """`resolve`, and the other copies of the model a directory holds (see `preferred`); with
    `only`, no other format is asked."""
    path = Path(path)
    if only is not None:  # a conversion's output read back: the hints would only be read for nothing
        asked = [only]
    else:
        hints = container_hints(path)
        asked = [fmt for fmt in SNIFF_ORDER if fmt.may_claim(hints)]
    if path.is_dir():
        found: dict[Path, Format] = {}
        for fmt in asked:
            for candidate in fmt.candidates(path) if fmt.may_find_in(path) else ():
                found.setdefault(candidate, fmt)
        special = next((entry for entry in sorted(found) if paths.special_kind(entry)), None)
        if special is None and not found:
            special = next((entry for entry in sorted(path.iterdir()) if paths.special_kind(entry)), None)
        if special is not None:  # opening a FIFO would wait for a writer forever
            raise bad_input(path, f"directory holds no checkpoint bertconv reads: {special.name} is "
                                  f"{paths.special_kind(special)}, not a regular file, and bertconv reads "
                                  f"checkpoints only from regular files")
        if len(found) == 1:
            ((candidate, fmt),) = found.items()
            return fmt, candidate, []
        chosen = preferred(found)
        if chosen is not None:
            return found[chosen[0]], chosen[0], chosen[1]
        if not found:
            listing = ", ".join(sorted(p.name for p in path.iterdir())[:12]) or "nothing"
            raise bad_input(path, f"directory holds no checkpoint bertconv reads (it holds: {listing}); "
                                  f"expected {expected_checkpoints()}")
        candidates = sorted(found)
        raise bad_input(path, f"directory holds {len(found)} checkpoints ({', '.join(p.name for p in candidates)}); "
                              f"pass the one to use, e.g. {candidates[0]}")
    for fmt in asked:
        if fmt.sniff(path):
            return fmt, path, []
    if not path.exists():
        raise bad_input(path, "does not exist")
    if "hdf5" in container_hints(path):
        from ..containers.hdf5 import keras as keras_h5

        if keras_h5.is_hdf5(path):
            keras_h5.read_weights_file(path)  # an HDF5 file but not Keras weights: raises, saying what it holds
    raise bad_input(path, f"is not a checkpoint bertconv reads; expected {expected_checkpoints()}")


def read(path: Path, *, config_path: Path | None = None, num_heads: int | None = None,
         model: str | None = None, written_as: Format | None = None) -> ParameterTree:
    """Read any supported checkpoint into a canonical `ParameterTree` (headers only).

    `model` picks one of the models a file holds (an ELECTRA pre-training checkpoint's
    "generator", the default, or "discriminator"); a format whose files hold one model refuses it.
    `written_as`: the format that wrote `path`, the only one asked (reading back a conversion's
    output: a bert4keras file is not first listed for bert-for-tf2's sniffer).
    A directory holding the model in several of transformers' formats is read from the file
    transformers reads; the tree lists the others (`ParameterTree.copies`) and says so in a note.
    """
    with one_reading():  # the readers that parse a file while finding its format, then the one reading it
        fmt, exact, copies = _resolve(path, only=written_as)
        if model is None:
            tree = fmt.read(exact, config_path=config_path, num_heads=num_heads)
        elif model not in fmt.models:
            held = "its files hold one model" if not fmt.models else f"its files hold {' or '.join(fmt.models)}"
            raise bad_input(exact, f"is a {fmt.target} checkpoint and {held}: --model {model} does not apply (it "
                                   f"picks one of an ELECTRA pre-training checkpoint's generator and discriminator)")
        else:
            tree = fmt.read(exact, config_path=config_path, num_heads=num_heads, model=model)
    if not copies:
        return tree
    note = (f"read {exact.name}, the file transformers loads first; {exact.parent} also holds "
            f"{', '.join(copy.name for copy in copies)}, the same model in other formats (verify checks that they "
            f"agree: names and shapes, values with --deep)")
    return replace(tree, copies=tuple(copies), notes=(*tree.notes, note))
