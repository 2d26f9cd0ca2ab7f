"""fairseq RoBERTa checkpoints (`model.pt`, `checkpoint_best.pt`): read only.

fairseq's `checkpoint_utils.save_state` pickles a dict with torch: `model` (the state dict),
`args` (the training options, an argparse.Namespace; fairseq >= 0.10 saves `cfg`, a plain dict
whose `model` entry holds them), `optimizer_history`, `extra_state` and sometimes
`last_optimizer_state`. The safe unpickler (`containers.torch_pickle`) reads the state dict's
layout and the options' values; nothing in the pickle is ever called.

Names (fairseq/models/roberta/model.py: `RobertaEncoder`, whose `sentence_encoder` is a
`TransformerSentenceEncoder`, later a `TransformerEncoder`, and `RobertaLMHead`), under
`decoder.` in older checkpoints and `encoder.` in newer ones:

    sentence_encoder.embed_tokens.weight            [V, H]
    sentence_encoder.embed_positions.weight         [P, H], P = max_positions + padding_idx + 1:
                                                    the first padding_idx + 1 rows are never used
    sentence_encoder.emb_layer_norm.{weight,bias}   [H] (newer: layernorm_embedding)
    sentence_encoder.layers.{i}.self_attn.{q,k,v,out}_proj.{weight [H, H] (out, in), bias}
    sentence_encoder.layers.{i}.self_attn_layer_norm, .fc1 [I, H], .fc2 [H, I], .final_layer_norm
    lm_head.dense [H, H], lm_head.layer_norm [H], lm_head.bias [V], lm_head.weight [V, H]: the
                                                    decoder, the token table itself unless
                                                    `untie_weights_roberta`

No token types (RoBERTa has none). The config comes from the options: `encoder_embed_dim`,
`encoder_layers`, `encoder_attention_heads`, `encoder_ffn_embed_dim`, `activation_fn` (fairseq's
"gelu" is the exact erf form, "gelu_accurate" the tanh one), LayerNorm epsilon 1e-5 (fairseq's
`LayerNorm` default); sizes the options do not state (V, P) from the shapes. A pre-LayerNorm
encoder (`encoder_normalize_before`) is not RoBERTa's computation and is refused.
"""

from __future__ import annotations

import json

from pathlib import Path

from ..config import BertConfig
from .. import families
from ..containers import torch_pickle
from ..errors import BadInput, bad_input
from ..tree import Ignored, ParameterTree
from .assemble import Entry, assemble, position_offset
from .configs import config_beside
from .table import Row, Skip, Table, torch_linear_rows

FORMAT = "fairseq"
#: fairseq's `gelu` is torch's exact erf GELU.
DEFAULT_ACTIVATION = "gelu"
#: fairseq.modules.LayerNorm's epsilon (torch's default), RoBERTa's trained value.
LAYER_NORM_EPS = 1e-5
#: The top-level prefixes of the encoder's names, newer and older fairseq.
SCOPES = ("encoder.", "decoder.")
#: Names only fair-esm's ESM models hold (a final norm, rotary buffers): fairseq checkpoints too,
#: read by formats/pytorch/fair_esm.py.
ESM_MARKS = ("emb_layer_norm_after.", "rot_emb.inv_freq")
_ACTIVATIONS = {"gelu": "gelu", "gelu_accurate": "gelu_tanh", "gelu_fast": "gelu_tanh", "relu": "relu"}


def norm_rows(canonical: str, name: str, legacy: str | None = None) -> tuple[Row, ...]:
    return (Row(f"{canonical}.gamma", f"{name}.weight", legacy=(f"{legacy}.weight",) if legacy else ()),
            Row(f"{canonical}.beta", f"{name}.bias", legacy=(f"{legacy}.bias",) if legacy else ()))


_LAYER = "sentence_encoder.layers.{i}"

