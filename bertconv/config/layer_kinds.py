"""Layers of two kinds, as ModernBERT's configs state them: global attention, and sliding-window
attention, each kind with its own rotary base.

transformers 5 reads `layer_types` ("full_attention" / "sliding_attention" per layer) and
`rope_parameters` ({kind: {"rope_type": "default", "rope_theta": base}}); the configs written
before it (and transformers 4) state `global_attn_every_n_layers` (layer i is global when
i % n == 0) and `global_rope_theta` / `local_rope_theta`. transformers 5 takes the newer key
where both are stated, transformers 4 the older: stated both ways with different values, a config
means two models, and is refused. Sliding-window layers let each query see the keys at most
`local_attention // 2` positions away.
"""

from __future__ import annotations

import json

from . import BertConfig

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import Any


GLOBAL, LOCAL = "full_attention", "sliding_attention"
#: ModernBertConfig's defaults: every third layer global, a 128-token window, bases 160,000 and 10,000.
DEFAULT_EVERY = 3
DEFAULT_WINDOW = 128
#: Per kind: its key in `rope_parameters`, its older flat key, its default base.
_BASES = ((GLOBAL, "global_rope_theta", 160_000.0), (LOCAL, "local_rope_theta", 10_000.0))
_ROPE_ENTRY_KEYS = ("rope_type", "rope_theta")


def read(data: dict[str, Any], num_layers: int) -> dict[str, Any]:
    """The `BertConfig` fields of a config's layer kinds; ValueError naming the key for a value
    bertconv cannot compute with (another rotary type, a scaling) or two keys that disagree."""
    kinds = _layer_types(data, num_layers)
    global_base, local_base = _bases(data)
    return {"local_attention_layers": tuple(i for i, kind in enumerate(kinds) if kind == LOCAL),
            "local_attention": _whole(data, "local_attention", DEFAULT_WINDOW),
            "rope_theta": global_base, "local_rope_theta": local_base}


def write(config: BertConfig) -> dict[str, Any]:
    """The keys transformers 5 reads (and those transformers 4 reads, with the same values)."""
    kinds = [LOCAL if i in config.local_attention_layers else GLOBAL for i in range(config.num_hidden_layers)]
    out: dict[str, Any] = {}
    every = period(config)
    if every is not None:
        out["global_attn_every_n_layers"] = every
    out.update({
        "layer_types": kinds,
        "local_attention": config.local_attention,
        "rope_parameters": {GLOBAL: {"rope_theta": config.rope_theta, "rope_type": "default"},
                            LOCAL: {"rope_theta": config.local_rope_theta, "rope_type": "default"}},
        "global_rope_theta": config.rope_theta,
        "local_rope_theta": config.local_rope_theta,
    })
    return out


def period(config: BertConfig) -> int | None:
    """The `global_attn_every_n_layers` that gives the config's layer kinds, or None where none does
    (transformers 4 then computes another model from the output's config)."""
    kinds = [LOCAL if i in config.local_attention_layers else GLOBAL for i in range(config.num_hidden_layers)]
    return next((n for n in range(1, len(kinds) + 1) if kinds == _every(n, len(kinds))), None)


def _every(n: int, num_layers: int) -> list[str]:
    return [LOCAL if i % n else GLOBAL for i in range(num_layers)]


def _layer_types(data: dict[str, Any], num_layers: int) -> list[str]:
    every = _whole(data, "global_attn_every_n_layers", DEFAULT_EVERY)
    if every == 0:
        raise ValueError("global_attn_every_n_layers is 0, expected a positive number")
    by_every = _every(every, num_layers)
    stated = data.get("layer_types")
    if stated is None:
        return by_every
    if (not isinstance(stated, list) or len(stated) != num_layers
            or any(kind not in (GLOBAL, LOCAL) for kind in stated)):
        raise ValueError(f"layer_types is {json.dumps(stated)[:200]}, expected one of \"{GLOBAL}\" and \"{LOCAL}\" "
                         f"per layer ({num_layers})")
    if "global_attn_every_n_layers" in data and stated != by_every:
        raise ValueError(f"layer_types and global_attn_every_n_layers ({every}) give different layers sliding-window "
                         f"attention: transformers 5 computes with layer_types, transformers 4 with "
                         f"global_attn_every_n_layers")
    return stated


def _bases(data: dict[str, Any]) -> tuple[float, float]:
    if data.get("rope_scaling") is not None:
        raise ValueError(f"rope_scaling is {json.dumps(data['rope_scaling'])[:200]}: scaled rotary positions, which "
                         f"bertconv does not compute (it computes rope_type \"default\")")
    parameters = data.get("rope_parameters") or {}
    if not isinstance(parameters, dict) or set(parameters) - {GLOBAL, LOCAL}:
        raise ValueError(f"rope_parameters is {json.dumps(parameters)[:200]}, expected an entry per layer kind, "
                         f"{GLOBAL} and {LOCAL}")
    bases = []
    for kind, flat_key, default in _BASES:
        entry = parameters.get(kind) or {}
        where = f"rope_parameters.{kind}"
        if not isinstance(entry, dict) or set(entry) - set(_ROPE_ENTRY_KEYS):
            raise ValueError(f"{where} is {json.dumps(entry)[:200]}, expected only {', '.join(_ROPE_ENTRY_KEYS)}")
        if entry.get("rope_type", "default") != "default":
            raise ValueError(f"{where}.rope_type is {json.dumps(entry['rope_type'])}: scaled rotary positions, which "
                             f"bertconv does not compute (it computes \"default\")")
        base = _positive(entry, "rope_theta", where) if "rope_theta" in entry else None
        flat = _positive(data, flat_key, flat_key) if data.get(flat_key) is not None else None
        if base is not None and flat is not None and base != flat:
            raise ValueError(f"{where}.rope_theta ({base:g}) and {flat_key} ({flat:g}) differ: transformers 5 "
                             f"computes with the first, transformers 4 with the second")
        bases.append(next((b for b in (base, flat) if b is not None), default))
    return bases[0], bases[1]


def _whole(data: dict[str, Any], key: str, default: int) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{key} is {json.dumps(value)}, expected a whole number")
    return value


def _positive(data: dict[str, Any], key: str, where: str) -> float:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{where} is {json.dumps(value)}, expected a positive number")
    return float(value)
