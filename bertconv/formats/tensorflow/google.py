"""Google's TF1 checkpoints of the BERT family: a tensor bundle with the names Google's code
gives its variables (google-research/bert, google-research/albert, google-research/electra).

Layout: kernels are `[in, out]` as in the canonical tree; the one exception is the NSP (ALBERT:
SOP) weight `cls/seq_relationship/output_weights`, stored `[2, H]`. Google stores no decoder
matrix: the MLM logits use the word-embedding table (tying by construction), so a tree with an
untied decoder cannot be written here without loss.

One table per model of the family, chosen by the names the file holds (the table matching most
of them; a config beside the checkpoint then says the sizes):

    bert                  `bert/embeddings/*`, `bert/encoder/layer_{i}/*`, `bert/pooler`, `cls/*`
    albert                `bert/embeddings/*` [*, E], `bert/encoder/embedding_hidden_mapping_in`
                          (E -> H), `bert/encoder/transformer/group_{g}/inner_group_{j}/*`: stored
                          layer k = g*J + j (J = inner_group_num), `cls/predictions/*` (transform
                          H -> E), `cls/seq_relationship/*`: sentence-order prediction
    albert_zh             brightmart/albert_zh: `bert/embeddings/word_embeddings` [V, E] and its
                          bias-free projection `word_embeddings_2` [E, H], the other tables [*, H],
                          one shared `bert/encoder/layer_shared/*` (BERT's layer names), `cls/*`
                          (transform H -> H; SOP): `BertConfig.word_projection`. A pre-LN config
                          (`ln_type: "preln"`, its xxlarge) is refused: the names are the same
    electra generator     shared `electra/embeddings/*` [*, E], `generator/embeddings_project`,
                          `generator/encoder/layer_{i}/*`, `generator_predictions/*`: the masked LM
    electra discriminator `electra/embeddings/*`, `electra/embeddings_project`,
                          `electra/encoder/layer_{i}/*`, `discriminator_predictions/dense` [H, H]
                          and `dense_1` [H, 1]: replaced-token detection
    roformer              ZhuiyiTechnology's RoFormer (trained with bert4keras, saved through its
                          `variable_mapping`): BERT's names without `position_embeddings` (rotary
                          positions), the embeddings projected E -> H by
                          `bert/encoder/embedding_hidden_mapping_in` when E differs; "gelu" is erf
    nezha                 Huawei's NEZHA (google-research/bert's code with relative positions,
                          clipped at 64): BERT's names without `position_embeddings`

BERT's names without a position table are RoFormer's or NEZHA's; the config says which: its
`model_type`, else NEZHA when it states `use_relative_position` true (Huawei's code builds a
position table without it) or `max_relative_position`, else RoFormer (its authors' configs are
plain `bert_config.json` files); `use_relative_position` false says BERT. Without a config the
names cannot tell the two apart, and reading refuses.

An ELECTRA pre-training checkpoint holds both models (sharing the embeddings); `read` gives one,
the generator unless `model="discriminator"` (the generator is the masked LM), and reports the
other model's entries as ignored, naming the `--model` that reads them. Writing writes one model:
the tree's, in its own names, as a checkpoint holding that model only.

Which config applies: `--config` if given; else the first file beside the checkpoint named in
its model's `config_names` (`{stem}` is the checkpoint prefix's name before `.ckpt`, as in
`electra-180g-small.generator_config.json` beside `electra-180g-small.ckpt.index`). An ELECTRA
model's own config (`generator_config.json`, `discriminator_config.json`) comes first; the
generic `bert_config.json` applies to an ELECTRA model only when the checkpoint holds that
model alone, since it cannot say which of two models it describes.
"""

from __future__ import annotations

import json
from pathlib import Path

