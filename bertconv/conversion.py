"""Conversion: reader -> canonical tree -> writer, with the output written atomically.

A conversion keeps what the model computes or refuses. The tensors are copied bit for bit by
construction; the config is checked after the fact: the written output's header is read back
through its own reader, and every field that decides the computation (`COMPUTATION_FIELDS`) must
come back as it went in, every tensor must be there. A field the target cannot hold is refused
(exit 2) unless the caller accepts losing it by name.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

from . import families, formats, paths
from .formats.hf import cache as hub_cache
from .destination import companions
from .destination.atomic import Replaceable, atomic_output
from .checks.contract import require_read
from .checks.copies import differing_copies
from .checks.report import checkpoint
from .checks.shapes import shape_problems
from .checks.vocab import vocab_problem
from .config import COMPUTATION_FIELDS
from .errors import bad_input
from .lazy import lazy_module
from .records import field, record, replace
from .tensor import ArrayTensor
from .tree import Ignored, Parameter, ParameterTree, model_order_key, role_of

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    import numpy as np
else:  # imported on first use
    np = lazy_module("numpy")


@record
class WriteOptions:
    """What a writer may be told beyond the tree. Each writer reads the fields it knows.

    Attributes:
      max_shard_bytes: Hugging Face shard size limit.
      drop_untied_decoder: write a format without a decoder matrix even when the source's
        decoder differs from the embeddings (that decoder is lost).
      on_tensor: called with each tensor's byte count as it is written (progress).
      dtype: the dtype to write the weights in, for a format that offers a choice (its registry
        entry's `dtypes`: onnx's float32 or float16); None writes them as the format does by default.
      accept_loss: the fields and heads (`--accept-loss mlm`) the user accepts losing: a writer
        whose format has no place for a head leaves it out only when it is named here.
    """

    max_shard_bytes: int | None = None
    drop_untied_decoder: bool = False
    dtype: str | None = None
    on_tensor: Callable[[int], None] | None = None
    accept_loss: tuple[str, ...] = ()


@record(frozen=False)
class Conversion:
    """What a conversion wrote and what it set aside.

    Attributes:
      files: every file written, at its final path.
      tensors: the tensors the output holds, by their names in the output file.
      ignored: source entries that are not in the output, each with why (the reader's ignored
        entries, and tied copies a format does not store).
      notes: sentences the user should read (defaults written down as facts, accepted losses).
    """

    source: ParameterTree
    destination: Path
    target: str
    files: list[Path] = field(default_factory=list)
    tensors: list[str] = field(default_factory=list)
    ignored: list[Ignored] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        """The `convert --json` object: the source checkpoint's fields (see
        `checks.report.checkpoint`; its `ignored` are the entries not in the output), and the
        `output` written: {path, format (the target), files, tensors (names in the output)}."""
        return {
            **checkpoint(self.source),
            "ok": True,
            "output": {"path": str(self.destination), "format": self.target,
                       "files": [str(f) for f in self.files], "tensors": list(self.tensors)},
            "ignored": [i.as_dict() for i in self.ignored],
            "problems": [],
            "notes": list(self.notes),
        }


def warnings_for(tree: ParameterTree) -> list[str]:
    """What a conversion goes ahead with but its user should hear about: a vocab.txt beside the
    source that does not match the word embeddings (it is carried along as is)."""
    problem = vocab_problem(tree)
    return [problem] if problem else []


def inputs_of(tree: ParameterTree, given: Path | None = None) -> list[Path]:
    """Every file and directory converting `tree` reads: checkpoint files, config, vocabulary and
    tokenizer files, and the directory the user named."""
    inputs = [*tree.files, *companions.find(companions.source_directory(tree.path))]
    if tree.config.source is not None:
        inputs.append(tree.config.source)
    if tree.vocab is not None:
        inputs.append(tree.vocab)
    if given is not None:
        inputs.append(given)
    return inputs


def convert(tree: ParameterTree, destination: Path, target: str, *, force: bool = False,
            options: WriteOptions = WriteOptions(), accept_loss: tuple[str, ...] = (),
            given: Path | None = None) -> Conversion:
    """Write `tree` to `destination` in the `target` format ("hf", ...); says what it wrote.

    Refuses a tree whose tensors disagree with its config; a destination that is, contains or
    lies inside anything the conversion reads (`given`: the path the user named, if a
    directory); an output that would change a computation field not named in `accept_loss`.
    Nothing is left at `destination` unless the whole write succeeded.
    """
    if target not in formats.TARGETS:
        raise bad_input(destination, f"unknown target {target!r}; choose one of {', '.join(formats.TARGETS)}")
    problems = shape_problems(tree)
    if problems:
        raise bad_input(tree.path, "tensors disagree with the config: " + "; ".join(problems[:5]))
    fmt = formats.TARGETS[target]
    if options.dtype is not None and options.dtype not in fmt.dtypes:
        offered = f"it takes {', '.join(fmt.dtypes)}" if fmt.dtypes else "it writes the tensors as they are stored"
        raise bad_input(destination, f"--dtype {options.dtype} does not apply to --to {target}: {offered}")
    written_tree, as_bert_notes = written_as_bert(tree, target)  # a DistilBERT for a BERT-only target
    _refuse_other_family(written_tree, target, destination)
    destination = Path(os.path.abspath(destination))
    clash = paths.clash(destination, inputs_of(tree, given))
    if clash is not None:
        source, how = clash
        raise bad_input(destination, f"{how} {source}, which this conversion reads; choose a destination "
                                     f"apart from the inputs")
    cache = hub_cache.cache_holding(destination)
    if cache is not None:
        raise bad_input(destination, f"lies inside the Hugging Face cache {cache}, which only huggingface_hub writes "
                                     f"(its snapshots are links into shared blobs); choose a destination outside it")
    extra = companions.find(companions.source_directory(tree.path))
    replaceable = Replaceable(owned=fmt.owned_files, companions=companions.TOKENIZER_FILES) \
        if fmt.writes_directory else None
    result = Conversion(tree, destination, target,
                        notes=[*require_read(tree, accept_loss), *_default_notes(tree), *as_bert_notes,
                               *(copy.sentence() for copy in differing_copies(tree))])
    options = replace(options, accept_loss=accept_loss)
    # A family without token types (DistilBERT) has a library that never looks them up.
    family = families.of(tree.config)
    if fmt.token_type_table and family.token_types and not family.holds_no_token_types and tree.config.type_vocab_size == 0:
        written_tree = with_one_token_type(tree)
        result.notes.append(_ONE_TOKEN_TYPE_NOTE.format(target=target))
    try:
        with atomic_output(destination, directory=fmt.writes_directory, force=force,
                           replaceable=replaceable) as partial:
            written = fmt.write(written_tree, partial, options=options)
            if fmt.writes_directory:
                written += _carry(extra, partial, written, tree.config.model_type)
                result.notes += _companions_not_rewritten(destination, written)
            if fmt.check_written is not None:  # an export, which its own check runs instead of a read-back
                result.tensors, checked = fmt.check_written(written_tree, partial, options)
                result.notes += checked
                result.ignored = _set_aside(tree, set(result.tensors), absent=_NOT_EXPORTED)
            else:
                output = formats.read(partial, written_as=fmt)
                dropped = ("mlm.decoder", "mlm.decoder_bias") if options.drop_untied_decoder else ()
                accepted = (*accept_loss, "tie_word_embeddings") if dropped else accept_loss
                heads = tuple(n for n in tree.params if role_of(n).head in accept_loss and n not in output.params)
                # RoFormer-v2's norm scales, all ones (its writer checked), which a target without them drops.
                scales = tuple(n for n in tree.params if tree.config.rms_norm and not output.config.norm_scale
                               and n.endswith(".gamma"))
                result.notes += _kept_computation(written_tree, output, destination, accepted, dropped + heads + scales)
                result.tensors = [p.source for p in output]
                result.ignored = _set_aside(tree, set(output.params),
                                            absent=_HEAD_NOT_WRITTEN if heads else _UNIT_SCALE if scales else None)
            result.notes += fmt.caveats(tree)
    except OSError as exc:
        raise bad_input(destination, f"cannot write: {_write_failure(exc)}; nothing was left at the "
                                     f"destination") from None
    result.files = [destination / p.relative_to(partial) if fmt.writes_directory else destination for p in written]
    return result


def _write_failure(exc: OSError) -> str:
    """Why writing failed, in one line: the system's words for its errno. h5py's OSError carries
    HDF5's whole report in its text (times, buffer addresses, line breaks)."""
    if exc.errno == errno.ENOSPC:
        return "no space left on device"
    if exc.errno == errno.EFBIG:
        return "file too large (over the file-size limit of this process, `ulimit -f`, or of the filesystem)"
    if exc.errno:
        return os.strerror(exc.errno)
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


