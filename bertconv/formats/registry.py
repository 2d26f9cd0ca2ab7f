"""Every checkpoint format bertconv reads or writes: one declarative `Format` entry each.

What differs by format derives from these entries and is written nowhere else: which reader a
path goes to (`formats.resolve`, trying sniffers by `specificity`), the `convert --to` targets
(`TARGETS`) and whether each writes a file or a directory, the numeric conventions a runtime
computes a checkpoint with (`numerics`, looked up by the runtime through `format_named`), what
the "no checkpoint here" messages list (`description`). Which fixtures the tests read, convert,
keep untouched and fuzz for each format is the tests' business (tests/format_fixtures.py).

Adding a format is its module (table, `sniff`, `candidates`, `read`, and `write` if it writes)
plus one entry in `FORMATS`; docs/ARCHITECTURE.md walks through it.

The entries name their modules, which are imported when first used: an entry states, as plain
values, everything a command needs before it reads a checkpoint (names, files, models), and the
containers its files may be (`containers`), so that `resolve` imports only the modules whose
container a path may be (judged by `container_hints`: names, a few magic bytes, a TF bundle's
keys), never h5py for a safetensors file, nor the object-based checkpoints' readers for Google's
bundle; and, in a directory, the file names a format looks for when it looks for names alone
(`directory_files`), never Flax's reader where there is no flax_model.msgpack.
tests/test_imports.py holds the stated values to the modules' own.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from enum import Enum, IntEnum
from pathlib import Path
from types import ModuleType

from ..containers.hdf5.signature import has_hdf5_signature
from ..lazy import lazy_module, pending
from ..records import record

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from ..tree import ParameterTree


def _module(name: str) -> ModuleType:
    """Format module `name` of this package, imported when first used."""
    return lazy_module(f"{__package__}.{name}")


class Specificity(IntEnum):
    """How much of its container a format's sniffer claims. `resolve` tries the most specific
    sniffers first; two formats of equal specificity must never claim the same file (the tests
    check it on every fixture), so their order in `FORMATS` does not matter."""

    #: Claims every file of its container (every Keras HDF5, every TF bundle without Keras
    #: object keys, every safetensors or torch file), so that its reader can say what a file of
    #: that container holds when it is not a BERT. A narrower format of the same container
    #: (one that recognises its own layer names, say) must be `CONTENT`.
    CONTAINER = 0
    #: Claims a file only when its content marks it as this format's own (Keras object paths
    #: with their object graph, a model's own layer names).
    CONTENT = 1
    #: Claims a file only when it holds the variable or layer names of one library's model, inside
    #: a container whose every file a `CONTENT` format would also claim (keras-bert's layers in a
    #: Keras HDF5, the Model Garden's or bert-for-tf2's key paths in a Keras object checkpoint).
    NAMES = 2


class Output(Enum):
    """What `convert --to` writes at its destination."""

    FILE = "file"
    DIRECTORY = "directory"


@record
class Format:
    """A checkpoint format, declared.

    Attributes:
      target: its name for `convert --to` and in messages ("hf", "tf", ...).
      module: the module implementing it, which provides
        `sniff(path) -> str | None`: one of `names` if the format reads `path` (judged by content,
          not suffix; the path may be a TF bundle prefix that names no file), else None;
        `candidates(directory) -> list[Path]`: the checkpoints of this format in `directory`;
        `read(path, *, config_path=None, num_heads=None) -> ParameterTree`;
        `write(tree, destination, *, options) -> list[Path]` (the files written; `options` is a
          `conversion.WriteOptions`), when `output` is not None;
        optionally `write_caveats(tree) -> list[str]`: what the target's library computes
          differently from the tree written (`convert` prints them as notes).
      names: the format names its reader reports (`ParameterTree.format`).
      numerics: the family whose numeric conventions its checkpoints were trained with: a key of
        `runtime.numerics.FAMILY_DEFAULTS` ("google-tf", "hf", "bert4keras").
      specificity: how much its sniffer claims (see `Specificity`).
      output: what `convert --to target` writes, a file or a directory; None for a read-only format.
      description: what a checkpoint of this format looks like on disk, for messages
        ("a Google TF checkpoint (bert_model.ckpt.index and its data files)").
      owned_files: name patterns of the files a checkpoint of this format consists of in its
        directory: all that `convert --force` may replace there (tokenizer files are kept).
      models: the models one file of this format may hold, the default first (an ELECTRA
        pre-training checkpoint: generator and discriminator); its `read` then takes
        `model=`, which `formats.read` refuses for every other format.
      containers: the containers (keys of `CONTAINERS`) its sniffer and `candidates` may claim a
        file of; `resolve` asks a module not imported yet only about a path that may be one.
      directory_files: for a format whose `candidates` looks for fixed file names alone, those
        names: `resolve` asks it about a directory only when one of them is there.
      token_type_table: the libraries that run its files always look token types up (transformers'
        embeddings, in torch, TF and Flax), so a model with no token types (type_vocab_size 0:
        fairseq's RoBERTa) is written with one all-zero row (`convert.with_one_token_type`).
    """

    target: str
    module: ModuleType
    names: tuple[str, ...]
    numerics: str
    specificity: Specificity
    output: Output | None
    description: str
    owned_files: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    containers: tuple[str, ...] = ()
    token_type_table: bool = False
    directory_files: tuple[str, ...] = ()

    def may_claim(self, hints: frozenset[str]) -> bool:
        """Whether to ask this format about a path whose `container_hints` are `hints`: always once
        its module is imported (asking costs nothing), else when the path may be its container."""
        return not pending(self.module) or not hints.isdisjoint(self.containers)

    def may_find_in(self, directory: Path) -> bool:
        """Whether `candidates(directory)` may find a checkpoint: always, unless the format looks
        for `directory_files` alone and the directory holds none of them."""
        return not self.directory_files or any(os.path.isfile(directory / name) for name in self.directory_files)

    @property
    def sniff(self) -> Callable[[Path], str | None]:
        return self.module.sniff

    @property
    def candidates(self) -> Callable[[Path], list[Path]]:
        return self.module.candidates

    @property
    def read(self) -> Callable[..., ParameterTree]:
        return self.module.read

    @property
    def write(self) -> Callable[..., list[Path]] | None:
        return None if self.output is None else self.module.write

    @property
    def families(self) -> tuple[str, ...]:
        """The model families (`BertConfig.model_type`) its writer has names for: its module's
        `WRITES_FAMILIES`, BERT alone where the module states none."""
        return tuple(getattr(self.module, "WRITES_FAMILIES", ("bert",)))

    @property
    def caveats(self) -> Callable[["ParameterTree"], list[str]]:
        """What the target's own library computes differently from the tree written (notes for
        `convert`): its module's `write_caveats`, nothing where the module states none."""
        return getattr(self.module, "write_caveats", lambda tree: [])

    @property
    def dtypes(self) -> tuple[str, ...]:
        """The dtypes `convert --dtype` may ask its writer for: its module's `WRITES_DTYPES`, none
        where the module states none (the tensors are written as stored)."""
        return tuple(getattr(self.module, "WRITES_DTYPES", ()))

    @property
    def check_written(self) -> Callable[..., tuple[list[str], list[str]]] | None:
        """For an export its reader refuses (onnx): `check_written(tree, directory, options) ->
        (tensors written, notes)`, which `convert` runs instead of reading the output back; None
        for a checkpoint format."""
        return getattr(self.module, "check_written", None)

    @property
    def compare_outputs(self) -> Callable[..., dict] | None:
        """For an export: `compare_outputs(tree, path, atol=) -> dict`, the report of `diff
        --outputs` with the export as side B (`checks.outputs.compare_outputs`' keys); else None."""
        return getattr(self.module, "compare_outputs", None)

    @property
    def writes_directory(self) -> bool:
        return self.output is Output.DIRECTORY


