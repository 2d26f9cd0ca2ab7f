"""Hugging Face TensorFlow BERTs: the `tf_model.h5` that transformers 4.x's `save_pretrained`
writes for TFBertForPreTraining, TFBertForMaskedLM, TFBertModel (and the task models built on
TFBertMainLayer), single or sharded. transformers 5 no longer reads them.

A single `tf_model.h5` is Keras 2 HDF5 (`model.save_weights`): the root `layer_names` lists the
model's main layers, `bert`, `nsp___cls`, `mlm___cls` (the head layers' Keras names are
`nsp___cls` and `mlm___cls`), each a group whose `weight_names` start with the model's name:
`tf_bert_for_pre_training/bert/embeddings/word_embeddings/weight:0`. transformers matches weights
by that name minus the model's (which varies: `tf_bert_model`, `tf_bert_for_pre_training_1` for
a second model in one session), and so does this table. Kernels are `[in, out]` as in the
canonical tree; the NSP kernel is `[H, 2]`; LayerNorm `gamma`/`beta`. The MLM head holds the
embeddings layer for its tied decoder, so `mlm___cls` lists the five embedding weights again
(`tf_bert_for_pre_training/bert/embeddings/...`), stored a second time under that group. Both
copies load into the one variable: transformers 4.57's `load_tf_weights_from_h5` walks
`model.layers` in order (`bert`, [`nsp___cls`,] `mlm___cls`: TFBertForPreTraining,
TFBertForMaskedLM, TFBertLMHeadModel) and `batch_set_value` assigns in that order, so the
`mlm___cls` copies win, and the model computes with them for the input embeddings and the
decoder alike. They are what this reader reads; the encoder's copies are ignored entries that
name the parameter they copy (`Ignored.copy_of`), which `checks.copies` compares by value for
the notes of inspect and convert and the problems of verify.

Sharded (`tf_model.h5.index.json`, `weight_map`: full name -> shard): each shard's root
`layer_names` lists its datasets by name minus the model's (`bert/encoder/layer_._0/...`), each
weight once (the held copies are not written again).

Header-only: reading lists datasets and their offsets; no tensor data is read until asked.

Writing (`--to hf-tf`): one `tf_model.h5` laid out as `save_pretrained` writes it for the class
that has the tree's heads (TFBertForPreTraining, TFBertForMaskedLM, TFBertModel,
TFBertForNextSentencePrediction), `config.json` and the source's `vocab.txt`. TF BERT ties the
decoder by construction: an untied decoder is refused unless dropped. Keras HDF5 has no
bfloat16: bfloat16 tensors are widened (exactly) to float32.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from ..containers import keras_h5
from ..containers.keras_h5 import LayerToWrite
from ..dtypes import BFLOAT16
from ..errors import bad_input
from ..tensor import Bfloat16Widened, LazyTensor
from ..tree import Ignored, ParameterTree
from . import hf_files
from .assemble import Entry, assemble
from .table import (UNTIED_DECODER, Row, Skip, Table, dense_rows, norm_rows, refuse_sentence_head_without_pooler,
                    refuse_untied_decoder, refuse_unwritten)

FORMAT = "hf-tf-h5"
TF_FILE = "tf_model.h5"
INDEX_FILE = TF_FILE + hf_files.INDEX_SUFFIX
#: What the writer records as the file's producer: the layout is tf-keras 2.21's.
BACKEND = "tensorflow"
KERAS_VERSION = "2.21.0"
BERT, MLM, NSP = "bert", "mlm___cls", "nsp___cls"
MAIN_LAYERS = (BERT, MLM, NSP)
#: Where the MLM layer lists the embeddings layer it holds for its decoder.
HELD = MLM + "/"
OVERWRITTEN_REASON = ("the encoder's copy of an embedding weight; TensorFlow (transformers 4.x) loads the MLM "
                      "head's copy {copy} over it and computes with that one")


#: Keras names each variable with its output index, `:0`.
_norm_rows = partial(norm_rows, gamma="gamma:0", beta="beta:0")
_dense_rows = partial(dense_rows, kernel="kernel:0", bias="bias:0")

_LAYER = "bert/encoder/layer_._{i}"
#: The embedding weights in the order TFBertEmbeddings creates them.
EMBEDDING_ROWS = (
    Row("embeddings.word", "bert/embeddings/word_embeddings/weight:0"),
    Row("embeddings.token_type", "bert/embeddings/token_type_embeddings/embeddings:0"),
    Row("embeddings.position", "bert/embeddings/position_embeddings/embeddings:0"),
    *_norm_rows("embeddings.norm", "bert/embeddings/LayerNorm"),
)
#: Rows in the order `save_weights` lists them, layer by layer.
LAYER_ROWS = (
    *_dense_rows("layers.{i}.attention.query", f"{_LAYER}/attention/self/query"),
    *_dense_rows("layers.{i}.attention.key", f"{_LAYER}/attention/self/key"),
    *_dense_rows("layers.{i}.attention.value", f"{_LAYER}/attention/self/value"),
    *_dense_rows("layers.{i}.attention.output", f"{_LAYER}/attention/output/dense"),
    *_norm_rows("layers.{i}.attention_norm", f"{_LAYER}/attention/output/LayerNorm"),
    *_dense_rows("layers.{i}.ffn.intermediate", f"{_LAYER}/intermediate/dense"),
    *_dense_rows("layers.{i}.ffn.output", f"{_LAYER}/output/dense"),
    *_norm_rows("layers.{i}.ffn_norm", f"{_LAYER}/output/LayerNorm"),
)
POOLER_ROWS = _dense_rows("pooler", "bert/pooler/dense")
MLM_ROWS = (
    Row("mlm.output_bias", f"{MLM}/predictions/bias:0"),
    *_dense_rows("mlm.transform", f"{MLM}/predictions/transform/dense"),
    *_norm_rows("mlm.norm", f"{MLM}/predictions/transform/LayerNorm"),
)
NSP_ROWS = _dense_rows("nsp", f"{NSP}/seq_relationship")  # kernel [H, 2], as canonical

TABLE = Table("hf-tf", (
    *EMBEDDING_ROWS, *LAYER_ROWS, *POOLER_ROWS, *MLM_ROWS, *NSP_ROWS,
), skips=(
    Skip("classifier/*", "a fine-tuning head that BERT pre-training does not define"),
    Skip("qa_outputs/*", "a fine-tuning head that BERT pre-training does not define"),
))


# --- finding the files ----------------------------------------------------------------------


def candidates(directory: Path) -> list[Path]:
    """The TF checkpoints a directory holds: `tf_model.h5.index.json` (for its shards) or
    `tf_model.h5`."""
    return [directory / name for name in (INDEX_FILE, TF_FILE) if (directory / name).is_file()]


def sniff(path: Path) -> str | None:
    """FORMAT for a shard index whose shards are `.h5`, or a Keras 2 HDF5 file whose layers
    are transformers' BERT main layers (`bert`, `mlm___cls`, `nsp___cls`, or a shard's datasets
    under them); None otherwise. Must be tried before the bert4keras sniffer, which claims every
    Keras 2 HDF5 file, and the Hugging Face one, which claims every `*.index.json`."""
    path = Path(path)
    if path.name.endswith(hf_files.INDEX_SUFFIX):
        return FORMAT if hf_files.index_shards_end_with(path, ".h5") else None
    if keras_h5.layout(path) != "keras2":
        return None
    names = keras_h5.layer_names(path)
    return FORMAT if any(name.split("/", 1)[0] in MAIN_LAYERS for name in names) else None


# --- reading --------------------------------------------------------------------------------


def read(path: Path, *, config_path: Path | None = None, num_heads: int | None = None) -> ParameterTree:
    """Read a `tf_model.h5` or its shard index into a canonical tree (headers only)."""
    path = Path(path)
    overwritten: list[Ignored] = []
    if path.name.endswith(hf_files.INDEX_SUFFIX):
        entries, files = _sharded_entries(path)
    elif _is_shard(path):
        entries, files = _shard_entries(path), [path]
    else:
        entries, overwritten = _held_copies_win(_single_entries(path))
        files = [path]
    return assemble(
        format_name=FORMAT, path=path, entries=entries, table=TABLE,
        config=hf_files.config_beside(path, config_path), default_activation=hf_files.DEFAULT_ACTIVATION,
        num_heads=num_heads, files=files, vocab=hf_files.vocab_beside(path), extra_ignored=overwritten,
        rename=lambda name: name.removeprefix(HELD) if name.startswith(HELD + "bert/embeddings/") else name,
    )


def _held_copies_win(entries: list[Entry]) -> tuple[list[Entry], list[Ignored]]:
    """The entries the model computes with, and the encoder's embedding weights the MLM head's
    copies overwrite at load (module docstring), as ignored copies of their canonical parameter."""
    held = {entry.name.removeprefix(HELD) for entry in entries if entry.name.startswith(HELD)}
    canonical = {row.name: row.canonical for row in EMBEDDING_ROWS}
    kept, overwritten = [], []
    for entry in entries:
        if entry.name in canonical and entry.name in held:
            tensor = entry.tensor
            overwritten.append(Ignored(entry.name, OVERWRITTEN_REASON.format(copy=HELD + entry.name), tensor.numel,
                                       str(tensor.dtype), tuple(tensor.shape), copy_of=canonical[entry.name],
                                       tensor=tensor))
        else:
            kept.append(entry)
    return kept, overwritten


def _is_shard(path: Path) -> bool:
    """A shard lists datasets by path in `layer_names` (`bert/...:0`); a whole file lists layers."""
    return any("/" in name for name in keras_h5.layer_names(path))


def _single_entries(path: Path) -> list[Entry]:
    weights_file = keras_h5.read_layers_unexpanded(path)
    entries = []
    for layer in weights_file.layers:
        for weight in layer.weights:
            model_name, _, key = weight.name.partition("/")
            if not model_name or not key:
                raise bad_input(path, f"layer {layer.name!r} weight {weight.name!r}: transformers names every "
                                      f"weight <model name>/<layer>/..., this one has no model name")
            # A weight another layer owns (the embeddings the MLM head holds) is named under this one.
            owned = key.startswith(layer.name + "/")
            entries.append(Entry(key if owned else f"{layer.name}/{key}", weight.tensor, path))
    for weight in weights_file.extra:
        entries.append(Entry(weight.name, weight.tensor, path))
    return entries


def _shard_entries(shard: Path) -> list[Entry]:
    return [Entry(weight.name, weight.tensor, shard) for weight in keras_h5.read_listed_datasets(shard)]


def _sharded_entries(index_path: Path) -> tuple[list[Entry], list[Path]]:
    mapping = hf_files.weight_map(index_path)
    shards = list(dict.fromkeys(mapping.values()))
    entries = [entry for shard in shards for entry in _shard_entries(shard)]
    found = {(entry.file, entry.name) for entry in entries}
    for full_name, shard in mapping.items():
        name = full_name.partition("/")[2] or full_name
        if (shard, name) not in found:
            raise bad_input(index_path, f"weight_map puts {full_name!r} in {shard.name}, but that shard holds no "
                                        f"dataset {name!r}")
    return entries, shards


# --- writing --------------------------------------------------------------------------------

#: transformers' Keras name of each TF class's model (its weights' first name component).
MODEL_NAMES = {
    "BertForPreTraining": "tf_bert_for_pre_training",
    "BertForMaskedLM": "tf_bert_for_masked_lm",
    "BertLMHeadModel": "tf_bert_lm_head_model",
    "BertForNextSentencePrediction": "tf_bert_for_next_sentence_prediction",
    "BertModel": "tf_bert_model",
}


def layers_to_write(tree: ParameterTree, *, drop_untied_decoder: bool = False) -> list[LayerToWrite]:
    """The main layers of the transformers TF model for `tree`'s heads, in `model.layers` order,
    each with its weights named and ordered as `save_weights` writes them."""
    heads = tree.heads
    refuse_sentence_head_without_pooler(tree, ("nsp",), "transformers' TF NSP head sits on the pooler, so it cannot "
                                                        "be written --to hf-tf")
    refuse_untied_decoder(tree, drop_untied_decoder, "transformers' TF BERT ties the decoder to the word embeddings "
                                                     "by construction")
    model = MODEL_NAMES[hf_files.architecture(tree)]
    written: set[str] = set()
    missing: list[str] = []

    def weights(rows: tuple[Row, ...], *, held: bool = False, optional: bool = False) -> list[tuple[str, LazyTensor]]:
        out = []
        for row in rows:
            canonical = row.canonical
            if canonical not in tree:
                if not optional:
                    missing.append(canonical)
                continue
            tensor = tree[canonical].tensor
            out.append((f"{model}/{row.name}", Bfloat16Widened(tensor) if tensor.dtype is BFLOAT16 else tensor))
            if not held:
                written.add(canonical)
        return out

    per_layer = [Row(r.canonical.format(i=i), r.name.format(i=i)) for i in range(tree.config.num_hidden_layers)
                 for r in LAYER_ROWS]
    layers = [LayerToWrite(BERT, tuple(weights(EMBEDDING_ROWS) + weights(tuple(per_layer))
                                       + weights(POOLER_ROWS, optional=True)))]
    if heads.nsp:
        layers.append(LayerToWrite(NSP, tuple(weights(NSP_ROWS))))
    if heads.mlm:
        # The MLM head lists the embeddings layer it holds after its own weights.
        layers.append(LayerToWrite(MLM, tuple(weights(MLM_ROWS) + weights(EMBEDDING_ROWS, held=True))))
    if missing:
        raise bad_input(tree.path, f"cannot write --to hf-tf: missing {', '.join(sorted(set(missing)))}")
    refuse_unwritten(tree, written, "transformers' TF BERT",
                     dropped=UNTIED_DECODER if drop_untied_decoder else frozenset())
    return layers


def write(tree: ParameterTree, directory: Path, *, options) -> list[Path]:
    """Write `tree` as `tf_model.h5` + `config.json` (+ `vocab.txt`) into the new `directory`.

    `options` is a `convert.WriteOptions` (drop_untied_decoder, on_tensor).
    """
    if tree.conditional:
        raise bad_input(tree.path, "conditional LayerNorm (bert4keras layer_norm_cond) has no Hugging Face "
                                   "equivalent; convert it --to bert4keras instead")
    layers = layers_to_write(tree, drop_untied_decoder=options.drop_untied_decoder)
    target = Path(directory) / TF_FILE
    keras_h5.write_weights_file(target, layers, backend=BACKEND, keras_version=KERAS_VERSION,
                                on_tensor=options.on_tensor)
    dtype = layers[0].weights[0][1].dtype.name  # the word embeddings' (bfloat16 was widened)
    return [target, *hf_files.write_config(tree, Path(directory), dtype=dtype)]
