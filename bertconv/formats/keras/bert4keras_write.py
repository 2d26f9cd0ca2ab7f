"""Writing bert4keras weights (`convert SRC DST --to bert4keras`): the directory DST with
`bert_config.json` and `bert4keras_model.h5`, the file that
`build_transformer_model(config_path, with_pool=, with_nsp=, with_mlm=).save_weights(...)`
would write: same layers in the same `model.layers` order, weightless ones included, same weight
names (as tf-keras 2.x names them in a fresh session).
"""

from __future__ import annotations

import json
from pathlib import Path

from ... import families
from ...containers.hdf5 import keras_write as keras_h5_write
from ...containers.hdf5.keras_write import LayerToWrite
from ...dtypes import BFLOAT16, FLOAT32
from ...errors import bad_input
from ...config.dialects import bert4keras_config_dict
from ...tensor import ArrayTensor, Bfloat16Widened
from ...tree import ParameterTree
from .bert4keras_graph import model_layers
from .bert4keras_table import (ALBERT, CONFIG_FILE, WEIGHTS_FILE, FAMILY_BY_TYPE, NEZHA, NEZHA_MAX_RELATIVE_POSITION,
                               RELATIVE_POSITION, Family)
from ..table import (
    UNTIED_DECODER,
    refuse_sentence_head_without_pooler,
    refuse_untied_decoder,
    refuse_unwritten,
    unit_norm_scales,
)

#: What the writer records as the file's producer: the layout is tf-keras 2.21's.
BACKEND = "tensorflow"
KERAS_VERSION = "2.21.0"


def layers_to_write(tree: ParameterTree, *, drop_untied_decoder: bool = False) -> list[LayerToWrite]:
    """Every layer of the bert4keras model for `tree`'s heads, in `model.layers` order, each with
    its weights named as `save_weights` names them. Refuses a tree bert4keras cannot hold."""
    heads = tree.heads
    family = FAMILY_BY_TYPE.get(tree.config.model_type)
    if family is None:
        raise bad_input(tree.path, f"is a {tree.config.model_type} model; bert4keras builds BERT, ALBERT, ELECTRA, "
                                   f"RoFormer, RoFormer-v2 and NEZHA here (model='bert', 'albert', 'electra', "
                                   f"'roformer', 'roformer_v2', 'nezha'): "
                                   f"convert it --to hf")
    _refuse_what_family_cannot_hold(tree, family)
    refuse_sentence_head_without_pooler(tree, ("nsp", "sop"), "bert4keras' NSP-Proba sits on Pooler-Dense (with_nsp "
                                        "implies with_pool), so it cannot be written --to bert4keras")
    refuse_untied_decoder(tree, drop_untied_decoder, "bert4keras ties the decoder to Embedding-Token by construction")
    conditional = tree.conditional
    names = model_layers(tree.config.num_hidden_layers, heads, segments="embeddings.token_type" in tree,
                         conditional=conditional, family=family,
                         projection="embeddings.projection.kernel" in tree)
    layers, written, missing = [], set(), []
    for name in names:
        kind = family.kind_of(name)
        slots = () if kind is None else kind.slots + (kind.conditional if conditional else ())
        if kind is RELATIVE_POSITION:  # NEZHA's sinusoids: computed, as bert4keras initializes them
            layers.append(LayerToWrite(name, ((f"{name}/embeddings:0", _relative_sinusoids(tree)),)))
            continue
        weights = []
        for slot in slots:
            canonical = family.table.match(f"{name}/{slot.role}").canonical
            if canonical not in tree:
                missing.append(canonical)
                continue
            tensor = tree[canonical].tensor
            weights.append((f"{name}/{slot.keras_name}:0", Bfloat16Widened(tensor) if tensor.dtype is BFLOAT16 else tensor))
            written.add(canonical)
        layers.append(LayerToWrite(name, tuple(weights)))
    if missing:
        raise bad_input(tree.path, f"cannot write --to bert4keras: missing {', '.join(sorted(missing))}")
    # A dropped decoder goes with its own bias; MLM-Bias holds the output bias.
    target = f"bert4keras' {families.display_name(family.model_type)}"
    dropped = (UNTIED_DECODER if drop_untied_decoder else frozenset()) | unit_norm_scales(tree, target)
    refuse_unwritten(tree, written, target, dropped=dropped)
    return layers