# --- cross-family refusal (issue 16) ---------------------------------------------------------


def _refuse_other_family(tree: ParameterTree, target: str, destination: Path) -> None:
    """A writer writes only the families its tables name: an ALBERT written with BERT's names
    would be a BERT file missing its projection and its layer schedule, not the model. A variant
    that computes otherwise (brightmart's albert_zh) is a family of its own here."""
    family = families.member(tree.config)
    writes = formats.TARGETS[target].families
    if family in writes:
        return
    able = [name for name, fmt in formats.TARGETS.items() if family in fmt.families or name in as_bert_targets(family)]
    instead = f"convert it --to {' or --to '.join(able)}" if able else "no target writes it yet"
    why = getattr(formats.TARGETS[target].module, "REFUSED_FAMILIES", {}).get(family)
    if why is not None:
        instead = f"{why}; {instead}"
    if tree.config.position_offset:
        # What no table could fix: the target's model looks positions up from row 0.
        instead = (f"its positions start at row {tree.config.position_offset} of the position table (past the "
                   f"padding index), and the {target} writer's models count them from row 0; {instead}")
    if not tree.config.position_table and why is None:
        instead = (f"its positions ({tree.config.position_embedding_type}) are computed, with no parameters, and the "
                   f"{target} writer's models look positions up in a learned table: a change of computation; {instead}")
    raise bad_input(destination, f"{tree.path} holds {_a(families.display_name(family))} model (model_type "
                                 f"{tree.config.model_type!r}), and "
                                 f"the {target} writer has names for {', '.join(writes)} only: written there it "
                                 f"would be another model; {instead}. Nothing was written")


