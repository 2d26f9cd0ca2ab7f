"""bertconv: convert BERT checkpoints between Google TF, bert4keras and Hugging Face, and check them.

    from bertconv import load
    tree = load("path/to/checkpoint")      # any format: a canonical ParameterTree (headers only)
"""

from .version import __version__

__all__ = ["__version__", "load"]


def __getattr__(name: str):
    """`load` is `formats.read`, imported when first asked for: `bertconv.cli` starts (and
    installs its signal handlers) before the formats load."""
    if name == "load":
        from .formats import read
        return read
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
