"""What every report says about the checkpoint it is about, under the same keys.

Every `--json` object of a command that reads a checkpoint opens with these fields (`diff` has
them twice, under `a` and `b`): the path read, its format, its family (`config.model_type`), the
model of the file it is (an ELECTRA checkpoint holds a generator and a discriminator; null for
files of one model), the config with where each value came from (`provenance`, nested as
`BertConfig.summary` gives), the heads present, and the entries set aside (`ignored`).
"""

from __future__ import annotations

from ..tree import ParameterTree


def checkpoint(tree: ParameterTree) -> dict:
    """The checkpoint fields of a report: path, format, family, model, config, heads, ignored."""
    return {
        "path": str(tree.path),
        "format": tree.format,
        "family": tree.config.model_type,
        "model": tree.model,
        "config": tree.config.summary(),
        "heads": tree.heads.as_dict(),
        "ignored": [i.as_dict() for i in tree.ignored],
    }