# --- a model with no token types, for a target whose library looks them up ---------------------


_ONE_TOKEN_TYPE_NOTE = ("the source has no token types (type_vocab_size 0); the {target} output holds one all-zero "
                        "token-type row (type_vocab_size 1), which its library looks up for every token and which "
                        "adds zero to each embedding: the same computation, as transformers' own fairseq RoBERTa "
                        "converter writes it")


def with_one_token_type(tree: ParameterTree) -> ParameterTree:
    """`tree`, a model with no token types, with a token-type table of one all-zero row [1, W]
    (in the word embeddings' dtype) and type_vocab_size 1: token type 0 adds zero everywhere."""
    return with_zero_token_types(tree, 1)


def _carry(files: list[Path], directory: Path, written: list[Path], model_type: str) -> list[Path]:
    """Copy the source's companion files the writer did not write itself into `directory`."""
    if not files:
        return []
    import shutil  # here: with bz2 and lzma, 3.4-4.4 ms of a conversion, for these copies alone

    names = {p.name for p in written}
    carried = []
    for file in files:
        name = companions.carried_name(file, model_type)
        if name not in names:
            shutil.copyfile(file, directory / name)
            carried.append(directory / name)
            names.add(name)
    return carried


def _companions_not_rewritten(destination: Path, written: list[Path]) -> list[str]:
    """A note naming the tokenizer files an earlier output at `destination` holds that this
    conversion does not write: they go with the output they belonged to."""
    gone = sorted({p.name for p in companions.find(destination)} - {p.name for p in written}) \
        if paths.kind_of(destination) == "directory" else []
    if not gone:
        return []
    return [f"{destination} held {', '.join(gone)} beside the earlier output; the source has no such "
            f"{'file' if len(gone) == 1 else 'files'}, so the replacement holds none: copy them in if they belong "
            f"to this model"]


def _default_notes(tree: ParameterTree) -> list[str]:
    """Values no file stated that the output will state as facts."""
    guessed = [name for name in COMPUTATION_FIELDS if tree.config.provenance.get(name) == "default"
               and name in ("num_attention_heads", "hidden_act")]
    return [f"{name} = {getattr(tree.config, name)} is bertconv's default (no config stated it), and the "
            f"output's config now states it; pass --config or --heads if the model was trained otherwise"
            for name in guessed]


def _kept_computation(source: ParameterTree, output: ParameterTree, destination: Path,
                      accept_loss: tuple[str, ...], dropped: tuple[str, ...]) -> list[str]:
    """Notes for accepted losses; `BadInput` for any other field or tensor the output lost."""
    changed = [(name, getattr(source.config, name), getattr(output.config, name))
               for name in families.computation_fields(source.config)
               if getattr(source.config, name) != getattr(output.config, name)]
    refused = [c for c in changed if c[0] not in accept_loss]
    if refused:
        fields = "; ".join(f"{name} is {a!r} in the source, {b!r} in the output" for name, a, b in refused)
        raise bad_input(destination, f"the {output.format} output would compute differently: {fields}. Nothing "
                                     f"was written; pass --accept-loss FIELD for each field to convert anyway")
    lost = sorted(n for n in source.params if source.is_counted(n) and n not in output.params
                  and n not in dropped)
    if lost:
        raise bad_input(destination, f"the {output.format} output lacks {', '.join(lost)}; nothing was written")
    return [f"accepted loss: {name} is {a!r} in the source, {b!r} in the output" for name, a, b in changed]


