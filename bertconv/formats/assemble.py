"""From a container's named tensors to a `ParameterTree`, driven by a format's table.

This is the one place where file names become canonical names: every reader lists its entries
and hands them here with its table, so all formats classify, tie and infer the same way.
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path

from .. import families
from ..config import UNKNOWN, BertConfig, default_heads
from ..errors import bad_input
from ..records import record
from ..tensor import LazyTensor
from ..tree import Ignored, Parameter, ParameterTree, layer_of, model_order_key, role_of
from .table import Table

UNKNOWN_REASON = "not a BERT pre-training parameter (no row of the {format} table names it)"


@record
class Entry:
    """A tensor as a container lists it.

    `identity` is equal for two entries viewing the same bytes (shared storage), else None.
    """

    name: str
    tensor: LazyTensor
    file: Path
    identity: Hashable | None = None


def assemble(
    *,
    format_name: str,
    path: Path,
    entries: list[Entry],
    table: Table,
    config: BertConfig | None,
    default_activation: str,
    num_heads: int | None = None,
    files: list[Path] | None = None,
    vocab: Path | None = None,
    extra_ignored: list[Ignored] | None = None,
    rename=lambda name: name,
    family: str = "bert",
) -> ParameterTree:
    """Classify `entries` with `table` into parameters and ignored entries, and settle a config.

    `rename` maps a file name to the table's spelling first (e.g. Hugging Face's missing `bert.`
    prefix on encoder-only files). `config`, if given, wins over shapes; `num_heads` overrides it.
    `family` is the model type of the table (a config that names another is refused).
    """
    params: dict[str, Parameter] = {}
    ignored: list[Ignored] = list(extra_ignored or [])
    by_identity: dict[Hashable, str] = {}
    for entry in entries:
        match = table.match(rename(entry.name))
        if match is None:
            reason = table.skip_reason(entry.name)
            ignored.append(Ignored(entry.name, reason or UNKNOWN_REASON.format(format=format_name), entry.tensor.numel,
                                   str(entry.tensor.dtype), tuple(entry.tensor.shape), unread=reason is None))
            continue
        if match.canonical in params:
            raise bad_input(path, f"both {params[match.canonical].source!r} and {entry.name!r} are "
                                  f"{match.canonical}; a checkpoint must hold each parameter once")
        tensor = entry.tensor
        if match.layout.name == "TRANSPOSE" and len(tensor.shape) != 2:
            raise bad_input(entry.file, f"tensor {entry.name!r} has shape {list(tensor.shape)}, expected a 2-D matrix")
        shared_with = by_identity.get(entry.identity) if entry.identity is not None else None
        params[match.canonical] = Parameter(match.canonical, match.layout.to_canonical(tensor),
                                            entry.name, entry.file, shared_with=shared_with,
                                            source_shape=tuple(tensor.shape))
        if entry.identity is not None:
            by_identity.setdefault(entry.identity, match.canonical)
    if not params:
        sample = ", ".join(repr(e.name) for e in entries[:5]) or "no tensors at all"
        expected = ", ".join(repr(r.name) for r in table.rows[:3])
        raise bad_input(path, f"no BERT parameters found: the file holds {sample}"
                              f"{' ...' if len(entries) > 5 else ''}; a {format_name} BERT has names like {expected}")
    if config is None:
        config = config_from_shapes(path, params, default_activation, family)
    else:
        if config.model_type != family:
            raise bad_input(config.source or path, f"config is for a {config.model_type} model, but the checkpoint "
                                                   f"holds a {family} (its names are {format_name}'s {family} names)")
        _check_layer_count(path, config, params)
    if num_heads is not None:
        config = _override_heads(path, config, num_heads)
    ordered = {name: params[name] for name in sorted(params, key=model_order_key)}
    return ParameterTree(format_name, Path(path), config, ordered, ignored, list(files or [path]), vocab)


def _check_layer_count(path: Path, config: BertConfig, params: dict[str, Parameter]) -> None:
    """Refuse a config claiming more layers than the file stores, before anything loops over them.

    Fewer layers stored than claimed is not a partial checkpoint one can audit layer by layer:
    it is another model's config (or a hostile one: `num_hidden_layers: 1e9` would make every
    per-layer loop run for hours). More layers stored than claimed is left to the audit, which
    names the extra tensors.
    """
    stored = {layer_of(n) for n in params if layer_of(n) is not None}
    claimed = config.stored_layers
    if claimed > len(stored):
        where = f"{config.source}" if config.source else "the config"
        held = f"layers 0..{max(stored)}" if stored else "no encoder layers"
        field = "num_hidden_groups x inner_group_num" if config.shares_layers else "num_hidden_layers"
        raise bad_input(path, f"{where} says {field} is {claimed}, but the checkpoint stores "
                              f"{held} ({len(stored)}): the config is not this checkpoint's; pass the "
                              f"right one with --config")


def _override_heads(path: Path, config: BertConfig, num_heads: int) -> BertConfig:
    """`--heads N` fills in what no file says; it never silently contradicts a config that does."""
    stated = config.provenance.get("num_attention_heads") == "file"
    if stated and config.num_attention_heads != num_heads:
        raise bad_input(path, f"--heads {num_heads} contradicts {config.source or 'the config'}, which says "
                              f"num_attention_heads is {config.num_attention_heads}; drop --heads, or pass "
                              f"--config with a config that says {num_heads}")
    return config.with_overrides(num_attention_heads=num_heads)


def config_from_shapes(path: Path, params: dict[str, Parameter], activation: str,
                       family: str = "bert") -> BertConfig:
    """A config read off the tensors' shapes, for files that carry none; `family` is the model
    type the format's table is for.

    Heads cannot be seen in shapes: the stated default is `config.default_heads` (H / 64).
    """
    def dim(name: str, axis: int) -> int:
        if name not in params:
            raise bad_input(path, f"no config given and {name} is absent, so its size cannot be "
                                  f"inferred; pass --config bert_config.json")
        shape = params[name].tensor.shape
        if len(shape) != 2:  # every tensor the sizes are read from is a 2-D matrix
            raise bad_input(params[name].file, f"tensor {params[name].source!r} ({name}) has shape {list(shape)}, "
                                               f"expected a 2-D matrix; no config given, so the model's sizes "
                                               f"are read from it")
        return int(shape[axis])

    declared = families.named(family)
    if "local_attention" in declared.computes.get(families.HF, ()):
        raise bad_input(path, f"no config given, and a {declared.display} model's layer kinds (which layers attend in a "
                              f"sliding window, and how wide), rotary bases and biases are said only by its "
                              f"config.json; pass --config config.json")
    relative = sorted(n for n in params if n.endswith(".attention.distance_embedding"))
    if relative:
        raise bad_input(params[relative[0]].file,
                        f"no config given, and {params[relative[0]].source!r} is a relative-position table: "
                        f"whether attention adds it to the keys alone (relative_key) or to the queries too "
                        f"(relative_key_query) is said only by the config's position_embedding_type; "
                        f"pass --config config.json")
    width = dim("embeddings.word", 1)
    projected = "embeddings.projection.kernel" in params
    projector = next((n for n in ("embeddings.projection.kernel", "embeddings.word_projection.kernel") if n in params),
                     None)
    hidden = dim(projector, 1) if projector else width
    layers = {layer_of(n) for n in params if layer_of(n) is not None}
    conditional = [p for n, p in params.items() if role_of(n).conditional]
    provenance = {k: "shapes" for k in ("vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size",
                                        "max_position_embeddings", "type_vocab_size", "embedding_size",
                                        "embedding_projection")}
    provenance.update(num_attention_heads="default", hidden_act="default", layer_norm_eps="default",
                      tie_word_embeddings="default", model_type="format",
                      position_offset="format" if declared.position_offset_key else "default")
    if "layer_norm_eps" in declared.fields:  # fixed by its library's code (RoFormer-v2's Keras epsilon)
        provenance["layer_norm_eps"] = "family"
    shared: dict[str, int] = {}
    if not declared.shapes_give_layer_count:
        # How many times the stored layers are applied, and how they group, only a config says;
        # the parameter count does not depend on it (each stored layer counts once), so audit can
        # go on, and whatever computes or converts refuses these fields (`checks.contract`).
        shared = dict(num_hidden_groups=len(layers), inner_group_num=1)
        provenance.update({name: UNKNOWN for name in ("num_hidden_layers", *shared)})
    return BertConfig(
        vocab_size=dim("embeddings.word", 0),
        hidden_size=hidden,
        num_hidden_layers=max(layers) + 1 if layers else 0,
        num_attention_heads=default_heads(hidden),
        intermediate_size=dim("layers.0.ffn.intermediate.kernel", 1) if layers else 0,
        max_position_embeddings=dim("embeddings.position", 0),
        type_vocab_size=dim("embeddings.token_type", 0) if "embeddings.token_type" in params else 0,
        hidden_act=activation,
        conditional_size=int(conditional[0].tensor.shape[0]) if conditional else None,
        model_type=family,
        embedding_size=width if width != hidden or declared.states_embedding_size else None,
        embedding_projection=projected,
        position_offset=position_offset(declared),
        **shared,
        **declared.layer_norms("embeddings.norm.gamma" in params),
        **declared.fields,
        provenance=provenance,
    )


def position_offset(family: families.Family) -> int:
    """The first position row of a model of `family` whose config states none: its position
    offset key's default + 1 (RoBERTa: padding index 1, positions from row 2), else 0."""
    return family.position_offset_key[1] + 1 if family.position_offset_key else 0
