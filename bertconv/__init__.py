"""bertconv: convert BERT checkpoints between Google TF, bert4keras and Hugging Face, and check them.

    from bertconv import load
    tree = load("path/to/checkpoint")      # any format: a canonical ParameterTree (headers only)
"""

from .formats import read as load
from .version import __version__

__all__ = ["__version__", "load"]