_HEAD_NOT_WRITTEN = "a head the target has no place for, left out (--accept-loss)"
_NOT_EXPORTED = "not part of the export, which computes the MLM logits alone"
_UNIT_SCALE = "a norm scale of all ones, which the target's norms (without a scale) compute the same without"


def _set_aside(source: ParameterTree, written: set[str], absent: str | None = None) -> list[Ignored]:
    """Source entries the output does not hold (`written`: the canonical names it does): what the
    reader ignored, then tensors not written (`absent` says why, for those that are counted)."""
    ignored = list(source.ignored)
    for param in source:
        if param.name in written:
            continue
        if not source.is_counted(param.name):
            reason = "tied copy, not stored: the output's format ties it by construction"
        else:
            reason = absent or "untied MLM decoder dropped (--drop-untied-decoder): the word embeddings serve instead"
        ignored.append(Ignored(param.source, reason, param.numel, str(param.tensor.dtype), tuple(param.tensor.shape)))
    return ignored


def _a(name: str) -> str:
    """`name` with its indefinite article as it is said: "an ESM-2", "an XLM-RoBERTa", "a BERT"."""
    return f"{'an' if name[:1] in 'AEIOU' or name.startswith('XLM') else 'a'} {name}"


# --- a DistilBERT as the BERT that computes the same ------------------------------------
#
# A DistilBERT written as the BERT that computes the same, for a target whose library builds BERT
# and not DistilBERT (Google's TF checkpoints, bert4keras).
#
# DistilBERT computes what BERT computes (families/distilbert.py): the same post-LayerNorm layers
# (`sa_layer_norm`, `output_layer_norm` are BERT's attention and output LayerNorms), attention
# scaled by the head size, the FFN with the config's activation, every LayerNorm's epsilon 1e-12,
# positions counted from 0 in a stored table (also when the config says `sinusoidal_pos_embds`,
# which only fills that table when a model is made), and its MLM head `vocab_transform` ->
# activation -> `vocab_layer_norm` -> `vocab_projector` tied to the word embeddings is BERT's
# `cls/predictions` transform, LayerNorm and output bias. It lacks token types and a pooler. Its
# BERT is the same tensors under BERT's names, with `type_vocab_size` 2 (BERT's) and a token-type
# table of two all-zero rows, so that whatever token types a caller passes add nothing, as
# DistilBERT takes none; no pooler. The read-back of the output is checked against this BERT.

#: The targets that build BERT and not the families whose declaration says `computes_as_bert`.
AS_BERT_TARGETS = ("tf", "bert4keras")
#: BERT's token types, as Google's and bert4keras' configs state them.
BERT_TOKEN_TYPES = 2

AS_BERT_NOTE = ("the source is a {family}; the {target} output is the BERT that computes the same (model_type bert): "
        "its tensors under BERT's names, the MLM head as BERT's cls/predictions, no pooler, and type_vocab_size "
        "2 with both token-type rows all zero, so token types add nothing, as the {family} takes none")


def as_bert_targets(family: str) -> tuple[str, ...]:
    """The targets that write `family` (a model type or variant) as its BERT."""
    declared = families.named(family)
    return AS_BERT_TARGETS if declared is not None and declared.computes_as_bert else ()


def written_as_bert(tree: ParameterTree, target: str) -> tuple[ParameterTree, list[str]]:
    """The tree to write --to `target`, and a note: `tree` as its BERT where the target builds BERT
    and not the tree's family; else `tree` itself and no note."""
    if target not in as_bert_targets(tree.config.model_type):
        return tree, []
    bert = replace(tree, config=replace(tree.config, model_type="bert",
                                        provenance={**tree.config.provenance, "model_type": "format"}))
    note = AS_BERT_NOTE.format(family=families.of(tree.config).display, target=target)
    return with_zero_token_types(bert, BERT_TOKEN_TYPES), [note]


def with_zero_token_types(tree: ParameterTree, rows: int) -> ParameterTree:
    """`tree`, a model with no token types, with `type_vocab_size` `rows` and a token-type table
    of that many all-zero rows [rows, W] (in the word embeddings' dtype): every token type adds
    zero to each embedding."""
    config = replace(tree.config, type_vocab_size=rows,
                     provenance={**tree.config.provenance, "type_vocab_size": "format"})
    name = "embeddings.token_type"
    dtype = tree["embeddings.word"].tensor.dtype
    zeros = ArrayTensor(np.zeros(role_of(name).expected_shape(config), dtype=dtype.numpy), dtype)
    rows_text = "one all-zero row" if rows == 1 else f"{rows} all-zero rows"
    params = {**tree.params, name: Parameter(name, zeros, source=f"(no token types: {rows_text})", file=tree.path)}
    return replace(tree, config=config, params={n: params[n] for n in sorted(params, key=model_order_key)})