def _relative_sinusoids(tree: ParameterTree) -> ArrayTensor:
    """NEZHA's `Embedding-Relative-Position` weights [2K + 1, D], as bert4keras' initializer computes them."""
    from ...runtime.sinusoids import keras_relative_table  # noqa: PLC0415 (a NEZHA's only; imports NumPy)

    table = keras_relative_table(tree.config.max_relative_position, tree.config.head_size)
    return ArrayTensor(table, FLOAT32)


def _refuse_what_family_cannot_hold(tree: ParameterTree, family: Family) -> None:
    """What bert4keras' model of the family cannot build: ALBERT with more than one shared layer
    or without a projection, a projection where E = H, the replaced-token head beside others.

    ELECTRA's discriminator is written as `model='electra', with_discriminator=True` builds it;
    its generator (and any projected model with pooler, NSP or MLM heads) as `model='bert'` with
    the config's embedding_size builds it: the same layers, the same computation."""
    config, path = tree.config, tree.path
    projected = "embeddings.projection.kernel" in tree
    if family is ALBERT and config.stored_layers != 1:
        raise bad_input(path, f"is an ALBERT with {config.num_hidden_groups} group(s) of {config.inner_group_num} "
                              f"inner layer(s); bert4keras' ALBERT shares one layer (num_hidden_groups = "
                              f"inner_group_num = 1): convert it --to tf or hf")
    if projected and config.embedding_width == config.hidden_size:
        raise bad_input(path, f"projects its embeddings with embedding_size = hidden_size = {config.hidden_size}; "
                              f"bert4keras builds Embedding-Mapping only when they differ, so it cannot hold "
                              f"this projection: convert it --to tf or hf")
    if family is NEZHA and config.max_relative_position != NEZHA_MAX_RELATIVE_POSITION:
        raise bad_input(path, f"clips relative distances at max_relative_position {config.max_relative_position}; "
                              f"bert4keras' NEZHA clips them at {NEZHA_MAX_RELATIVE_POSITION} whatever its config "
                              f"says, so it would compute another model: convert it --to hf")
    if config.rotary_value:
        raise bad_input(path, "rotates its attention values by their positions too (rotary_value); bert4keras' "
                              "RoFormer rotates queries and keys only, so it would compute another model: convert "
                              "it --to hf")
    heads = tree.heads
    if heads.rtd and (heads.mlm or heads.pooler or heads.nsp):
        raise bad_input(path, "has ELECTRA's replaced-token head beside a pooler, NSP or MLM head; bert4keras' "
                              "ELECTRA (with_discriminator) builds the discriminator's head alone")


def write(tree: ParameterTree, directory: Path, *, options) -> list[Path]:
    """Write `tree` into the (new, empty) `directory` as `bert4keras_model.h5` and the
    `bert_config.json` that `build_transformer_model` takes (the weights file holds no config:
    sizes, heads, activation and LayerNorm epsilon travel in it).

    `options` is a `conversion.WriteOptions` (drop_untied_decoder, on_tensor).
    """
    layers = layers_to_write(tree, drop_untied_decoder=options.drop_untied_decoder)
    weights = directory / WEIGHTS_FILE
    keras_h5_write.write_weights_file(weights, layers, backend=BACKEND, keras_version=KERAS_VERSION,
                                on_tensor=options.on_tensor)
    config = directory / CONFIG_FILE
    config.write_text(json.dumps(bert4keras_config_dict(tree.config), indent=2, sort_keys=True) + "\n")
    return [weights, config]
