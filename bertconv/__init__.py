"""bertconv: convert BERT checkpoints between Google TF, bert4keras and Hugging Face, and check them.

    from bertconv import load
    tree = load("path/to/checkpoint")      # any format: a canonical ParameterTree (headers only)
"""

__version__ = "0.1.0"

from .formats import read as load  # noqa: E402

__all__ = ["__version__", "load"]
