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
import re
from pathlib import Path

from ... import json_text
from ...config import BertConfig
from ...containers.tensorflow import sstable, bundle as tf_bundle, prefix as tf_prefix
from ...containers.tensorflow import bundle_write as tf_bundle_write
from ... import families
from ...errors import bad_input
from ...config.dialects import google_config_dict
from ...records import record, replace
from ...tree import Ignored, ParameterTree
from ..assemble import Entry, assemble
from ..configs import config_beside, find_config
from ..scope import find_scope, unscoped
from ..table import TRANSPOSE, Row, Skip, Table, dense_rows, no_place_for, norm_rows, refuse_untied_decoder

FORMAT = "google-tf"
#: google-research/bert's, albert's and electra's "gelu" are all the tanh approximation.
DEFAULT_ACTIVATION = "gelu_tanh"
PREFIX_NAME = "bert_model.ckpt"
CONFIG_FILE = "bert_config.json"
VOCAB_FILE = "vocab.txt"
#: The files of the checkpoint directory this module writes (what `convert --force` may replace).
OWNED_FILES = (f"{PREFIX_NAME}.index", f"{PREFIX_NAME}.data-*", f"{PREFIX_NAME}.meta", "checkpoint", CONFIG_FILE)
#: Keys of a Keras object-based checkpoint end so; those bundles belong to another reader.
KERAS_OBJECT_KEY_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
#: The models an ELECTRA pre-training checkpoint holds, the default (the masked LM) first.
MODELS = ("generator", "discriminator")
#: The sizes brightmart/albert_zh released, each with its `albert_config_{size}.json`.
ALBERT_ZH_SIZES = ("tiny", "base", "large", "xlarge", "xxlarge")


def _layer_rows(prefix: str, *, attention: str = "attention", ffn_in: str = "intermediate/dense",
                ffn_out: str = "output/dense", attention_norm: str = "attention/output/LayerNorm",
                ffn_norm: str = "output/LayerNorm") -> tuple[Row, ...]:
    """The rows of one transformer layer at `prefix` (which holds `{i}`)."""
    return (
        *dense_rows("layers.{i}.attention.query", f"{prefix}/{attention}/self/query"),
        *dense_rows("layers.{i}.attention.key", f"{prefix}/{attention}/self/key"),
        *dense_rows("layers.{i}.attention.value", f"{prefix}/{attention}/self/value"),
        *dense_rows("layers.{i}.attention.output", f"{prefix}/{attention}/output/dense"),
        *norm_rows("layers.{i}.attention_norm", f"{prefix}/{attention_norm}"),
        *dense_rows("layers.{i}.ffn.intermediate", f"{prefix}/{ffn_in}"),
        *dense_rows("layers.{i}.ffn.output", f"{prefix}/{ffn_out}"),
        *norm_rows("layers.{i}.ffn_norm", f"{prefix}/{ffn_norm}"),
    )


def _embedding_rows(scope: str) -> tuple[Row, ...]:
    return (
        Row("embeddings.word", f"{scope}/word_embeddings"),
        Row("embeddings.token_type", f"{scope}/token_type_embeddings"),
        Row("embeddings.position", f"{scope}/position_embeddings"),
        *norm_rows("embeddings.norm", f"{scope}/LayerNorm"),
    )


def _mlm_rows(scope: str, *, transform: str, norm: str) -> tuple[Row, ...]:
    return (*dense_rows("mlm.transform", f"{scope}/{transform}"), *norm_rows("mlm.norm", f"{scope}/{norm}"),
            Row("mlm.output_bias", f"{scope}/output_bias"))


_SKIPS = (
    Skip("global_step", "training step counter, not a parameter"),
    Skip("*/adam_m", "Adam optimizer slot (first moment)"),
    Skip("*/adam_v", "Adam optimizer slot (second moment)"),
    Skip("*/Momentum", "optimizer slot (momentum)"),
    Skip("AdamWeightDecayOptimizer*", "optimizer state"),
    Skip("output_weights", "fine-tuned classifier head, not part of BERT pre-training"),
    Skip("output_bias", "fine-tuned classifier head, not part of BERT pre-training"),
    Skip("cls/squad/*", "fine-tuned SQuAD head, not part of BERT pre-training"),
    Skip("cls/classifier/*", "fine-tuned classifier head, not part of BERT pre-training"),
)