from ... import json_text
from ...config import BertConfig
from ...containers.tensorflow import sstable, bundle as tf_bundle, prefix as tf_prefix
from ... import families
from ...errors import bad_input
from ...config.dialects import google_config_dict
from ...lazy import lazy_module
from ...records import record, replace
from ...tree import Ignored, ParameterTree
from ..assemble import Entry, assemble
from ..configs import config_beside, find_config
from ..scope import find_scope, unscoped
from ..table import no_place_for, refuse_untied_decoder
from .google_tables import (  # noqa: F401 (TABLE, CONFIG_FILE, WRITES_FAMILIES: the tests' and the registry's)
    ALBERT, ALBERT_ZH, ALL_MODELS, BERT, CONFIG_FILE, MODELS_TO_WRITE, NEZHA, NEZHA_MAX_RELATIVE_POSITION,
    POSITION_NAME, ROFORMER, TABLE, WRITES_FAMILIES, Model, _BERT_CONFIGS, _albert_names, albert_name,
)

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from ...containers.stream import TensorSource
    from ...containers.tensorflow import bundle_write as tf_bundle_write
else:  # imported by the writer: reading a checkpoint writes nothing
    tf_bundle_write = lazy_module("bertconv.containers.tensorflow.bundle_write")

FORMAT = "google-tf"
#: google-research/bert's, albert's and electra's "gelu" are all the tanh approximation.
DEFAULT_ACTIVATION = "gelu_tanh"
PREFIX_NAME = "bert_model.ckpt"
VOCAB_FILE = "vocab.txt"
#: The files of the checkpoint directory this module writes (what `convert --force` may replace).
OWNED_FILES = (f"{PREFIX_NAME}.index", f"{PREFIX_NAME}.data-*", f"{PREFIX_NAME}.meta", "checkpoint", CONFIG_FILE)
#: Keys of a Keras object-based checkpoint end so; those bundles belong to another reader.
KERAS_OBJECT_KEY_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
#: The models an ELECTRA pre-training checkpoint holds, the default (the masked LM) first.
MODELS = ("generator", "discriminator")


# --- finding the files ----------------------------------------------------------------------


def _is_google_bundle(prefix: Path) -> bool:
    try:
        names = tf_bundle.BundleReader(prefix).entries
    except Exception:  # sniffing must not fail: the reader reports errors properly later
        return True
    return not any(name.endswith(KERAS_OBJECT_KEY_SUFFIX) for name in names)


def candidates(directory: Path) -> list[Path]:
    """The Google-named bundles a directory holds (by `checkpoint` file, or each `*.index`)."""
    return [prefix for prefix in tf_prefix.bundle_prefixes(directory) if _is_google_bundle(prefix)]


def sniff(path: Path) -> str | None:
    prefix = tf_prefix.bundle_prefix_of(path)
    if prefix is None or not _looks_like_index(Path(f"{prefix}{tf_bundle.INDEX_SUFFIX}")):
        return None
    return FORMAT if _is_google_bundle(prefix) else None


def _looks_like_index(index: Path) -> bool:
    """An SSTable ends with its 8-byte magic number."""
    try:
        with open(index, "rb") as f:
            f.seek(0, 2)
            if f.tell() < sstable.FOOTER_SIZE:
                return True  # too short to be anything else: let the reader say what is wrong
            f.seek(-8, 2)
            return int.from_bytes(f.read(8), "little") == sstable.TABLE_MAGIC
    except OSError:
        return False


# --- reading --------------------------------------------------------------------------------


@record
class _Reading:
    """A model found in a file: the model, the scope its names sit under, and the file names
    renamed to its table's spelling (ALBERT's stored layers)."""

    model: Model
    scope: str
    spelled: dict[str, str]
    matches: int


def _reading(path: Path, names: list[str], model: Model, inner_groups: int | None) -> _Reading:
    spelled = _albert_names(names, inner_groups) if model is ALBERT else {}
    renamed = [spelled.get(n, n) for n in names]
    scope = find_scope(path, renamed, model.table)
    matched = [model.table.match(n[len(scope):]) for n in renamed if n.startswith(scope)]
    owned = sum(1 for m in matched if m is not None and m.canonical.startswith(model.own))
    count = sum(1 for m in matched if m is not None)
    return _Reading(model, scope, spelled, count if owned else 0)