FORMATS: tuple[Format, ...] = (
    Format(
        target="hf", module=_module("hf.checkpoint"), names=("hf-safetensors", "hf-pytorch-bin"), numerics="hf",
        specificity=Specificity.CONTAINER, output=Output.DIRECTORY,
        description="a Hugging Face model.safetensors, pytorch_model.bin or sharded *.index.json",
        owned_files=("model.safetensors", "model-*-of-*.safetensors", "model.safetensors.index.json",
                     "pytorch_model.bin", "pytorch_model-*-of-*.bin", "pytorch_model.bin.index.json", "config.json",
                     "generation_config.json"),
        containers=("safetensors", "torch", "shard-index"),
        token_type_table=True,
    ),
    Format(
        target="tf", module=_module("tensorflow.google"), names=("google-tf",), numerics="google-tf",
        specificity=Specificity.CONTAINER, output=Output.DIRECTORY,
        description="a Google TF checkpoint (bert_model.ckpt.index and its data files)",
        owned_files=("bert_model.ckpt.index", "bert_model.ckpt.data-*", "bert_model.ckpt.meta", "checkpoint",
                     "bert_config.json"),
        models=("generator", "discriminator"),
        containers=("tf-bundle",),
    ),
    Format(
        target="bert4keras", module=_module("keras.bert4keras"), names=("bert4keras-h5", "bert4keras-keras3"),
        numerics="bert4keras",
        specificity=Specificity.CONTAINER, output=Output.DIRECTORY,
        description="a bert4keras Keras HDF5 weights file (.h5, or Keras 3 .weights.h5)",
        owned_files=("bert4keras_model.h5", "bert_config.json"),
        containers=("hdf5",),
    ),
    # Read-only: what bert4keras' pre-training leaves. `--to tf` writes what bert4keras loads.
    Format(
        target="bert4keras-tf", module=_module("keras.bert4keras_objects"), names=("bert4keras-tf",),
        numerics="bert4keras", specificity=Specificity.CONTENT, output=None,
        description="a bert4keras object-based TF checkpoint (*.ckpt.index with Keras object paths)",
        containers=("tf-objects",),
    ),
    # What transformers 4.x saved for TensorFlow and Flax, which transformers 5 no longer reads.
    # Narrower than "hf" (every *.index.json) and "bert4keras" (every Keras-2 HDF5 file).
    Format(
        target="hf-tf", module=_module("hf.tf"), names=("hf-tf-h5",), numerics="hf",
        specificity=Specificity.CONTENT, output=Output.DIRECTORY,
        description="a Hugging Face TensorFlow tf_model.h5 (or its sharded tf_model.h5.index.json)",
        owned_files=("tf_model.h5", "tf_model-*-of-*.h5", "tf_model.h5.index.json", "config.json"),
        containers=("hdf5", "shard-index"),
        token_type_table=True,
        directory_files=("tf_model.h5.index.json", "tf_model.h5"),
    ),
    Format(
        target="hf-flax", module=_module("hf.flax"), names=("hf-flax-msgpack",), numerics="hf",
        specificity=Specificity.CONTENT, output=Output.DIRECTORY,
        description="a Hugging Face Flax flax_model.msgpack (or its sharded flax_model.msgpack.index.json)",
        owned_files=("flax_model.msgpack", "flax_model-*-of-*.msgpack", "flax_model.msgpack.index.json",
                     "config.json"),
        containers=("msgpack", "shard-index"),
        token_type_table=True,
        directory_files=("flax_model.msgpack.index.json", "flax_model.msgpack"),
    ),
    # Read-only, the checkpoints TF2 libraries write; `--to tf` gives Google's names. The Model
    # Garden and bert-for-tf2 compute GELU with tanh and mask with -10000, as google-research/bert.
    Format(
        target="tf-garden", module=_module("tensorflow.model_garden"), names=("tf-garden",), numerics="google-tf",
        specificity=Specificity.NAMES, output=None,
        description="a TF2 Model Garden tf.train.Checkpoint (BertEncoderV2, BertPretrainerV2 masked LM)",
        containers=("tf-objects",),
    ),
    Format(
        target="tf-hub-savedmodel", module=_module("tensorflow.hub_savedmodel"),
        names=("tf-hub-savedmodel", "tf-garden-functional"),
        numerics="google-tf", specificity=Specificity.NAMES, output=None,
        description="a TF-Hub BERT SavedModel (variables/ and its object graph) or a functional Model "
                    "Garden BertEncoder checkpoint",
        containers=("tf-objects",),
    ),
    Format(
        target="bert-for-tf2", module=_module("tensorflow.bert_for_tf2"), names=("tf-bert-for-tf2",), numerics="google-tf",
        specificity=Specificity.NAMES, output=None,
        description="a bert-for-tf2 save_weights checkpoint or .h5 (a BertModelLayer's variables)",
        containers=("tf-objects", "hdf5"),
    ),
    Format(
        target="keras-bert", module=_module("keras.keras_bert"), names=("keras-bert-h5",), numerics="keras-bert",
        specificity=Specificity.NAMES, output=None,
        description="a keras-bert model .h5 (Embedding-Token, MLM-Sim, NSP-Dense layers)",
        containers=("hdf5",),
    ),
    # Read-only: fairseq's RoBERTa `model.pt` (a torch pickle with its options beside the state
    # dict); `--to hf` gives transformers' RoBERTa. fairseq's GELU is erf, as transformers'.
    Format(
        target="fairseq", module=_module("fairseq"), names=("fairseq",), numerics="hf",
        specificity=Specificity.CONTENT, output=None,
        description="a fairseq RoBERTa model.pt (a torch pickle of `model` and its `args` / `cfg`)",
        containers=("torch-model",),
    ),
    # Read-only: fair-esm's ESM-2 `.pt` (fairseq's checkpoint dict, the options under `cfg`);
    # `--to hf` gives transformers' EsmForMaskedLM. Its names are fairseq's with an ESM's own.
    Format(
        target="fair-esm", module=_module("pytorch.fair_esm"), names=("fair-esm",), numerics="hf",
        specificity=Specificity.CONTENT, output=None,
        description="a fair-esm ESM-2 .pt (a torch pickle of `model` and fairseq's `cfg`, as esm.pretrained loads)",
        containers=("torch-model",),
    ),
    # Read-only: NVIDIA Megatron-LM's BERT `model_optim_rng.pt` (a checkpoint directory's
    # `release/mp_rank_00/`), as transformers' convert_megatron_bert_checkpoint.py reads it.
    Format(
        target="megatron-lm", module=_module("pytorch.megatron_lm"), names=("megatron-lm",), numerics="hf",
        specificity=Specificity.CONTENT, output=None,
        description="a Megatron-LM BERT model_optim_rng.pt (or a checkpoint directory with release/mp_rank_00/)",
        containers=("torch-model",),
    ),
    # keras-hub presets (save_to_preset): config.json naming a keras_hub> backbone beside its
    # Keras 3 model.weights.h5 and the task's task.weights.h5 (the MLM head). Narrower than
    # "bert4keras", which claims every Keras HDF5 file.
    Format(
        target="keras-hub", module=_module("keras_hub.preset"), names=("keras-hub-preset",), numerics="keras-hub",
        specificity=Specificity.CONTENT, output=Output.DIRECTORY,
        description="a keras-hub preset (config.json naming a keras_hub backbone, model.weights.h5, task.weights.h5)",
        owned_files=("config.json", "metadata.json", "model.weights.h5", "task.json", "task.weights.h5",
                     "preprocessor.json", "tokenizer.json"),
        containers=("hdf5",),
        directory_files=("model.weights.h5", "model.weights.json"),
    ),
    # Write-only: the masked-LM logits as an ONNX graph (`convert --to onnx`, the `onnx` extra),
    # run by onnxruntime against the NumPy runtime after writing. Its reader refuses the files.
    Format(
        target="onnx", module=_module("onnx.export"), names=("onnx",), numerics="hf",
        specificity=Specificity.CONTENT, output=Output.DIRECTORY,
        description="a model.onnx export written by bertconv, which it runs but does not read",
        owned_files=("model.onnx", "model.onnx.data"),
        containers=("onnx",),
        directory_files=("model.onnx",),
    ),
)