TABLE = Table("fairseq", (
    Row("embeddings.word", "sentence_encoder.embed_tokens.weight"),
    Row("embeddings.position", "sentence_encoder.embed_positions.weight"),
    *norm_rows("embeddings.norm", "sentence_encoder.layernorm_embedding", legacy="sentence_encoder.emb_layer_norm"),
    *torch_linear_rows("layers.{i}.attention.query", f"{_LAYER}.self_attn.q_proj"),
    *torch_linear_rows("layers.{i}.attention.key", f"{_LAYER}.self_attn.k_proj"),
    *torch_linear_rows("layers.{i}.attention.value", f"{_LAYER}.self_attn.v_proj"),
    *torch_linear_rows("layers.{i}.attention.output", f"{_LAYER}.self_attn.out_proj"),
    *norm_rows("layers.{i}.attention_norm", f"{_LAYER}.self_attn_layer_norm"),
    *torch_linear_rows("layers.{i}.ffn.intermediate", f"{_LAYER}.fc1"),
    *torch_linear_rows("layers.{i}.ffn.output", f"{_LAYER}.fc2"),
    *norm_rows("layers.{i}.ffn_norm", f"{_LAYER}.final_layer_norm"),
    *torch_linear_rows("mlm.transform", "lm_head.dense"),
    *norm_rows("mlm.norm", "lm_head.layer_norm"),
    Row("mlm.output_bias", "lm_head.bias"),
    Row("mlm.decoder", "lm_head.weight"),
), skips=(  # matched against the file's names, scope included
    Skip("*.sentence_encoder.version", "fairseq's serialization version buffer, not a parameter"),
    Skip("*.embed_positions._float_tensor", "a buffer of sinusoidal positions, not a parameter"),
    Skip("*classification_heads.*", "fine-tuned classification head, not part of RoBERTa pre-training"),
))


def _unscoped(name: str) -> str:
    for scope in SCOPES:
        if name.startswith(scope):
            return name[len(scope):]
    return name


# --- finding the files ----------------------------------------------------------------------


def sniff(path: Path) -> str | None:
    """A torch pickle of a dict with fairseq's options (`args` or `cfg`) beside a `model` state
    dict holding a RoBERTa's `sentence_encoder` names."""
    return FORMAT if claims(path, _is_fairseq) else None


def claims(path: Path, holds) -> bool:
    """Whether `path` is a fairseq save (a torch pickle of `model` beside `args` or `cfg`) whose
    checkpoint `holds` (a predicate) says is the caller's model."""
    path = Path(path)
    if not path.is_file() or not torch_pickle.looks_like_torch(path):
        return False
    try:
        checkpoint = torch_pickle.read_checkpoint(path)
    except BadInput:
        return False
    return is_save(checkpoint) and holds(checkpoint)


def is_save(checkpoint: torch_pickle.TorchCheckpoint) -> bool:
    """`checkpoint_utils.save_state`'s dict: the state dict under `model`, the options beside it."""
    return checkpoint.wrapper == "model" and bool({"args", "cfg"} & set(checkpoint.beside))


def holds_esm(checkpoint: torch_pickle.TorchCheckpoint) -> bool:
    """Whether a fairseq state dict's names are an ESM's (its final norm or its rotary buffers)."""
    return any(mark in name for name in checkpoint.tensors for mark in ESM_MARKS)


def _is_fairseq(checkpoint: torch_pickle.TorchCheckpoint) -> bool:
    return any(TABLE.match(_unscoped(name)) for name in checkpoint.tensors) and not holds_esm(checkpoint)


def candidates(directory: Path) -> list[Path]:
    return [path for path in sorted(Path(directory).glob("*.pt")) if sniff(path)]


# --- reading --------------------------------------------------------------------------------


def read(path: Path, *, config_path: Path | None = None, num_heads: int | None = None) -> ParameterTree:
    """Read a fairseq RoBERTa checkpoint's layout (no tensor data) and its options."""
    path = Path(path)
    checkpoint = torch_pickle.read_checkpoint(path)
    if not (is_save(checkpoint) and _is_fairseq(checkpoint)):
        raise bad_input(path, "is not a fairseq RoBERTa checkpoint: expected a dict with `model` (a state dict "
                              "with encoder.sentence_encoder.* names) beside `args` or `cfg`")
    entries, ignored = entries_and_ignored(path, checkpoint)
    options = _options(path, checkpoint)
    config = (config_beside(path.parent, config_path, (), activation=DEFAULT_ACTIVATION, family="roberta")
              or _config_from_options(path, options, checkpoint))
    return assemble(
        format_name=FORMAT, path=path, entries=entries, table=TABLE, config=config,
        default_activation=DEFAULT_ACTIVATION, num_heads=num_heads, files=[path], extra_ignored=ignored,
        rename=_unscoped, family="roberta",
    )


