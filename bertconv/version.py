"""bertconv's version, in one place: the package's metadata is built from it (pyproject.toml),
and the --json stamp reads it without importlib.metadata."""

__version__ = "0.1.0"