# --- which containers a path may be, from its name and first bytes --------------------------------

ZIP_MAGIC = b"PK\x03\x04"
PICKLE_PROTO = 0x80
#: A msgpack map's first byte -> where its first key starts: fixmap (0x80-0x8f), map16 (0xde)
#: and map32 (0xdf), the last two after their 2- and 4-byte sizes.
MSGPACK_MAP_KEY_AT = {**dict.fromkeys(range(0x80, 0x90), 1), 0xDE: 3, 0xDF: 5}
#: A msgpack string's first byte (fixstr, str8, str16, str32). Flax's keys are strings, which
#: tells its files from an HDF5 file (0x89 "HDF") and a legacy torch pickle (0x80 0x02), whose
#: first bytes are also a map's.
MSGPACK_STRING_BYTES = frozenset(range(0xA0, 0xC0)) | {0xD9, 0xDA, 0xDB}
SAFETENSORS_JSON_AT = 8  # after the 8-byte header length

#: Container -> the file name suffixes that mark it (a checkpoint listed by name in a directory).
CONTAINER_SUFFIXES: dict[str, tuple[str, ...]] = {
    "safetensors": (".safetensors",),
    "torch": (".bin", ".pt", ".pth"),
    "hdf5": (".h5", ".hdf5", ".keras", ".weights.json"),  # the last: Keras' index of sharded .weights.h5
    "msgpack": (".msgpack",),
    "shard-index": (".index.json",),
    "tf-bundle": (".index",),
    "onnx": (".onnx",),
}
#: A TF bundle keyed by object paths (`.../.ATTRIBUTES/VARIABLE_VALUE`: Keras' `save_weights`,
#: `tf.train.Checkpoint`), told from one keyed by variable names (Google's) by its index's keys.
TF_OBJECTS = "tf-objects"
#: A torch pickle holding its state dict under `model`, a training script's save (fairseq's,
#: fair-esm's and Megatron-LM's), told from a bare state dict (Hugging Face's pytorch_model.bin):
#: only then are those three readers imported and asked.
TORCH_MODEL = "torch-model"
#: Every container a `Format.containers` may name.
CONTAINERS = frozenset(CONTAINER_SUFFIXES) | {TF_OBJECTS, TORCH_MODEL}