TABLE = Table("google-tf", (
    *_embedding_rows("bert/embeddings"),
    *_layer_rows("bert/encoder/layer_{i}"),
    *dense_rows("pooler", "bert/pooler/dense"),
    *_mlm_rows("cls/predictions", transform="transform/dense", norm="transform/LayerNorm"),
    Row("nsp.kernel", "cls/seq_relationship/output_weights", TRANSPOSE),
    Row("nsp.bias", "cls/seq_relationship/output_bias"),
), skips=_SKIPS)

#: ALBERT's layers are spelled by stored index in the table; `_albert_names` translates
#: `group_{g}/inner_group_{j}` to and from it.
_ALBERT_STORED = "bert/encoder/transformer/stored_layer_{i}"
_ALBERT_GROUP = re.compile(r"(?<=bert/encoder/transformer/)group_(0|[1-9]\d*)/inner_group_(0|[1-9]\d*)(?=/)")

ALBERT_TABLE = Table("google-tf albert", (
    *_embedding_rows("bert/embeddings"),
    *dense_rows("embeddings.projection", "bert/encoder/embedding_hidden_mapping_in"),
    *_layer_rows(_ALBERT_STORED, attention="attention_1", ffn_in="ffn_1/intermediate/dense",
                 ffn_out="ffn_1/intermediate/output/dense", attention_norm="LayerNorm", ffn_norm="LayerNorm_1"),
    *dense_rows("pooler", "bert/pooler/dense"),
    *_mlm_rows("cls/predictions", transform="transform/dense", norm="transform/LayerNorm"),
    # ALBERT pre-trains this head on sentence order (SOP), with NSP's shape and name.
    Row("sop.kernel", "cls/seq_relationship/output_weights", TRANSPOSE),
    Row("sop.bias", "cls/seq_relationship/output_bias"),
), skips=_SKIPS)

#: brightmart/albert_zh's modeling.py: BERT's names, its one shared layer at `layer_shared`
#: (stored layer 0, applied L times), the bias-free word-only projection `word_embeddings_2`
#: [E, H] (the position and token-type tables and the embedding LayerNorm are H wide, the MLM
#: transform H -> H), and sentence-order prediction in `cls/seq_relationship`.
ALBERT_ZH_TABLE = Table("google-tf albert_zh (brightmart)", (
    Row("embeddings.word", "bert/embeddings/word_embeddings"),
    Row("embeddings.word_projection.kernel", "bert/embeddings/word_embeddings_2"),
    *_embedding_rows("bert/embeddings")[1:],
    *(Row(row.canonical.replace("{i}", "0"), row.name, row.layout)
      for row in _layer_rows("bert/encoder/layer_shared")),
    *dense_rows("pooler", "bert/pooler/dense"),
    *_mlm_rows("cls/predictions", transform="transform/dense", norm="transform/LayerNorm"),
    Row("sop.kernel", "cls/seq_relationship/output_weights", TRANSPOSE),
    Row("sop.bias", "cls/seq_relationship/output_bias"),
), skips=_SKIPS)

_GENERATOR_SKIPS = (
    Skip("electra/*", "the discriminator (--model discriminator)"),
    Skip("discriminator_predictions/*", "the discriminator's replaced-token head (--model discriminator)"),
)
_DISCRIMINATOR_SKIPS = (
    Skip("generator/*", "the generator (--model generator)"),
    Skip("generator_predictions/*", "the generator's masked-LM head (--model generator)"),
)


def _generator_table(embeddings: str) -> Table:
    return Table("google-tf electra generator", (
        *_embedding_rows(embeddings),
        *dense_rows("embeddings.projection", "generator/embeddings_project"),
        *_layer_rows("generator/encoder/layer_{i}"),
        *_mlm_rows("generator_predictions", transform="dense", norm="LayerNorm"),
    ), skips=_SKIPS + _GENERATOR_SKIPS)