def _choose_model(path: Path, names: list[str], wanted: str | None, prefix: Path,
                  config_path: Path | None) -> tuple[_Reading, bool]:
    """The model to read, and whether the file holds it alone: the family whose table reads
    most names; within ELECTRA, `wanted`, else the generator if the file holds one (the masked
    LM), else the discriminator."""
    inner = _albert_inner_groups(prefix, config_path)
    readings = []
    for model in ALL_MODELS:
        readings.append(_reading(path, names, model, inner))
        if readings[-1].matches == len(names) and model.name is None:
            break  # every name read, by a family of one model: none after it can read more, nor win a tie
    best = max(readings, key=lambda r: r.matches)  # the first of equals: the order of ALL_MODELS
    if best.model is BERT:
        best = _positionless(path, best, names, prefix, config_path)
    if best.model.name is None:
        if wanted is not None:
            raise bad_input(path, f"holds one model ({best.model.family}); --model {wanted} applies to "
                                  f"ELECTRA pre-training checkpoints, which hold a generator and a discriminator")
        return best, True
    held = {}
    for reading in readings:  # the untied generator before the shared one: its names are the more specific
        if reading.model.name is not None and reading.matches and reading.model.name not in held:
            held[reading.model.name] = reading
    name = wanted or next(m for m in MODELS if m in held)
    if name not in held:
        raise bad_input(path, f"is an ELECTRA checkpoint holding no {name} (it holds the "
                              f"{' and the '.join(held)}); drop --model {name}")
    return held[name], len(held) == 1


def _albert_zh_config(config: BertConfig) -> BertConfig:
    """brightmart's config is an ALBERT config; its names say it computes brightmart's way."""
    provenance = {**config.provenance, "word_projection": "format", "embedding_projection": "format"}
    return replace(config, word_projection=True, embedding_projection=False, provenance=provenance)


def _positionless(path: Path, reading: _Reading, names: list[str], prefix: Path,
                  config_path: Path | None) -> _Reading:
    """BERT's names without a position table are RoFormer's or NEZHA's, whose positions are
    computed; the config says which (`_positionless_family`), or that it is a BERT all the same."""
    scope = reading.scope
    if any(name[len(scope):] == POSITION_NAME for name in names if name.startswith(scope)):
        return reading
    found, data = _config_data(prefix, config_path, BERT)
    if found is None:
        raise bad_input(path, f"holds BERT's names without a position table ({POSITION_NAME}), and no config "
                              f"beside it says which model computes its positions: ZhuiyiTechnology's RoFormer "
                              f"(rotary) or Huawei's NEZHA (relative); pass its bert_config.json with --config "
                              f"(NEZHA's states use_relative_position), or one stating \"model_type\": "
                              f"\"roformer\" or \"nezha\"")
    model = None if data is None else _positionless_model(data)
    return reading if model is None else _reading(path, names, model, None)


def _positionless_model(data: dict) -> Model | None:
    """RoFormer or NEZHA for the config of a checkpoint without a position table, or None (a BERT's
    config: its missing table is reported). Huawei's code builds the table unless its config states
    `use_relative_position`; google-research/bert's always builds it; RoFormer's authors released
    plain `bert_config.json` files."""
    model_type = data.get("model_type")
    if model_type is not None:
        return next((model for model in (ROFORMER, NEZHA) if model.family == model_type), None)
    if data.get("use_relative_position") is True or "max_relative_position" in data:
        return NEZHA
    return None if "use_relative_position" in data else ROFORMER


def _config_data(prefix: Path, config_path: Path | None, model: Model) -> tuple[Path | None, dict | None]:
    """The config that applies to `model` alone, and its JSON object (None when it cannot be read:
    reading the config properly reports that)."""
    config = find_config(prefix.parent, config_path, _config_names(prefix, model, alone=True))
    if config is None:
        return None, None
    try:
        data = json_text.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return config, None
    return config, data if isinstance(data, dict) else None