def _file_hints(path: Path) -> set[str]:
    """The containers the file (or TF bundle prefix) `path` may be: by its name, its first bytes,
    a `.index` beside a bundle prefix, and that bundle's keys. Generous: a sniffer decides, this
    only says whom to ask."""
    name = path.name
    hints = {container for container, suffixes in CONTAINER_SUFFIXES.items() if name.endswith(suffixes)}
    if ".data-" in name or os.path.isfile(f"{path}.index"):
        hints.add("tf-bundle")
    pickled = False  # the first bytes are a torch file's (a name alone may say .bin of anything)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(SAFETENSORS_JSON_AT + 1)  # also past a msgpack map's first key byte
            if head[SAFETENSORS_JSON_AT:] == b"{":
                hints.add("safetensors")
            pickled = head[:4] == ZIP_MAGIC or head[:1] == bytes([PICKLE_PROTO])
            if pickled:
                hints.add("torch")
            if _starts_a_map_of_strings(head):
                hints.add("msgpack")
            if has_hdf5_signature(f, size):
                hints.add("hdf5")
    except OSError:  # a bundle prefix names no file; a directory is not read here
        pass
    if pickled and _saved_under_model(path):
        hints.add(TORCH_MODEL)
    if "tf-bundle" in hints:
        from ..containers.tensorflow import prefix as tf_prefix

        prefix = tf_prefix.bundle_prefix_of(path)
        if prefix is not None and _object_keyed(prefix):
            hints.add(TF_OBJECTS)
    return hints


