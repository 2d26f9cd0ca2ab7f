"""Every checkpoint format bertconv reads or writes: one declarative `Format` entry each.

What differs by format derives from these entries and is written nowhere else: which reader a
path goes to (`formats.resolve`, trying sniffers by `specificity`), the `convert --to` targets
(`TARGETS`) and whether each writes a file or a directory, the numeric conventions a runtime
computes a checkpoint with (`numerics`, looked up by the runtime through `format_named`), what
the "no checkpoint here" messages list (`description`), and which fixtures the tests read,
convert, keep untouched and fuzz (`fixtures`, `fuzz`).

Adding a format is its module (table, `sniff`, `candidates`, `read`, and `write` if it writes)
plus one entry in `FORMATS`; docs/ARCHITECTURE.md walks through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, IntEnum
from pathlib import Path
from types import ModuleType
from typing import Callable

from ..tree import ParameterTree
from . import (bert4keras, bert4keras_objects, bert_for_tf2, fairseq, google_tf, hf, hf_flax, hf_tf,
               keras_bert, tf2_garden, tf_hub_savedmodel)


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


@dataclass(frozen=True)
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
          `convert.WriteOptions`), when `output` is not None.
      names: the format names its reader reports (`ParameterTree.format`).
      numerics: the family whose numeric conventions its checkpoints were trained with: a key of
        `runtime.numerics.FAMILY_DEFAULTS` ("google-tf", "hf", "bert4keras").
      specificity: how much its sniffer claims (see `Specificity`).
      output: what `convert --to target` writes, a file or a directory; None for a read-only format.
      description: what a checkpoint of this format looks like on disk, for messages
        ("a Google TF checkpoint (bert_model.ckpt.index and its data files)").
      fixtures: glob patterns under fixtures/, each match a path the reader takes (a directory
        holding one checkpoint, or the checkpoint's file): the tests read, convert and keep
        untouched every one.
      fuzz: files under fixtures/ whose mutants every reader must read or refuse cleanly
        (tests/test_fuzz_formats.py); formats may add structure-aware fuzzers of their own.
      owned_files: name patterns of the files a checkpoint of this format consists of in its
        directory: all that `convert --force` may replace there (tokenizer files are kept).
      models: the models one file of this format may hold, the default first (an ELECTRA
        pre-training checkpoint: generator and discriminator); its `read` then takes
        `model=`, which `formats.read` refuses for every other format.
    """

    target: str
    module: ModuleType
    names: tuple[str, ...]
    numerics: str
    specificity: Specificity
    output: Output | None
    description: str
    fixtures: tuple[str, ...]
    fuzz: tuple[str, ...]
    owned_files: tuple[str, ...] = ()
    models: tuple[str, ...] = ()

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
    def writes_directory(self) -> bool:
        return self.output is Output.DIRECTORY

    def fixture_paths(self, root: Path) -> list[Path]:
        """Every path under `root` (the fixtures directory) that `fixtures` matches, sorted."""
        return sorted({path for pattern in self.fixtures for path in Path(root).glob(pattern)})