def _albert_inner_groups(prefix: Path, config_path: Path | None) -> int | None:
    """inner_group_num from the ALBERT config that applies, if one does (else the names say)."""
    _, data = _config_data(prefix, config_path, ALBERT)
    value = data.get("inner_group_num") if data is not None else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def read(path: Path, *, config_path: Path | None = None, num_heads: int | None = None,
         model: str | None = None) -> ParameterTree:
    """Read a Google TF1 checkpoint (prefix, `.index`, data file or directory) from its index.

    `model` picks one of an ELECTRA pre-training checkpoint's two models ("generator", the
    default, or "discriminator"); other checkpoints hold one model and refuse it.

    The model may sit under a scope (`scope.find_scope`: "module/" in google-research/bert's
    `run_classifier_with_tfhub` fine-tunes, beside the task head); its names are read without it, and every
    entry outside it is reported as ignored.
    """
    prefix = tf_prefix.resolve_prefix(path)
    reader = tf_bundle.BundleReader(prefix)
    directory = prefix.parent
    numeric = [name for name, entry in reader.entries.items() if entry.dtype is not None]
    chosen, alone = _choose_model(reader.index_path, numeric, model, prefix, config_path)
    table, scope = chosen.model.table, chosen.scope
    entries = []
    ignored_strings = []
    for name, entry in reader.entries.items():
        if entry.dtype is None:  # strings and other non-numeric entries are never parameters
            ignored_strings.append(Ignored(name, f"non-numeric entry ({tf_bundle.tf_dtype_name(entry.tf_dtype)})", 0,
                                           tf_bundle.tf_dtype_name(entry.tf_dtype), entry.shape))
            continue
        spelled = chosen.spelled.get(name, name)
        if scope and not spelled.startswith(scope) and table.match(spelled) is not None:
            ignored_strings.append(Ignored(name, f"a BERT name outside the scope {scope!r} the model was found "
                                                 f"under", entry.numel, str(entry.dtype), entry.shape))
            continue
        entries.append(Entry(name, reader.tensor(name), reader.data_path(entry.shard_id)))
    config = config_beside(directory, config_path, _config_names(prefix, chosen.model, alone=alone),
                           activation=chosen.model.gelu_means, family=chosen.model.family)
    if config is not None and chosen.model is ALBERT_ZH:
        config = _albert_zh_config(config)
    vocab = directory / VOCAB_FILE
    # The data files its entries name (a header may claim any number of shards; only these are read).
    shards = sorted({entry.shard_id for entry in reader.entries.values()})
    files = [reader.index_path] + [reader.data_path(i) for i in shards]
    unscope = unscoped(scope)
    tree = assemble(
        format_name=FORMAT, path=prefix, entries=entries, table=table, config=config,
        default_activation=DEFAULT_ACTIVATION, num_heads=num_heads, files=files,
        vocab=vocab if vocab.is_file() else None, extra_ignored=ignored_strings,
        rename=lambda name: unscope(chosen.spelled.get(name, name)), family=chosen.model.family,
    )
    tree.scope = scope
    tree.model = chosen.model.name
    if config is None and chosen.model is ALBERT_ZH:  # sizes from the shapes; the names say brightmart's
        tree.config = _albert_zh_config(tree.config)
    return tree


def _config_names(prefix: Path, model: Model, *, alone: bool) -> list[str]:
    """The config files that apply, in order (see the module docstring): the model's
    `config_names`; the generic `bert_config.json` names apply to one of ELECTRA's models only
    when the checkpoint holds it `alone`."""
    names = model.config_names + (_BERT_CONFIGS if model.name is not None and alone else ())
    stem = prefix.name.split(".ckpt")[0]
    return [name.format(stem=stem) for name in names]


# --- writing --------------------------------------------------------------------------------


def model_to_write(tree: ParameterTree) -> Model:
    """The Google model a tree is written as: its family's; for ELECTRA, its own model (the
    reader's), else the generator when it has the masked-LM head and the discriminator when not."""
    member = families.member(tree.config)
    if member not in MODELS_TO_WRITE:
        raise bad_input(tree.path, f"is a {member} model; Google's TF checkpoints hold BERT, ALBERT and ELECTRA only "
                                   f"(RoBERTa was never released in them): convert it --to hf")
    by_name = {model.name: model for model in MODELS_TO_WRITE[member]}
    name = getattr(tree, "model", None) or ("generator" if tree.heads.mlm else "discriminator")
    return by_name.get(None) or by_name[name]


