"""fair-esm's ESM-2 checkpoints (`esm2_t33_650M_UR50D.pt` and the like): read only.

What `esm.pretrained.load_model_and_alphabet_local` loads (fair-esm 2.0.0, its
`_load_model_and_alphabet_core_v2`): a torch pickle of `model`, the state dict, beside `cfg`, whose
`model` entry holds fairseq's options. fair-esm reads four of them, `encoder_layers`,
`encoder_embed_dim`, `encoder_attention_heads` and `token_dropout`, and builds
`esm.model.esm2.ESM2`, whose code fixes the rest:

    the alphabet        "ESM-1b": 33 tokens, <cls> 0, <pad> 1, <eos> 2, <mask> 32
    the FFN width       4 x encoder_embed_dim, exact-erf GELU
    LayerNorm           torch's, epsilon 1e-5; before each sublayer, `emb_layer_norm_after` last
    positions           rotary, base 10000 (`rot_emb.inv_freq`, a buffer saved in every layer)
    attention           biased q, k, v and output projections, no bias_kv, no zero attention

fair-esm strips `encoder.sentence_encoder.` and then `encoder.` from the names (the published
files' spelling); a file saved from `ESM2.state_dict()` has the bare names:

    embed_tokens.weight                               [V, H]
    layers.{i}.self_attn.{q,k,v,out}_proj.{weight [H, H] (out, in), bias}
    layers.{i}.self_attn_layer_norm, .fc1 [4H, H], .fc2 [H, 4H], .final_layer_norm
    emb_layer_norm_after.{weight, bias}               [H]
    lm_head.dense [H, H], lm_head.layer_norm [H], lm_head.bias [V],
    lm_head.weight [V, H]                             the token table itself (`RobertaLMHead`)
    contact_head.regression.{weight [1, L x A], bias} published apart (`-contact-regression.pt`)

The config is what transformers' `convert_esm.py` writes for an ESM-2 (its `max_position_embeddings`
1026 bounds nothing a rotary model computes). ESM-1, ESM-1b, ESM-1v and the MSA Transformer
(learned positions, `args` of arch `roberta_large`, `protein_bert_base`, `msa_transformer`) are
another computation and are refused by name.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...config import BertConfig
from ...config.dialects import config_from_dict
from ...containers import torch_pickle
from ...errors import bad_input
from ...records import replace
from ...tree import ParameterTree
from ..assemble import assemble
from ..configs import config_beside
from ..fairseq import claims, entries_and_ignored, holds_esm, is_save, norm_rows
from ..hf.checkpoint import check_rotary_buffer
from ..hf.tables import ROTARY_BUFFER
from ..table import Row, Skip, Table, torch_linear_rows

FORMAT = "fair-esm"
#: The prefixes fair-esm's `upgrade_state_dict` strips, in its order.
PREFIXES = ("encoder.sentence_encoder.", "encoder.")
#: fair-esm's `Alphabet.from_architecture("ESM-1b")`, which every ESM-2 is built with.
ALPHABET_SIZE, PAD_ID, MASK_ID = 33, 1, 32
#: What transformers' `convert_esm.py` states for every ESM-2 (torch's LayerNorm default).
MAX_POSITIONS, LAYER_NORM_EPS = 1026, 1e-5
#: The options `_load_model_and_alphabet_core_v2` reads; everything else in them is the training run's.
READ_OPTIONS = ("encoder_layers", "encoder_embed_dim", "encoder_attention_heads", "token_dropout")
#: fairseq `arch` values of the ESM-1 line, which `_load_model_and_alphabet_core_v1` builds otherwise.
ESM1_ARCHES = {"roberta_large": "ESM-1b / ESM-1v", "protein_bert_base": "ESM-1", "msa_transformer": "the MSA Transformer"}

_LAYER = "layers.{i}"

TABLE = Table(FORMAT, (
    Row("embeddings.word", "embed_tokens.weight"),
    *torch_linear_rows("layers.{i}.attention.query", f"{_LAYER}.self_attn.q_proj"),
    *torch_linear_rows("layers.{i}.attention.key", f"{_LAYER}.self_attn.k_proj"),
    *torch_linear_rows("layers.{i}.attention.value", f"{_LAYER}.self_attn.v_proj"),
    *torch_linear_rows("layers.{i}.attention.output", f"{_LAYER}.self_attn.out_proj"),
    *norm_rows("layers.{i}.attention_norm", f"{_LAYER}.self_attn_layer_norm"),
    *torch_linear_rows("layers.{i}.ffn.intermediate", f"{_LAYER}.fc1"),
    *torch_linear_rows("layers.{i}.ffn.output", f"{_LAYER}.fc2"),
    *norm_rows("layers.{i}.ffn_norm", f"{_LAYER}.final_layer_norm"),
    *norm_rows("final_norm", "emb_layer_norm_after"),
    *torch_linear_rows("contact", "contact_head.regression"),
    *torch_linear_rows("mlm.transform", "lm_head.dense"),
    *norm_rows("mlm.norm", "lm_head.layer_norm"),
    Row("mlm.output_bias", "lm_head.bias"),
    Row("mlm.decoder", "lm_head.weight"),
), skips=(Skip("*rot_emb.inv_freq", ROTARY_BUFFER),))


def unprefixed(name: str) -> str:
    """A name as fair-esm loads it (`upgrade_state_dict`)."""
    for prefix in PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


# --- finding the files ----------------------------------------------------------------------


def sniff(path: Path) -> str | None:
    """A torch pickle of `model` (an ESM's state dict) beside fairseq's `cfg` or `args`."""
    return FORMAT if claims(path, holds_esm) else None


def candidates(directory: Path) -> list[Path]:
    return [path for path in sorted(Path(directory).glob("*.pt")) if sniff(path)]


# --- reading --------------------------------------------------------------------------------


def read(path: Path, *, config_path: Path | None = None, num_heads: int | None = None) -> ParameterTree:
    """Read a fair-esm ESM-2 checkpoint's layout (no tensor data) and the options fair-esm reads."""
    path = Path(path)
    checkpoint = torch_pickle.read_checkpoint(path)
    if not (is_save(checkpoint) and holds_esm(checkpoint)):
        raise bad_input(path, "is not a fair-esm checkpoint: expected a dict with `model` (an ESM state dict, "
                              "emb_layer_norm_after and rot_emb buffers among its names) beside `cfg` or `args`")
    _refuse_esm1(path, checkpoint)
    entries, ignored = entries_and_ignored(path, checkpoint)
    config = (config_beside(path.parent, config_path, (), activation="gelu", family="esm")
              or _config_from_options(path, _options(path, checkpoint)))
    _refuse_untied_decoder(path, checkpoint)
    tree = assemble(format_name=FORMAT, path=path, entries=entries, table=TABLE, config=config,
                    default_activation="gelu", num_heads=num_heads, files=[path], extra_ignored=ignored,
                    rename=unprefixed, family="esm")
    tree.ignored = [check_rotary_buffer(tree, item, checkpoint.tensors) for item in tree.ignored]
    return tree


def _options(path: Path, checkpoint: torch_pickle.TorchCheckpoint) -> dict:
    """fairseq's model options: `cfg["model"]` (what fair-esm reads), else `args`."""
    for options in ((checkpoint.settings.get("cfg") or {}).get("model"), checkpoint.settings.get("args")):
        if isinstance(options, dict) and "encoder_embed_dim" in options:
            return options
    raise bad_input(path, "fair-esm checkpoint whose `cfg.model` / `args` state no encoder_embed_dim: its options "
                          "were not saved as a Namespace or plain dict bertconv reads; pass --config with an ESM "
                          "config.json")


def _refuse_esm1(path: Path, checkpoint: torch_pickle.TorchCheckpoint) -> None:
    arch = next((options.get("arch") for options in checkpoint.settings.values() if isinstance(options, dict)
                 and options.get("arch") in ESM1_ARCHES), None)
    positions = next((name for name in checkpoint.tensors
                      if unprefixed(name).startswith(("embed_positions.", "emb_layer_norm_before."))), None)
    if arch is not None or positions is not None:
        model = ESM1_ARCHES.get(arch, "an ESM-1 line model")
        found = f"arch {arch!r}" if arch is not None else f"tensor {positions!r}"
        raise bad_input(path, f"{found}: {model}, with learned absolute positions (and an embedding LayerNorm), "
                              f"which fair-esm builds as ProteinBertModel, not ESM2; bertconv reads ESM-2 only")


def _refuse_untied_decoder(path: Path, checkpoint: torch_pickle.TorchCheckpoint) -> None:
    """`ESM2` builds its decoder on the token table itself: loading a file whose two copies differ
    keeps whichever comes last in the state dict, so such a file is no single model."""
    names = {unprefixed(name): name for name in checkpoint.tensors}
    table, decoder = names.get("embed_tokens.weight"), names.get("lm_head.weight")
    if table is None or decoder is None or checkpoint.identities.get(table) == checkpoint.identities.get(decoder):
        return
    import numpy as np  # noqa: PLC0415 (only for a file whose decoder is stored apart)

    if not np.array_equal(checkpoint.tensors[table].read(), checkpoint.tensors[decoder].read()):
        raise bad_input(path, f"{decoder!r} differs from {table!r}: fair-esm's ESM2 ties its decoder to the token "
                              f"table, so loading this file keeps whichever of the two its state dict holds last")


def _config_from_options(path: Path, options: dict) -> BertConfig:
    def size(key: str) -> int:
        value = options.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise bad_input(path, f"fair-esm option {key} is {value!r}, expected a positive whole number")
        return value

    token_dropout = options.get("token_dropout")
    if not isinstance(token_dropout, bool):
        raise bad_input(path, f"fair-esm option token_dropout is {token_dropout!r}, expected true or false "
                              f"(fair-esm reads it to build ESM2)")
    width = size("encoder_embed_dim")
    stated = dict(
        model_type="esm", vocab_size=ALPHABET_SIZE, hidden_size=width, num_hidden_layers=size("encoder_layers"),
        num_attention_heads=size("encoder_attention_heads"), intermediate_size=4 * width,
        max_position_embeddings=MAX_POSITIONS, layer_norm_eps=LAYER_NORM_EPS, position_embedding_type="rotary",
        token_dropout=token_dropout, mask_token_id=MASK_ID, pad_token_id=PAD_ID, emb_layer_norm_before=False,
    )
    try:
        config = config_from_dict(stated, gelu_means="gelu", family="esm")
    except (KeyError, ValueError) as exc:
        raise bad_input(path, f"fair-esm options {json.dumps({k: options.get(k) for k in READ_OPTIONS})}: {exc}") \
            from None
    from_options = {"hidden_size", "num_hidden_layers", "num_attention_heads", "token_dropout"}
    provenance = {key: "file" if key in from_options else "format" for key in config.provenance}
    return replace(config, provenance=provenance, source=path)