FORMATS: tuple[Format, ...] = (
    Format(
        target="hf", module=hf, names=hf.FORMATS, numerics="hf",
        specificity=Specificity.CONTAINER, output=Output.DIRECTORY,
        description="a Hugging Face model.safetensors, pytorch_model.bin or sharded *.index.json",
        fixtures=("hf/*", "family_hf/*/*"),
        fuzz=("hf/pretraining/model.safetensors", "hf/pretraining_bin/pytorch_model.bin",
              "hf/legacy_bin/pytorch_model.bin", "family_hf/albert/pretraining_bin/pytorch_model.bin"),
        owned_files=hf.OWNED_FILES,
    ),
    Format(
        target="tf", module=google_tf, names=(google_tf.FORMAT,), numerics="google-tf",
        specificity=Specificity.CONTAINER, output=Output.DIRECTORY,
        description="a Google TF checkpoint (bert_model.ckpt.index and its data files)",
        fixtures=("tf/*", "tf_hub/*", "family_google/tf/*", "albert_zh/tf"),
        fuzz=("tf/two_shards/bert_model.ckpt.index",),
        owned_files=google_tf.OWNED_FILES,
        models=google_tf.MODELS,
    ),
    Format(
        target="bert4keras", module=bert4keras, names=bert4keras.FORMATS, numerics="bert4keras",
        specificity=Specificity.CONTAINER, output=Output.DIRECTORY,
        description="a bert4keras Keras HDF5 weights file (.h5, or Keras 3 .weights.h5)",
        fixtures=("bert4keras/*", "bert4keras_pretraining/nested/bert_model.h5",
                  "bert4keras_pretraining/weights-h5/bert_model.weights.h5", "family_google/bert4keras/*"),
        fuzz=("bert4keras/v50-pool-nsp-mlm/bert4keras_model.h5",
              "bert4keras_pretraining/weights-h5/bert_model.weights.h5"),
        owned_files=bert4keras.OWNED_FILES,
    ),
    # Read-only: what bert4keras' pre-training leaves. `--to tf` writes what bert4keras loads.
    Format(
        target="bert4keras-tf", module=bert4keras_objects, names=(bert4keras_objects.FORMAT,),
        numerics="bert4keras", specificity=Specificity.CONTENT, output=None,
        description="a bert4keras object-based TF checkpoint (*.ckpt.index with Keras object paths)",
        fixtures=("bert4keras_pretraining/*/bert_model.ckpt.index",),
        fuzz=("bert4keras_pretraining/pool-nsp-mlm/bert_model.ckpt.index",),
    ),
    # What transformers 4.x saved for TensorFlow and Flax, which transformers 5 no longer reads.
    # Narrower than "hf" (every *.index.json) and "bert4keras" (every Keras-2 HDF5 file).
    Format(
        target="hf-tf", module=hf_tf, names=(hf_tf.FORMAT,), numerics="hf",
        specificity=Specificity.CONTENT, output=Output.DIRECTORY,
        description="a Hugging Face TensorFlow tf_model.h5 (or its sharded tf_model.h5.index.json)",
        fixtures=("hf_tf/*",),
        fuzz=("hf_tf/pretraining/tf_model.h5",),
        owned_files=("tf_model.h5", "tf_model-*-of-*.h5", "tf_model.h5.index.json", "config.json"),
    ),
    Format(
        target="hf-flax", module=hf_flax, names=(hf_flax.FORMAT,), numerics="hf",
        specificity=Specificity.CONTENT, output=Output.DIRECTORY,
        description="a Hugging Face Flax flax_model.msgpack (or its sharded flax_model.msgpack.index.json)",
        fixtures=("hf_flax/*",),
        fuzz=("hf_flax/pretraining/flax_model.msgpack",),
        owned_files=("flax_model.msgpack", "flax_model-*-of-*.msgpack", "flax_model.msgpack.index.json",
                     "config.json"),
    ),
    # Read-only, the checkpoints TF2 libraries write; `--to tf` gives Google's names. The Model
    # Garden and bert-for-tf2 compute GELU with tanh and mask with -10000, as google-research/bert.
    Format(
        target="tf-garden", module=tf2_garden, names=(tf2_garden.FORMAT,), numerics="google-tf",
        specificity=Specificity.NAMES, output=None,
        description="a TF2 Model Garden tf.train.Checkpoint (BertEncoderV2, BertPretrainerV2 masked LM)",
        fixtures=("tf2/garden-encoder", "tf2/garden-model-adam", "tf2/garden-pretrainer", "tf2/garden-nsp"),
        fuzz=("tf2/garden-pretrainer/bert_model.ckpt.index",),
    ),
    Format(
        target="tf-hub-savedmodel", module=tf_hub_savedmodel, names=tf_hub_savedmodel.FORMATS,
        numerics="google-tf", specificity=Specificity.NAMES, output=None,
        description="a TF-Hub BERT SavedModel (variables/ and its object graph) or a functional Model "
                    "Garden BertEncoder checkpoint",
        fixtures=("tf2/hub-savedmodel", "tf2/garden-functional"),
        fuzz=("tf2/hub-savedmodel/variables/variables.index",),
    ),
    Format(
        target="bert-for-tf2", module=bert_for_tf2, names=(bert_for_tf2.FORMAT,), numerics="google-tf",
        specificity=Specificity.NAMES, output=None,
        description="a bert-for-tf2 save_weights checkpoint or .h5 (a BertModelLayer's variables)",
        fixtures=("tf2/bert-for-tf2", "tf2/bert-for-tf2-h5"),
        fuzz=("tf2/bert-for-tf2/bert_model.ckpt.index", "tf2/bert-for-tf2-h5/bert_model.h5"),
    ),
    Format(
        target="keras-bert", module=keras_bert, names=(keras_bert.FORMAT,), numerics="keras-bert",
        specificity=Specificity.NAMES, output=None,
        description="a keras-bert model .h5 (Embedding-Token, MLM-Sim, NSP-Dense layers)",
        fixtures=("keras_bert/*/*.h5",),
        fuzz=("keras_bert/pretraining/weights.h5",),
    ),
    # Read-only: fairseq's RoBERTa `model.pt` (a torch pickle with its options beside the state
    # dict); `--to hf` gives transformers' RoBERTa. fairseq's GELU is erf, as transformers'.
    Format(
        target="fairseq", module=fairseq, names=(fairseq.FORMAT,), numerics="hf",
        specificity=Specificity.CONTENT, output=None,
        description="a fairseq RoBERTa model.pt (a torch pickle of `model` and its `args` / `cfg`)",
        fixtures=("family_google/fairseq/*",),
        fuzz=("family_google/fairseq/roberta/model.pt",),
    ),
)



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