def tensors_to_write(tree: ParameterTree, *, drop_untied_decoder: bool = False) -> list[TensorSource]:
    """(name, dtype, shape, load) for every tensor of a Google checkpoint of `tree`."""
    if tree.conditional:
        raise bad_input(tree.path, "conditional LayerNorm (bert4keras layer_norm_cond) has no Google "
                                   "TF equivalent; convert it --to bert4keras instead")
    refuse_untied_decoder(tree, drop_untied_decoder, "Google checkpoints have no decoder matrix "
                                                     "(tie_word_embeddings is false)")
    model = model_to_write(tree)
    _refuse_what_authors_code_cannot_compute(tree, model)
    sources, unwritten = [], []
    for param in tree:
        spelled = model.table.spelling(param.name)
        if spelled is None:  # copies of tied tensors, or a dropped decoder
            if tree.is_counted(param.name) and not param.name.startswith("mlm.decoder"):
                unwritten.append(param.name)
            continue
        name, layout = spelled
        if model is ALBERT:
            name = albert_name(name, tree.config.inner_group_num or 1)
        tensor = layout.to_format(param.tensor)
        sources.append((name, tensor.dtype, tuple(tensor.shape), tensor))
    if unwritten:
        what = f"an ELECTRA {model.name}" if model.name else f"a Google {model.family.upper()}"
        raise bad_input(tree.path, no_place_for(tree, f"{what} checkpoint", unwritten))
    return sources


def _refuse_what_authors_code_cannot_compute(tree: ParameterTree, model: Model) -> None:
    """RoFormer and NEZHA computations their authors' code (and bert4keras, which loads these
    checkpoints) does not have: values rotated too, distances clipped elsewhere than at 64."""
    config = tree.config
    if model is ROFORMER and config.rotary_value:
        raise bad_input(tree.path, "rotates its attention values by their positions too (rotary_value); RoFormer's "
                                   "authors' code (bert4keras, model='roformer') rotates queries and keys only, so "
                                   "it would compute another model: convert it --to hf")
    if model is NEZHA and config.max_relative_position != NEZHA_MAX_RELATIVE_POSITION:
        raise bad_input(tree.path, f"clips relative distances at max_relative_position {config.max_relative_position}; "
                                   f"Huawei's NEZHA code and bert4keras clip them at {NEZHA_MAX_RELATIVE_POSITION} "
                                   f"whatever the config says, so it would compute another model: convert it --to hf")


def write_caveats(tree: ParameterTree) -> list[str]:
    """What a library that reads the output computes otherwise: transformers' RoFormer TF loader
    has no place for the embedding projection."""
    if MODELS_TO_WRITE.get(families.member(tree.config)) == (ROFORMER,) and "embeddings.projection.kernel" in tree:
        return ["transformers' load_tf_weights_in_roformer (convert_roformer_original_tf_checkpoint_to_pytorch.py) "
                "has no place for bert/encoder/embedding_hidden_mapping_in (the projection E -> H) and stops on it; "
                "bert4keras (model='roformer') loads it: convert --to hf for transformers"]
    return []


def write(tree: ParameterTree, directory: Path, *, options) -> list[Path]:
    """Write `tree` as `bert_model.ckpt.{index,data-00000-of-00001}`, `bert_config.json` and
    `checkpoint` into the (new, empty) `directory`. An ELECTRA model is written alone, under its
    own names (`electra/...` for the discriminator, `generator/...` with the embeddings it uses
    under `electra/embeddings` for the generator), with its config as `bert_config.json`."""
    prefix = directory / PREFIX_NAME
    sources = tensors_to_write(tree, drop_untied_decoder=options.drop_untied_decoder)
    tf_bundle_write.write_bundle(prefix, sources, on_tensor=options.on_tensor)
    config = {**google_config_dict(tree.config), **model_to_write(tree).stated}
    (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (directory / "checkpoint").write_text(
        f'model_checkpoint_path: "{PREFIX_NAME}"\nall_model_checkpoint_paths: "{PREFIX_NAME}"\n')
    return [Path(f"{prefix}.data-00000-of-00001"), Path(f"{prefix}.index"), directory / CONFIG_FILE,
            directory / "checkpoint"]