#: The generator with the discriminator's embeddings (ELECTRA's default, shared embeddings)...
ELECTRA_GENERATOR_TABLE = _generator_table("electra/embeddings")
#: ... or with its own (`untied_generator_embeddings`).
ELECTRA_UNTIED_GENERATOR_TABLE = _generator_table("generator/embeddings")

ELECTRA_DISCRIMINATOR_TABLE = Table("google-tf electra discriminator", (
    *_embedding_rows("electra/embeddings"),
    *dense_rows("embeddings.projection", "electra/embeddings_project"),
    *_layer_rows("electra/encoder/layer_{i}"),
    *dense_rows("rtd.dense", "discriminator_predictions/dense"),
    *dense_rows("rtd.output", "discriminator_predictions/dense_1"),
), skips=_SKIPS + _DISCRIMINATOR_SKIPS)


@record
class Model:
    """A model a Google checkpoint may hold, and how to read it.

    Attributes:
      family: the model type (`BertConfig.model_type`).
      name: "generator" or "discriminator" for ELECTRA's two models, else None.
      table: its names.
      config_names: config files that describe it, looked for beside the checkpoint in order
        (`{stem}`: the checkpoint prefix's name before `.ckpt`).
      own: canonical-name prefixes only this model has (its layers and head): the file holds the
        model when one of its names reads as one of them.
    """

    family: str
    name: str | None
    table: Table
    config_names: tuple[str, ...]
    own: tuple[str, ...] = ("layers.",)


_BERT_CONFIGS = ("{stem}.bert_config.json", CONFIG_FILE)
BERT = Model("bert", None, TABLE, _BERT_CONFIGS)
ALBERT = Model("albert", None, ALBERT_TABLE, ("{stem}.albert_config.json", "albert_config.json", *_BERT_CONFIGS))
#: brightmart's releases name the config after the size (albert_tiny_zh/albert_config_tiny.json).
ALBERT_ZH = Model("albert", None, ALBERT_ZH_TABLE,
                  (*ALBERT.config_names, *(f"albert_config_{size}.json" for size in ALBERT_ZH_SIZES)),
                  ("embeddings.word_projection.",))
ELECTRA_GENERATOR = Model("electra", "generator", ELECTRA_GENERATOR_TABLE,
                          ("{stem}.generator_config.json", "generator_config.json"), ("layers.", "mlm."))
ELECTRA_UNTIED_GENERATOR = Model("electra", "generator", ELECTRA_UNTIED_GENERATOR_TABLE,
                                 ELECTRA_GENERATOR.config_names, ("embeddings.word",))
ELECTRA_DISCRIMINATOR = Model("electra", "discriminator", ELECTRA_DISCRIMINATOR_TABLE,
                              ("{stem}.discriminator_config.json", "discriminator_config.json"), ("layers.", "rtd."))
#: The models each family (or variant: `families.member`) is written as; a family with several
#: models (ELECTRA's) writes the tree's own, else the one its heads make it.
MODELS_TO_WRITE = {"bert": (BERT,), "albert": (ALBERT,), "albert_zh": (ALBERT_ZH,),
                   "electra": (ELECTRA_GENERATOR, ELECTRA_DISCRIMINATOR)}
#: The families this module has tables to write (RoBERTa was never a Google TF checkpoint), and
#: brightmart's ALBERT variant (`families.member`), which only this format holds.
WRITES_FAMILIES = tuple(MODELS_TO_WRITE)
#: Every model, in the order ties are settled (the most common first).
ALL_MODELS = (BERT, ALBERT, ALBERT_ZH, ELECTRA_UNTIED_GENERATOR, ELECTRA_GENERATOR, ELECTRA_DISCRIMINATOR)