def _starts_a_map_of_strings(head: bytes) -> bool:
    """Whether `head`, a file's first bytes, starts a msgpack map whose first key is a string."""
    key_at = MSGPACK_MAP_KEY_AT.get(head[0]) if head else None
    return key_at is not None and head[key_at:key_at + 1] != b"" and head[key_at] in MSGPACK_STRING_BYTES


def _object_keyed(prefix: Path) -> bool:
    """Whether the bundle at `prefix` (its index exists) has a key of an object path, or an index
    that cannot be read: the readers of object-based checkpoints claim no other bundle. Its index is
    parsed once for every reader that asks (`bundle._parse_index` keeps it)."""
    from ..containers.tensorflow import bundle, trackable

    try:
        keys = bundle.BundleReader(prefix).entries
    except Exception:  # noqa: BLE001 - generous: its readers say what is wrong with it
        return True
    return any(trackable.object_path(key) is not None for key in keys)


def _saved_under_model(path: Path) -> bool:
    """Whether the file `path`, whose first bytes are a torch file's, holds its state dict under
    `model`, or cannot be read as a state dict (generous: its readers say what it is). Unpickled
    once for every reader that asks within a reading (`torch_pickle.read_checkpoint`)."""
    from ..containers import torch_pickle

    try:
        wrapper = torch_pickle.read_checkpoint(path).wrapper
    except Exception:  # noqa: BLE001 - generous, as above
        return True
    return wrapper is not None and wrapper.split("/")[0] == "model"


