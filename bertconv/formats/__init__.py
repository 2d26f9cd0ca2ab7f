"""The checkpoint families bertconv reads and writes, and how a path is matched to one.

Each family is one module (its table, reader and writer) described here by a `Format`. Adding a
family means adding its module and one entry to `FORMATS`; nothing else dispatches on formats.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..containers import keras_h5
from ..errors import bad_input
from ..tree import ParameterTree
from . import bert4keras, bert4keras_objects, google_tf, hf, hf_flax, hf_tf


@dataclass(frozen=True)
class Format:
    """A checkpoint family.

    Attributes:
      target: the name `convert --to` uses for it.
      names: the format names its reader reports (`ParameterTree.format`).
      sniff: path -> a format name if this family reads the path (the path may be a prefix that
        names no file, as a TF bundle prefix does), else None. Judged by content, not suffix.
      candidates: directory -> the checkpoints of this family inside it.
      read: (path, config_path=, num_heads=) -> ParameterTree.
      write: (tree, destination, **options) -> files written; None if the family is read-only.
      writes_directory: whether the destination is a directory (else a single file).
    """

    target: str
    names: tuple[str, ...]
    sniff: Callable[[Path], str | None]
    candidates: Callable[[Path], list[Path]]
    read: Callable[..., ParameterTree]
    write: Callable[..., list[Path]] | None
    writes_directory: bool


FORMATS: tuple[Format, ...] = (
    # Before "hf" (which claims every *.index.json) and "bert4keras" (every Keras 2 HDF5 file).
    Format("hf-tf", (hf_tf.FORMAT,), hf_tf.sniff, hf_tf.candidates, hf_tf.read, hf_tf.write, writes_directory=True),
    Format("hf-flax", (hf_flax.FORMAT,), hf_flax.sniff, hf_flax.candidates, hf_flax.read, hf_flax.write,
           writes_directory=True),
    Format("hf", hf.FORMATS, hf.sniff, hf.candidates, hf.read, hf.write, writes_directory=True),
    Format("bert4keras", bert4keras.FORMATS, bert4keras.sniff, bert4keras.candidates, bert4keras.read,
           bert4keras.write, writes_directory=False),
    Format("tf", (google_tf.FORMAT,), google_tf.sniff, google_tf.candidates, google_tf.read, google_tf.write,
           writes_directory=True),
    # Read-only: what bert4keras' pre-training leaves (Keras object-based TF checkpoints).
    Format("bert4keras-tf", (bert4keras_objects.FORMAT,), bert4keras_objects.sniff, bert4keras_objects.candidates,
           bert4keras_objects.read, write=None, writes_directory=False),
)

TARGETS = {f.target: f for f in FORMATS if f.write is not None}


def resolve(path: Path) -> tuple[Format, Path]:
    """The format of `path` and the exact path its reader takes.

    A directory must hold exactly one checkpoint; the error lists what it holds otherwise.
    """
    path = Path(path)
    if path.is_dir():
        found = [(fmt, candidate) for fmt in FORMATS for candidate in fmt.candidates(path)]
        if len(found) == 1:
            return found[0]
        if not found:
            listing = ", ".join(sorted(p.name for p in path.iterdir())[:12]) or "nothing"
            raise bad_input(path, f"directory holds no checkpoint bertconv reads (it holds: {listing}); "
                                  f"expected model.safetensors, pytorch_model.bin, a *.index.json, "
                                  f"a TF bundle (*.ckpt.index) or a bert4keras .h5 / .weights.h5")
        names = ", ".join(p.name for _, p in found)
        raise bad_input(path, f"directory holds {len(found)} checkpoints ({names}); pass the one to use, "
                              f"e.g. {found[0][1]}")
    for fmt in FORMATS:
        if fmt.sniff(path):
            return fmt, path
    if not path.exists():
        raise bad_input(path, "does not exist")
    if keras_h5.is_hdf5(path):
        keras_h5.read_weights_file(path)  # an HDF5 file but not Keras weights: raises, saying what it holds
    raise bad_input(path, "is not a checkpoint bertconv reads (not safetensors, a torch zip or pickle, "
                          "a TF tensor bundle, or Keras HDF5)")


def read(path: Path, *, config_path: Path | None = None, num_heads: int | None = None) -> ParameterTree:
    """Read any supported checkpoint into a canonical `ParameterTree` (headers only)."""
    fmt, exact = resolve(path)
    return fmt.read(exact, config_path=config_path, num_heads=num_heads)
