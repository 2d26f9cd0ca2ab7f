"""The files that travel with a checkpoint without being part of it: vocabulary and tokenizer.

A conversion carries them from the source's directory into the output: a model without its
tokenizer is a model nobody can run. `convert --force` may replace an earlier output holding them,
and they go with it: a replacement holds only what its conversion wrote, never another model's
vocabulary.
"""

from __future__ import annotations

from pathlib import Path

from .. import paths

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
    "spm.model",  # DeBERTa-v2's and -v3's
)


#: keras-hub presets keep their tokenizer's files as assets (keras_hub tokenizers' `save_assets`),
#: each the file of a checkpoint directory named beside it here.
KERAS_HUB_ASSETS = {
    "assets/tokenizer/vocabulary.txt": "vocab.txt",
    "assets/tokenizer/vocabulary.spm": "spiece.model",
    "assets/tokenizer/vocabulary.json": "vocab.json",
    "assets/tokenizer/merges.txt": "merges.txt",
}
#: A preset's vocabulary.spm in a checkpoint directory of these families (others: ALBERT's spiece.model).
_SENTENCEPIECE_NAMES = {"deberta-v2": "spm.model", "xlm-roberta": "sentencepiece.bpe.model"}
#: What marks a keras-hub object's serialized config (a preset's own tokenizer.json is one, not
#: the Hugging Face tokenizer file of that name).
_KERAS_HUB_MARK = b'"registered_name": "keras_hub>'


def source_directory(path: Path) -> Path:
    """The directory a checkpoint path lives in (itself, for a directory)."""
    return path if path.is_dir() else path.parent


def find(directory: Path) -> list[Path]:
    """The tokenizer files in `directory` that are regular files or links to one (a Hugging Face
    cache's snapshot links every file), in `TOKENIZER_FILES` order, then a keras-hub preset's
    tokenizer assets; a keras-hub `tokenizer.json` is not one."""
    found = [directory / name for name in TOKENIZER_FILES
             if paths.file_problem(directory / name) is None and not _is_keras_hub_config(directory / name)]
    return found + [directory / asset for asset in KERAS_HUB_ASSETS if paths.file_problem(directory / asset) is None]


def carried_name(file: Path, model_type: str | None = None) -> str:
    """The name a companion file takes in a checkpoint directory of a `model_type` model (a
    keras-hub asset its own: a SentencePiece model the name that family's tokenizer reads)."""
    asset = f"{file.parent.parent.name}/{file.parent.name}/{file.name}"
    if asset == "assets/tokenizer/vocabulary.spm" and model_type in _SENTENCEPIECE_NAMES:
        return _SENTENCEPIECE_NAMES[model_type]
    return KERAS_HUB_ASSETS.get(asset, file.name)


def _is_keras_hub_config(path: Path) -> bool:
    try:
        with open(path, "rb") as file:
            return _KERAS_HUB_MARK in file.read(4096)
    except OSError:
        return False
