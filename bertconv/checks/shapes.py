"""Whether a tree's tensors agree with its config: shapes, layer count, nothing missing."""

from __future__ import annotations

from ..tree import ParameterTree, canonical_names, layer_of, role_of


def shape_problems(tree: ParameterTree) -> list[str]:
    """Where the tensors disagree with the config: wrong shapes, missing or surplus layers.

    Each sentence names the tensor (its file name and canonical name).
    """
    config = tree.config
    problems = [*config.problems(), *filter(None, [tree.missing_condition()])]
    if problems:
        return problems
    dims = config.dims()
    for param in tree:
        role = role_of(param.name)
        expected = role.expected_shape(config, dims)
        if tuple(param.tensor.shape) != expected:
            problems.append(f"{param.source} ({param.name}): shape {list(param.tensor.shape)}, "
                            f"config expects {list(expected)}")
        layer = layer_of(param.name)
        if layer is not None and layer >= config.stored_layers:
            problems.append(f"{param.source} ({param.name}): layer {layer} but the config has "
                            f"{config.stored_layers} stored layers")
    expected_names = set(canonical_names(config, tree.heads, conditional=tree.conditional))
    surplus = [p for p in tree if p.name not in expected_names and role_of(p.name).copy_of is None
               and (layer_of(p.name) is None or layer_of(p.name) < config.stored_layers)]
    for param in surplus:
        problems.append(f"{param.source} ({param.name}): the config's model has no such parameter "
                        f"(position_embedding_type is {config.position_embedding_type!r})"
                        if param.name.endswith("distance_embedding") else
                        f"{param.source} ({param.name}): the config's model has no such parameter")
    missing = sorted(expected_names - set(tree.params), key=lambda n: (layer_of(n) or -1, n))
    if missing:
        shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        problems.append(f"missing parameters: {shown}")
    return problems
