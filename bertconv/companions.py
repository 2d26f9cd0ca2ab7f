"""The files that travel with a checkpoint without being part of it: vocabulary and tokenizer.

A conversion carries them from the source's directory into the output, and `convert --force`
keeps those an existing output holds: a model without its tokenizer is a model nobody can run.
"""

from __future__ import annotations

from pathlib import Path

from . import paths

#: Tokenizer files of the Hugging Face and Google ecosystems (WordPiece, byte-level BPE,
#: SentencePiece), by name.
TOKENIZER_FILES = (
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
)


def source_directory(path: Path) -> Path:
    """The directory a checkpoint path lives in (itself, for a directory)."""
    return path if path.is_dir() else path.parent


def find(directory: Path) -> list[Path]:
    """The tokenizer files in `directory` that are regular files or symlinks to one (a Hugging Face
    cache snapshot's files are links into its `blobs/`), in `TOKENIZER_FILES` order."""
    return [directory / name for name in TOKENIZER_FILES
            if paths.kind_of(directory / name) in ("file", "symlink") and paths.why_not_a_file(directory / name) is None]
