"""Google's TF1 BERT checkpoints (google-research/bert): a tensor bundle with Google's names.

Layout: kernels are `[in, out]` as in the canonical tree; the one exception is the NSP weight
`cls/seq_relationship/output_weights`, stored `[2, H]`. Google stores no decoder matrix: the MLM
logits use the word-embedding table (tying by construction), so a tree with an untied decoder
cannot be written here without loss.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..config import BertConfig, load_config_file
from ..containers import tf_bundle
from ..errors import bad_input
from ..tree import Ignored, ParameterTree
from .assemble import Entry, assemble
from .scope import find_scope, unscoped
from .table import TRANSPOSE, Row, Skip, Table

FORMAT = "google-tf"
#: A google-research/bert config's "gelu" is the tanh approximation it was trained with.
DEFAULT_ACTIVATION = "gelu_tanh"
PREFIX_NAME = "bert_model.ckpt"
CONFIG_FILE = "bert_config.json"
VOCAB_FILE = "vocab.txt"
#: The files of the checkpoint directory this module writes (what `convert --force` may replace).
OWNED_FILES = (f"{PREFIX_NAME}.index", f"{PREFIX_NAME}.data-*", f"{PREFIX_NAME}.meta", "checkpoint", CONFIG_FILE)
#: Keys of a Keras object-based checkpoint end so; those bundles belong to another reader.
KERAS_OBJECT_KEY_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


def _norm_rows(canonical: str, name: str) -> tuple[Row, ...]:
    return (Row(f"{canonical}.gamma", f"{name}/gamma"), Row(f"{canonical}.beta", f"{name}/beta"))


def _dense_rows(canonical: str, name: str) -> tuple[Row, ...]:
    return (Row(f"{canonical}.kernel", f"{name}/kernel"), Row(f"{canonical}.bias", f"{name}/bias"))


_LAYER = "bert/encoder/layer_{i}"

TABLE = Table("google-tf", (
    Row("embeddings.word", "bert/embeddings/word_embeddings"),
    Row("embeddings.token_type", "bert/embeddings/token_type_embeddings"),
    Row("embeddings.position", "bert/embeddings/position_embeddings"),
    *_norm_rows("embeddings.norm", "bert/embeddings/LayerNorm"),
    *_dense_rows("layers.{i}.attention.query", f"{_LAYER}/attention/self/query"),
    *_dense_rows("layers.{i}.attention.key", f"{_LAYER}/attention/self/key"),
    *_dense_rows("layers.{i}.attention.value", f"{_LAYER}/attention/self/value"),
    *_dense_rows("layers.{i}.attention.output", f"{_LAYER}/attention/output/dense"),
    *_norm_rows("layers.{i}.attention_norm", f"{_LAYER}/attention/output/LayerNorm"),
    *_dense_rows("layers.{i}.ffn.intermediate", f"{_LAYER}/intermediate/dense"),
    *_dense_rows("layers.{i}.ffn.output", f"{_LAYER}/output/dense"),
    *_norm_rows("layers.{i}.ffn_norm", f"{_LAYER}/output/LayerNorm"),
    *_dense_rows("pooler", "bert/pooler/dense"),
    *_dense_rows("mlm.transform", "cls/predictions/transform/dense"),
    *_norm_rows("mlm.norm", "cls/predictions/transform/LayerNorm"),
    Row("mlm.output_bias", "cls/predictions/output_bias"),
    Row("nsp.kernel", "cls/seq_relationship/output_weights", TRANSPOSE),
    Row("nsp.bias", "cls/seq_relationship/output_bias"),
), skips=(
    Skip("global_step", "training step counter, not a parameter"),
    Skip("*/adam_m", "Adam optimizer slot (first moment)"),
    Skip("*/adam_v", "Adam optimizer slot (second moment)"),
    Skip("*/Momentum", "optimizer slot (momentum)"),
    Skip("AdamWeightDecayOptimizer*", "optimizer state"),
    Skip("output_weights", "fine-tuned classifier head, not part of BERT pre-training"),
    Skip("output_bias", "fine-tuned classifier head, not part of BERT pre-training"),
    Skip("cls/squad/*", "fine-tuned SQuAD head, not part of BERT pre-training"),
    Skip("cls/classifier/*", "fine-tuned classifier head, not part of BERT pre-training"),
))


# --- finding the files ----------------------------------------------------------------------


def _is_google_bundle(prefix: Path) -> bool:
    try:
        names = tf_bundle.BundleReader(prefix).entries
    except Exception:  # sniffing must not fail: the reader reports errors properly later
        return True
    return not any(name.endswith(KERAS_OBJECT_KEY_SUFFIX) for name in names)


def candidates(directory: Path) -> list[Path]:
    """The Google-named bundles a directory holds (by `checkpoint` file, or each `*.index`)."""
    try:
        prefix = tf_bundle.resolve_prefix(directory)
    except Exception:
        prefixes = [p.with_name(p.name[:-len(tf_bundle.INDEX_SUFFIX)])
                    for p in sorted(directory.glob("*" + tf_bundle.INDEX_SUFFIX))]
        return [p for p in prefixes if _is_google_bundle(p)]
    return [prefix] if _is_google_bundle(prefix) else []


def sniff(path: Path) -> str | None:
    prefix = tf_bundle.bundle_prefix_of(path)
    if prefix is None or not _looks_like_index(Path(f"{prefix}{tf_bundle.INDEX_SUFFIX}")):
        return None
    return FORMAT if _is_google_bundle(prefix) else None


def _looks_like_index(index: Path) -> bool:
    """An SSTable ends with its 8-byte magic number."""
    try:
        with open(index, "rb") as f:
            f.seek(0, 2)
            if f.tell() < tf_bundle.FOOTER_SIZE:
                return True  # too short to be anything else: let the reader say what is wrong
            f.seek(-8, 2)
            return int.from_bytes(f.read(8), "little") == tf_bundle.TABLE_MAGIC
    except OSError:
        return False


# --- reading --------------------------------------------------------------------------------


def read(path: Path, *, config_path: Path | None = None, num_heads: int | None = None) -> ParameterTree:
    """Read a Google TF1 checkpoint (prefix, `.index`, data file or directory) from its index.

    The BERT may sit under a scope (`scope.find_scope`: "module/" in google-research/bert's
    `run_classifier_with_tfhub` fine-tunes, beside the task head); its names are read without it, and every
    entry outside it is reported as ignored.
    """
    prefix = tf_bundle.resolve_prefix(path)
    reader = tf_bundle.BundleReader(prefix)
    scope = find_scope(reader.index_path, reader.entries, TABLE)
    entries = []
    ignored_strings = []
    for name, entry in reader.entries.items():
        if entry.dtype is None:  # strings and other non-numeric entries are never parameters
            ignored_strings.append(Ignored(name, f"non-numeric entry ({tf_bundle.tf_dtype_name(entry.tf_dtype)})", 0,
                                           tf_bundle.tf_dtype_name(entry.tf_dtype), entry.shape))
            continue
        if scope and not name.startswith(scope) and TABLE.match(name) is not None:
            ignored_strings.append(Ignored(name, f"a BERT name outside the scope {scope!r} the model was found "
                                                 f"under", entry.numel, str(entry.dtype), entry.shape))
            continue
        entries.append(Entry(name, reader.tensor(name), reader.data_path(entry.shard_id)))
    directory = prefix.parent
    config = _config(directory, config_path)
    vocab = directory / VOCAB_FILE
    # The data files its entries name (a header may claim any number of shards; only these are read).
    shards = sorted({entry.shard_id for entry in reader.entries.values()})
    files = [reader.index_path] + [reader.data_path(i) for i in shards]
    tree = assemble(
        format_name=FORMAT, path=prefix, entries=entries, table=TABLE, config=config,
        default_activation=DEFAULT_ACTIVATION, num_heads=num_heads, files=files,
        vocab=vocab if vocab.is_file() else None, extra_ignored=ignored_strings,
        rename=unscoped(scope),
    )
    tree.scope = scope
    return tree


def _config(directory: Path, config_path: Path | None) -> BertConfig | None:
    candidate = config_path or directory / CONFIG_FILE
    if config_path is None and not candidate.is_file():
        return None
    return load_config_file(candidate, gelu_means_for_google=DEFAULT_ACTIVATION)


# --- writing --------------------------------------------------------------------------------


def tensors_to_write(tree: ParameterTree, *, drop_untied_decoder: bool = False) -> list[tf_bundle.TensorSource]:
    """(name, dtype, shape, load) for every tensor of a Google checkpoint of `tree`."""
    if tree.conditional:
        raise bad_input(tree.path, "conditional LayerNorm (bert4keras layer_norm_cond) has no Google "
                                   "TF equivalent; convert it --to bert4keras instead")
    if tree.has_untied_decoder and not drop_untied_decoder:
        decoder = tree["mlm.decoder"]
        raise bad_input(tree.path, f"{decoder.source} is an untied MLM decoder (tie_word_embeddings is false), "
                                   f"and Google checkpoints have no decoder matrix: writing one would lose it. "
                                   f"Pass --drop-untied-decoder to write it without (the word embeddings then "
                                   f"serve as the decoder)")
    sources = []
    for param in tree:
        spelled = TABLE.spelling(param.name)
        if spelled is None:  # copies of tied tensors, or a dropped decoder
            continue
        name, layout = spelled
        tensor = layout.to_format(param.tensor)
        sources.append((name, tensor.dtype, tuple(tensor.shape), tensor.read))
    return sources


def write(tree: ParameterTree, directory: Path, *, options) -> list[Path]:
    """Write `tree` as `bert_model.ckpt.{index,data-00000-of-00001}`, `bert_config.json` and
    `checkpoint` into the (new, empty) `directory`."""
    prefix = directory / PREFIX_NAME
    sources = tensors_to_write(tree, drop_untied_decoder=options.drop_untied_decoder)
    if options.on_tensor:
        sources = [(n, d, s, _reporting(load, options.on_tensor)) for n, d, s, load in sources]
    tf_bundle.write_bundle(prefix, sources)
    (directory / CONFIG_FILE).write_text(json.dumps(tree.config.to_google_dict(), indent=2, sort_keys=True) + "\n")
    (directory / "checkpoint").write_text(
        f'model_checkpoint_path: "{PREFIX_NAME}"\nall_model_checkpoint_paths: "{PREFIX_NAME}"\n')
    return [Path(f"{prefix}.data-00000-of-00001"), Path(f"{prefix}.index"), directory / CONFIG_FILE,
            directory / "checkpoint"]


def _reporting(load, on_tensor):
    def wrapped():
        array = load()
        on_tensor(array.nbytes)
        return array
    return wrapped