def entries_and_ignored(path: Path, checkpoint: torch_pickle.TorchCheckpoint,
                        saved_by: str = "fairseq") -> tuple[list[Entry], list[Ignored]]:
    """The state dict's tensors, and what is set aside: its other entries, and the state the
    training library (`saved_by`) saved beside it."""
    entries = [Entry(name, tensor, path, checkpoint.identities.get(name))
               for name, tensor in checkpoint.tensors.items()]
    ignored = [Ignored(f"model/{name}", f"a {value.type_name} in the state dict, not a tensor", value.values)
               for name, value in checkpoint.non_tensors.items()]
    ignored += [Ignored(name, f"{saved_by}'s saved {name} ({value.type_name}), not a model parameter", value.values)
                for name, value in checkpoint.beside.items()]
    return entries, ignored


def _options(path: Path, checkpoint: torch_pickle.TorchCheckpoint) -> dict:
    """The model's options: `args` (a Namespace), else `cfg["model"]` (fairseq >= 0.10)."""
    args = checkpoint.settings.get("args")
    if isinstance(args, dict) and "encoder_embed_dim" in args:
        return args
    model = (checkpoint.settings.get("cfg") or {}).get("model")
    if isinstance(model, dict) and "encoder_embed_dim" in model:
        return model
    raise bad_input(path, "fairseq checkpoint whose `args` / `cfg.model` state no encoder_embed_dim: its model's "
                          "options were not saved as a Namespace or plain dict bertconv reads; pass --config with "
                          "a RoBERTa config.json")


def _config_from_options(path: Path, options: dict, checkpoint: torch_pickle.TorchCheckpoint) -> BertConfig:
    def size(key: str) -> int:
        value = options.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise bad_input(path, f"fairseq option {key} is {value!r}, expected a positive whole number")
        return value

    if options.get("encoder_normalize_before"):
        raise bad_input(path, "fairseq option encoder_normalize_before is true: a pre-LayerNorm encoder, which is "
                              "not RoBERTa's computation (LayerNorm after each residual); bertconv does not read it")
    activation = options.get("activation_fn", "gelu")
    if activation not in _ACTIVATIONS:
        raise bad_input(path, f"fairseq option activation_fn is {activation!r}; bertconv knows "
                              f"{', '.join(_ACTIVATIONS)}")
    shapes = {_unscoped(name): tensor.shape for name, tensor in checkpoint.tensors.items()}

    def rows(name: str) -> int:
        shape = shapes.get(name)
        if shape is None or len(shape) != 2:
            raise bad_input(path, f"{name} is {'absent' if shape is None else f'of shape {list(shape)}'}; "
                                  f"expected a 2-D table, whose rows give a size the options do not state")
        return int(shape[0])

    untied = bool(options.get("untie_weights_roberta", False))
    values = dict(
        vocab_size=rows("sentence_encoder.embed_tokens.weight"),
        hidden_size=size("encoder_embed_dim"),
        num_hidden_layers=size("encoder_layers"),
        num_attention_heads=size("encoder_attention_heads"),
        intermediate_size=size("encoder_ffn_embed_dim"),
        max_position_embeddings=rows("sentence_encoder.embed_positions.weight"),
        type_vocab_size=0,
        hidden_act=_ACTIVATIONS[activation],
        layer_norm_eps=LAYER_NORM_EPS,
        tie_word_embeddings=not untied,
        model_type="roberta",
        position_offset=position_offset(families.named("roberta")),
    )
    provenance = {key: "file" for key in values}
    provenance.update(vocab_size="shapes", max_position_embeddings="shapes", type_vocab_size="format",
                      layer_norm_eps="format", model_type="format", position_offset="format")
    fixed = families.named("roberta").fixed[families.FAIRSEQ]
    unread = tuple((key, json.dumps(options[key], default=str)) for key, value in fixed.items()
                   if key in options and options[key] != value and not (value is None and options[key] == ""))
    return BertConfig(**values, unread=unread, provenance=provenance, source=path)