def _albert_names(names: list[str], inner_groups: int | None) -> dict[str, str]:
    """File name -> the ALBERT table's spelling: `group_{g}/inner_group_{j}` becomes stored
    layer g*J + j. J is the config's `inner_group_num`, else the names' own count."""
    found = [(name, match) for name in names if (match := _ALBERT_GROUP.search(name))]
    inner = inner_groups or 1 + max((int(m.group(2)) for _, m in found), default=0)
    out = {}
    for name, match in found:
        group, j = int(match.group(1)), int(match.group(2))
        if j < inner:  # an inner index beyond J is another model's: left unmatched, so reported
            out[name] = name[:match.start()] + f"stored_layer_{group * inner + j}" + name[match.end():]
    return out


def albert_name(spelled: str, inner_groups: int) -> str:
    """The ALBERT table's spelling of stored layer k -> Google's `group_{k // J}/inner_group_{k % J}`."""
    def group(match: re.Match) -> str:
        k = int(match.group(1))
        return f"group_{k // inner_groups}/inner_group_{k % inner_groups}"
    return re.sub(r"stored_layer_(\d+)", group, spelled)


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
        prefix = tf_prefix.resolve_prefix(directory)
    except Exception:
        prefixes = [p.with_name(p.name[:-len(tf_bundle.INDEX_SUFFIX)])
                    for p in sorted(directory.glob("*" + tf_bundle.INDEX_SUFFIX))]
        return [p for p in prefixes if _is_google_bundle(p)]
    return [prefix] if _is_google_bundle(prefix) else []


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
    readings = [_reading(path, names, model, inner) for model in ALL_MODELS]
    best = max(readings, key=lambda r: r.matches)  # the first of equals: the order of ALL_MODELS
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


def _albert_inner_groups(prefix: Path, config_path: Path | None) -> int | None:
    """inner_group_num from the ALBERT config that applies, if one does (else the names say)."""
    config = find_config(prefix.parent, config_path, _config_names(prefix, ALBERT, alone=True))
    if config is None:
        return None
    try:
        data = json_text.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None  # reading the config properly reports it
    value = data.get("inner_group_num") if isinstance(data, dict) else None
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
                           activation=DEFAULT_ACTIVATION, family=chosen.model.family)
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


def tensors_to_write(tree: ParameterTree, *, drop_untied_decoder: bool = False) -> list[tf_bundle_write.TensorSource]:
    """(name, dtype, shape, load) for every tensor of a Google checkpoint of `tree`."""
    if tree.conditional:
        raise bad_input(tree.path, "conditional LayerNorm (bert4keras layer_norm_cond) has no Google "
                                   "TF equivalent; convert it --to bert4keras instead")
    refuse_untied_decoder(tree, drop_untied_decoder, "Google checkpoints have no decoder matrix "
                                                     "(tie_word_embeddings is false)")
    model = model_to_write(tree)
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
        sources.append((name, tensor.dtype, tuple(tensor.shape), tensor.read))
    if unwritten:
        what = f"an ELECTRA {model.name}" if model.name else f"a Google {model.family.upper()}"
        raise bad_input(tree.path, no_place_for(tree, f"{what} checkpoint", unwritten))
    return sources


def write(tree: ParameterTree, directory: Path, *, options) -> list[Path]:
    """Write `tree` as `bert_model.ckpt.{index,data-00000-of-00001}`, `bert_config.json` and
    `checkpoint` into the (new, empty) `directory`. An ELECTRA model is written alone, under its
    own names (`electra/...` for the discriminator, `generator/...` with the embeddings it uses
    under `electra/embeddings` for the generator), with its config as `bert_config.json`."""
    prefix = directory / PREFIX_NAME
    sources = tensors_to_write(tree, drop_untied_decoder=options.drop_untied_decoder)
    if options.on_tensor:
        sources = [(n, d, s, _reporting(load, options.on_tensor)) for n, d, s, load in sources]
    tf_bundle_write.write_bundle(prefix, sources)
    (directory / CONFIG_FILE).write_text(json.dumps(google_config_dict(tree.config), indent=2, sort_keys=True) + "\n")
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
