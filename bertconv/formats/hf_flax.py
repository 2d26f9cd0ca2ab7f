"""Hugging Face Flax BERTs: the `flax_model.msgpack` that transformers 4.x's `save_pretrained`
writes for FlaxBertForPreTraining, FlaxBertForMaskedLM, FlaxBertModel, single or sharded.
transformers 5 no longer reads them.

The file is flax's msgpack encoding of the nested parameter dict (containers/msgpack_file.py).
Joined with '/', its paths are `bert/embeddings/word_embeddings/embedding`,
`bert/encoder/layer/0/attention/self/query/kernel`, `cls/predictions/bias`, ...; FlaxBertModel's
drop the `bert/` level. Dense kernels are `[in, out]` as in the canonical tree (the NSP kernel
`[H, 2]`); LayerNorm `scale`/`bias`; embeddings `embedding`. A tied decoder is not stored (the
head applies the word-embedding table); an untied one is `cls/predictions/decoder/kernel`
`[H, V]`, the transpose of the canonical decoder. Any dtype flax stores (float32, float16,
bfloat16) is read as is.

Sharded (`flax_model.msgpack.index.json`, `weight_map`: joined path -> shard): each shard is a
msgpack file of its part of the nested dict.

Writing (`--to hf-flax`): one `flax_model.msgpack` holding the parameters in the order
transformers' Flax BERT creates them, byte-identical to its `save_pretrained` for the same
values, with `config.json` and the source's `vocab.txt`.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from ..containers import msgpack_file
from ..errors import bad_input
from ..tree import ParameterTree
from . import hf_files
from .assemble import Entry, assemble
from .table import TRANSPOSE, Row, Skip, Table, dense_rows, norm_rows, refuse_unwritten

FORMAT = "hf-flax-msgpack"
FLAX_FILE = "flax_model.msgpack"
INDEX_FILE = FLAX_FILE + hf_files.INDEX_SUFFIX
#: The first key of a transformers Flax BERT's parameter dict (with heads, encoder-only, task heads).
TOP_KEYS = ("bert", "cls", "embeddings", "encoder", "pooler", "classifier", "qa_outputs")
#: Encoder-only (FlaxBertModel) files lack this level.
PREFIX = "bert/"


#: Flax names a LayerNorm's parameters `scale` and `bias`.
_norm_rows = partial(norm_rows, gamma="scale", beta="bias")

_LAYER = "bert/encoder/layer/{i}"

#: Rows in the order transformers' Flax BERT creates the parameters (the writer keeps it).
ENCODER_ROWS = (
    Row("embeddings.word", "bert/embeddings/word_embeddings/embedding"),
    Row("embeddings.position", "bert/embeddings/position_embeddings/embedding"),
    Row("embeddings.token_type", "bert/embeddings/token_type_embeddings/embedding"),
    *_norm_rows("embeddings.norm", "bert/embeddings/LayerNorm"),
)
LAYER_ROWS = (
    *dense_rows("layers.{i}.attention.query", f"{_LAYER}/attention/self/query"),
    *dense_rows("layers.{i}.attention.key", f"{_LAYER}/attention/self/key"),
    *dense_rows("layers.{i}.attention.value", f"{_LAYER}/attention/self/value"),
    *dense_rows("layers.{i}.attention.output", f"{_LAYER}/attention/output/dense"),
    *_norm_rows("layers.{i}.attention_norm", f"{_LAYER}/attention/output/LayerNorm"),
    *dense_rows("layers.{i}.ffn.intermediate", f"{_LAYER}/intermediate/dense"),
    *dense_rows("layers.{i}.ffn.output", f"{_LAYER}/output/dense"),
    *_norm_rows("layers.{i}.ffn_norm", f"{_LAYER}/output/LayerNorm"),
)
HEAD_ROWS = (
    *dense_rows("pooler", "bert/pooler/dense"),
    Row("mlm.output_bias", "cls/predictions/bias"),
    *dense_rows("mlm.transform", "cls/predictions/transform/dense"),
    *_norm_rows("mlm.norm", "cls/predictions/transform/LayerNorm"),
    Row("mlm.decoder", "cls/predictions/decoder/kernel", TRANSPOSE),  # untied only; [H, V]
    *dense_rows("nsp", "cls/seq_relationship"),  # kernel [H, 2], as canonical
)

TABLE = Table("hf-flax", (*ENCODER_ROWS, *LAYER_ROWS, *HEAD_ROWS), skips=(
    Skip("classifier/*", "a fine-tuning head that BERT pre-training does not define"),
    Skip("qa_outputs/*", "a fine-tuning head that BERT pre-training does not define"),
))


def _with_prefix(name: str) -> str:
    """Encoder-only (`FlaxBertModel`) files name `embeddings/...`, not `bert/embeddings/...`."""
    return name if name.startswith((PREFIX, "cls/", "classifier/", "qa_outputs/")) else PREFIX + name


# --- finding the files ----------------------------------------------------------------------


def candidates(directory: Path) -> list[Path]:
    """The Flax checkpoints a directory holds: the shard index, or `flax_model.msgpack`."""
    return [directory / name for name in (INDEX_FILE, FLAX_FILE) if (directory / name).is_file()]


def sniff(path: Path) -> str | None:
    """FORMAT for a shard index whose shards are `.msgpack`, or a file that starts as a flax
    parameter dict of a BERT (a msgpack map whose first key is one of TOP_KEYS); else None."""
    path = Path(path)
    if path.name.endswith(hf_files.INDEX_SUFFIX):
        return FORMAT if hf_files.index_shards_end_with(path, ".msgpack") else None
    return FORMAT if msgpack_file.looks_like_flax_msgpack(path, TOP_KEYS) else None


# --- reading --------------------------------------------------------------------------------


def read(path: Path, *, config_path: Path | None = None, num_heads: int | None = None) -> ParameterTree:
    """Read a `flax_model.msgpack` or its shard index into a canonical tree.

    Walks the file's structure (keys, array headers); no tensor data is read.
    """
    path = Path(path)
    if path.name.endswith(hf_files.INDEX_SUFFIX):
        mapping = hf_files.weight_map(path)
        files = list(dict.fromkeys(mapping.values()))
        entries = [entry for shard in files for entry in _entries(shard)]
        found = {(entry.file, entry.name) for entry in entries}
        for name, shard in mapping.items():
            if (shard, name) not in found:
                raise bad_input(path, f"weight_map puts {name!r} in {shard.name}, but that shard does not hold it")
    else:
        files, entries = [path], _entries(path)
    return assemble(
        format_name=FORMAT, path=path, entries=entries, table=TABLE,
        config=hf_files.config_beside(path, config_path), default_activation=hf_files.DEFAULT_ACTIVATION,
        num_heads=num_heads, files=files, vocab=hf_files.vocab_beside(path), rename=_with_prefix,
    )


def _entries(file: Path) -> list[Entry]:
    return [Entry("/".join(array.path), array.tensor, file) for array in msgpack_file.read_file(file)]


# --- writing --------------------------------------------------------------------------------


def arrays_to_write(tree: ParameterTree) -> list[tuple[tuple[str, ...], object]]:
    """(key path, lazy tensor) of every parameter a Flax file of `tree` holds, in creation order.

    Tied copies are not written; an untied decoder is (transposed to `[H, V]`). Its own bias
    has no place in Flax's BERT (the head applies `cls/predictions/bias`).
    """
    if tree.conditional:
        raise bad_input(tree.path, "conditional LayerNorm (bert4keras layer_norm_cond) has no Hugging Face "
                                   "equivalent; convert it --to bert4keras instead")
    if tree.has_untied_decoder_bias:
        raise bad_input(tree.path, "has an untied decoder with a bias of its own (cls.predictions.decoder.bias "
                                   "differs from cls.predictions.bias); Flax's BERT applies one bias only")
    encoder_only = hf_files.architecture(tree) == "BertModel"
    rows = list(ENCODER_ROWS)
    rows += [Row(r.canonical.format(i=i), r.name.format(i=i), r.layout)
             for i in range(tree.config.num_hidden_layers) for r in LAYER_ROWS]
    rows += HEAD_ROWS
    arrays, written = [], set()
    for row in rows:
        if row.canonical not in tree or not tree.is_counted(row.canonical):
            continue
        name = row.name.removeprefix(PREFIX) if encoder_only else row.name
        arrays.append((tuple(name.split("/")), row.layout.to_format(tree[row.canonical].tensor)))
        written.add(row.canonical)
    refuse_unwritten(tree, written, "transformers' Flax BERT")
    return arrays


def write(tree: ParameterTree, directory: Path, *, options) -> list[Path]:
    """Write `tree` as `flax_model.msgpack` + `config.json` (+ `vocab.txt`) into the new `directory`.

    `options` is a `convert.WriteOptions` (on_tensor).
    """
    arrays = arrays_to_write(tree)
    target = Path(directory) / FLAX_FILE
    msgpack_file.write_file(target, arrays, on_tensor=options.on_tensor)
    dtype = arrays[0][1].dtype.name
    return [target, *hf_files.write_config(tree, Path(directory), dtype=dtype)]