def _directory_object_hint(directory: Path) -> bool:
    """Whether a bundle the formats may find in `directory` beyond its own `*.index` files (those
    are hinted as files) is object-keyed: the one its `checkpoint` state file names (which may
    be elsewhere), or a SavedModel's `variables/variables`."""
    from ..containers.tensorflow import prefix as tf_prefix

    prefixes = [directory / "variables" / "variables"]
    try:
        prefixes.append(tf_prefix.resolve_prefix(directory))
    except Exception:  # noqa: BLE001 - no state file naming a bundle: the files were hinted
        pass
    return any(os.path.isfile(f"{prefix}.index") and _object_keyed(prefix) for prefix in prefixes)


def container_hints(path: Path) -> frozenset[str]:
    """The containers `path` may be (a file), or may hold (a directory: its files, a `checkpoint`
    state file or a SavedModel's `variables/` mean a TF bundle). A superset of what any format's
    `sniff` or `candidates` claims there (tests/test_imports.py checks it on every fixture)."""
    path = Path(path)
    if not path.is_dir():
        return frozenset(_file_hints(path))
    hints: set[str] = set()
    for entry in path.iterdir():
        if entry.is_file():
            hints |= _file_hints(entry)
            if entry.name == "checkpoint":
                hints.add("tf-bundle")
        elif entry.name == "variables":
            hints.add("tf-bundle")
        elif entry.name == "release":  # a Megatron-LM checkpoint directory: release/mp_rank_00/*.pt
            hints |= {"torch", TORCH_MODEL}
    if (path / "latest_checkpointed_iteration.txt").is_file():
        hints |= {"torch", TORCH_MODEL}
    if "tf-bundle" in hints and TF_OBJECTS not in hints and _directory_object_hint(path):
        hints.add(TF_OBJECTS)
    return frozenset(hints)

def by_specificity(entries: tuple[Format, ...]) -> tuple[Format, ...]:
    """`entries` most specific first; ties keep their order, which is immaterial because equally
    specific sniffers claim disjoint files."""
    return tuple(sorted(entries, key=lambda fmt: -fmt.specificity))


#: The order `resolve` tries sniffers in.
SNIFF_ORDER: tuple[Format, ...] = by_specificity(FORMATS)

#: `convert --to` name -> the format, for every format that writes.
TARGETS: dict[str, Format] = {fmt.target: fmt for fmt in FORMATS if fmt.output is not None}

#: Every model some format's files may hold (`--model`'s choices), in the formats' order.
MODELS: tuple[str, ...] = tuple(dict.fromkeys(model for fmt in FORMATS for model in fmt.models))

_BY_NAME: dict[str, Format] = {name: fmt for fmt in FORMATS for name in fmt.names}


def format_named(format_name: str) -> Format | None:
    """The format whose reader reports `format_name` (a `ParameterTree.format`), or None."""
    return _BY_NAME.get(format_name)


def expected_checkpoints() -> str:
    """Every format's description, for messages: "a ..., a ... or a ..."."""
    descriptions = [fmt.description for fmt in FORMATS]
    return ", ".join(descriptions[:-1]) + f" or {descriptions[-1]}" if len(descriptions) > 1 else descriptions[0]
