"""What a model family is, as data: the declaration each module of this package makes.

The generic code (config readers and writers, the tree's roles, the closed form, the runtimes,
the checks) reads these fields; it never asks which family a model is by name. A family states:

- its config keys, per dialect: the keys its computation reads (`computes`), the keys its
  library knows that bertconv computes only at one value (`fixed`: a Google ALBERT's
  `net_structure_type` 0), and the keys that never change what it computes (`inert`);
- how it differs from BERT's computation: the embedding projection, shared layers, where its
  positions start, which position schemes it has and how it adds their terms (a decoder, with
  causal attention, is a family that reads `is_decoder`);
- its heads (as `config.Heads` names them), how its files' names mark it, and how its name is
  written in messages;
- where its configs name BERT's keys otherwise (DistilBERT's `dim` is BERT's `hidden_size`), and
  which of BERT's keys its library does not read at all (DistilBERT's `layer_norm_eps`: fixed
  at 1e-12 in its code).

A config key outside a family's declared and inert keys (in the dialect it was read in), or a
`fixed` key at another value, is *unread*: bertconv would compute without it, so every command
that computes or converts refuses it (exit 2, naming it) unless the user accepts the loss.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

from ..records import field, record

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from typing import Any

#: The dialects a config is read in: transformers' `config.json`, google-research's
#: `bert_config.json` (bert4keras reads that too, its "gelu" meaning erf), fairseq's options.
HF, GOOGLE, FAIRSEQ = "hf", "google", "fairseq"
DIALECTS = (HF, GOOGLE, FAIRSEQ)


class Projection(Enum):
    """Whether the embeddings are summed at E and projected E -> H."""

    #: Never: E = H (BERT, RoBERTa).
    NONE = "none"
    #: Always, even when E = H (ALBERT's `embedding_hidden_mapping_in`).
    ALWAYS = "always"
    #: Only when E differs from H (ELECTRA's `embeddings_project`).
    WHEN_NARROWER = "when-narrower"


@record
class Variant:
    """A member of a family whose computation differs from the family's own code, so that writers
    name it apart (brightmart's albert_zh: word vectors projected alone). `flag` is the
    `BertConfig` field, true for the variant; `stated` the keys its configs are written with."""

    name: str
    display: str
    flag: str
    stated: dict[str, Any] = field(default_factory=dict)


# Not compared by value: a family is its declaration (`FAMILIES` holds one object each), and
# its dict fields would make a value hash raise. Without `__eq__` and `__hash__` to compile,
# importing it (every command does) costs less.
@record(eq=False)
class Family:
    """One model family, declared.

    Attributes:
      model_type: transformers' `model_type` ("bert"), the family's name in the tree and reports.
      display: how messages write it ("BERT").
      heads: the heads its models may carry (`config.Heads` names), base model first.
      projection: whether its embeddings are projected E -> H (see `Projection`).
      states_embedding_size: whether configs written for it always state `embedding_size`
        (transformers' ALBERT and ELECTRA configs default it to 128, not to H).
      shares_layers: ALBERT's `num_hidden_groups` x `inner_group_num` stored layers, applied L times.
      position_offset_key: the config key whose value + 1 is the first position row (RoBERTa's
        `pad_token_id`: positions are counted past the padding index), and its default.
      position_embedding_types: the `position_embedding_type` values its computation has.
      relative_terms_scaled: whether relative-position terms join q k^T before the 1 / sqrt(D)
        scaling (transformers 4's BERT, ELECTRA, RoBERTa), or are added unscaled after the scaling
        and the mask (its `AlbertAttention`).
      hf_default_activation: the activation a transformers config of the family means when it
        states none (its `hidden_act` default).
      computes: per dialect, the config keys its computation reads beyond `keys.BASE_COMPUTES`.
      fixed: per dialect, keys its library reads that bertconv computes at one value only, with
        that value.
      inert: per dialect, keys of its library that never change what it computes, beyond
        `keys.INERT`.
      stated: keys and values written into every transformers config of the family (RoBERTa's
        `bos_token_id` 0 and `eos_token_id` 2, fairseq's dictionary).
      hf_marks: dotted name parts ("." + name) only this family's Hugging Face files hold.
      variants: members that compute otherwise than the family's own code.
      shapes_give_layer_count: whether a checkpoint's shapes give the applied layer count (an
        ALBERT's stored layers are applied a number of times only its config says).
      token_types: whether its models have token types at all; without (DistilBERT), its library
        never looks them up and its configs state no `type_vocab_size` (read as 0).
      key_names: per dialect, the family's own name for a key of `keys.BASE_COMPUTES` (its
        configs' `dim` for BERT's `hidden_size`): read and written under that name.
      lacks: per dialect, keys of `keys.BASE_COMPUTES` its library never reads (its code fixes
        what they would say): stated in a config, they are unread.
      tokenizer_class: transformers' tokenizer class for the family's own vocabulary file, where
        the file alone does not say how ids are laid out (XLM-R's and CamemBERT's
        `sentencepiece.bpe.model`, in two different fairseq dictionary orders).
      pre_layer_norm: whether each layer normalizes before its sublayers, x + f(LN(x)) (Megatron-BERT,
        ESM), instead of after the residual sum, LN(x + f(x)) (BERT).
      final_layer_norm: whether a LayerNorm follows the last layer (`final_norm`: Megatron's
        `encoder.ln`, ESM's `emb_layer_norm_after`).
      embedding_layer_norm: whether the summed embeddings are normalized (`embeddings.norm`), and
        the config key that says so when a model of the family may go either way (ESM's
        `emb_layer_norm_before`).
      vocab_pad_multiple: the multiple its released checkpoints pad the word embeddings' rows to,
        past the tokenizer's vocabulary (Megatron-LM's `make_vocab_size_divisible_by`, 128, times
        the tensor-parallel size); None when its rows are its vocabulary.
      shares_hf_marks_with: families whose marks its Hugging Face files hold too (a Megatron-BERT
        is under `bert.` and `cls.`): its own marks decide when both are found.
      fused_qkv: whether its files store queries, keys and values as one matrix (ModernBERT's `Wqkv`).
      gated_ffn: whether its feed-forward is gated (GLU: ModernBERT's GeGLU `mlp.Wi`, H -> 2I).
      first_attention_norm: whether its first layer normalizes before attention (ModernBERT's
        layer 0 has no `attn_norm`).
      bias_keys: per config key saying whether a group of its parameters has biases, the
        `BertConfig` field it sets and the value its library defaults it to (ModernBERT's
        `norm_bias`, `attention_bias`, `mlp_bias`, `classifier_bias`, `decoder_bias`).
      mlm_activation_key: the config key of its MLM head's own activation, where the head has one
        (ModernBERT's `classifier_activation`), and its default.
      layer_norm_eps: the LayerNorm epsilon its library defaults to, where not BERT's 1e-12
        (ModernBERT's `norm_eps`, 1e-5).
      tokenizer_unsupported: why bertconv cannot split text as the family's transformers tokenizer
        does (RoFormer's jieba word segmentation), or None: fill-mask refuses its models, naming it.
      computes_as_bert: whether its computation is BERT's under other names, without token types
        and pooler (DistilBERT): a target that builds BERT and not it writes it as that BERT
        (conversion.py).
      holds_no_token_types: whether its library holds a model without token types as it is (no
        table, nothing added: DeBERTa-v2's `type_vocab_size` 0), so that a writer need not add
        the all-zero row its library would otherwise look up.
      config_fields: reads the family's own keys of a transformers config dictionary into
        `BertConfig` fields (DeBERTa's disentangled attention), after the generic reader; raises
        ValueError naming a key it refuses.
      config_keys: the inverse, a `BertConfig`'s fields as those keys (for the configs bertconv writes).
      fields: `BertConfig` fields its computation fixes, whatever a config says (RoFormer-v2's
        bias-free layers, unscaled RMS norms and transform-free MLM head).
      uncomputed: fields of `config.COMPUTATION_FIELDS` its libraries never compute with
        (RoFormer-v2's `max_position_embeddings`: bert4keras and keras-hub rotate at any position):
        a conversion may change them and `diff` does not count them.
    """

    model_type: str
    display: str
    heads: tuple[str, ...]
    projection: Projection = Projection.NONE
    states_embedding_size: bool = False
    shares_layers: bool = False
    position_offset_key: tuple[str, int] | None = None
    position_embedding_types: tuple[str, ...] = ("absolute",)
    relative_terms_scaled: bool = True
    hf_default_activation: str = "gelu"
    computes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    fixed: dict[str, dict[str, Any]] = field(default_factory=dict)
    inert: dict[str, tuple[str, ...]] = field(default_factory=dict)
    stated: dict[str, Any] = field(default_factory=dict)
    hf_marks: tuple[str, ...] = ()
    variants: tuple[Variant, ...] = ()
    shapes_give_layer_count: bool = True
    token_types: bool = True
    key_names: dict[str, dict[str, str]] = field(default_factory=dict)
    lacks: dict[str, tuple[str, ...]] = field(default_factory=dict)
    tokenizer_class: str | None = None
    pre_layer_norm: bool = False
    final_layer_norm: bool = False
    embedding_layer_norm: bool | str = True
    vocab_pad_multiple: int | None = None
    shares_hf_marks_with: tuple[str, ...] = ()
    fused_qkv: bool = False
    gated_ffn: bool = False
    first_attention_norm: bool = True
    bias_keys: dict[str, tuple[str, bool]] = field(default_factory=dict)
    mlm_activation_key: tuple[str, str] | None = None
    layer_norm_eps: float | None = None
    tokenizer_unsupported: str | None = None
    computes_as_bert: bool = False
    holds_no_token_types: bool = False
    config_fields: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    config_keys: Callable[[Any], dict[str, Any]] | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    uncomputed: tuple[str, ...] = ()

    def projects(self, embedding_size: int, hidden_size: int) -> bool:
        """Whether a model of this family with E = `embedding_size` projects its embeddings to H."""
        if self.projection is Projection.ALWAYS:
            return True
        return self.projection is Projection.WHEN_NARROWER and embedding_size != hidden_size

    def layer_norms(self, embedding_stated: bool | None = None) -> dict[str, bool]:
        """The `BertConfig` fields saying where its LayerNorms are; `embedding_stated` is what a
        config (or the tensors present) says of the embeddings' where the family leaves it open."""
        embedding = self.embedding_layer_norm
        if isinstance(embedding, str):
            embedding = bool(embedding_stated)
        return {"pre_layer_norm": self.pre_layer_norm, "final_layer_norm": self.final_layer_norm,
                "embedding_layer_norm": embedding}


# The config keys every family shares: those BERT's computation reads, and those that never
# change what any of the families computes (dropout, bookkeeping, labels, generation settings).
# A family adds its own in its declaration (`Family.computes`, `fixed`, `inert`).

#: The sizes every config states (`vocab_size` ... `max_position_embeddings`).
REQUIRED = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
            "intermediate_size", "max_position_embeddings")
#: Written into Google-style configs beside `hidden_act`, whose "gelu" means tanh to Google's
#: code and erf to bert4keras: it records which one the weights were trained with.
EXACT_ACTIVATION_KEY = "bertconv_hidden_act"

#: Keys whose values BERT's computation reads, in each dialect. Google's `bert_config.json` as
#: bertconv writes it adds the exact activation, the LayerNorm epsilon (its code hard-codes
#: 1e-12; bertconv states another one where a model was trained with it), the model type of the
#: other families and bert4keras' condition size.
#: A config naming its model type reads as transformers' dialect, so the Google-style configs
#: bertconv writes for the other families count there too: both carry bertconv's own keys.
_BERTCONV = (EXACT_ACTIVATION_KEY, "conditional_size")
BASE_COMPUTES = {
    HF: (*REQUIRED, "type_vocab_size", "hidden_act", "layer_norm_eps", "tie_word_embeddings", "model_type",
         *_BERTCONV),
    GOOGLE: (*REQUIRED, "type_vocab_size", "hidden_act", "layer_norm_eps", "tie_word_embeddings", "model_type",
             *_BERTCONV),
    FAIRSEQ: (),
}

#: Keys transformers' `PretrainedConfig` knows for every model that a masked LM computes with
#: only at their defaults: pruned heads change the attention's shapes, an encoder-decoder is
#: another model. transformers 2 and 3 saved configs without `model_type`, which read as
#: Google's dialect: these keys count there too.
_PRETRAINED_CONFIG_FIXED = {"pruned_heads": {}, "is_encoder_decoder": False}
BASE_FIXED = {HF: _PRETRAINED_CONFIG_FIXED, GOOGLE: _PRETRAINED_CONFIG_FIXED}

_DROPOUT = ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout", "dropout",
            "attention_dropout", "activation_dropout")
#: transformers' bookkeeping: what saved the file, how to load it, labels of task heads, outputs
#: asked of a forward pass, token ids (the tokenizer's; BERT's `pad_token_id` marks only which
#: embedding row gets no gradient), and generation settings, which a masked LM never reads.
_TRANSFORMERS = (
    "architectures", "transformers_version", "dtype", "torch_dtype", "use_bfloat16", "_name_or_path",
    "_commit_hash", "_attn_implementation", "_attn_implementation_autoset", "attn_implementation",
    "initializer_range", "id2label", "label2id", "num_labels", "_num_labels", "problem_type",
    "finetuning_task", "tokenizer_class", "prefix", "task_specific_params", "use_cache", "output_past",
    "output_hidden_states", "output_attentions", "return_dict", "torchscript", "gradient_checkpointing",
    "chunk_size_feed_forward", "tf_legacy_loss", "tie_encoder_decoder", "cross_attention_hidden_size",
    "pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id", "cls_token_id", "unk_token_id",
    "mask_token_id", "decoder_start_token_id", "eos_token_ids",
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
    "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
    "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
    "suppress_tokens", "begin_suppress_tokens",
)
#: google-research/bert's `bert_config.json` keys its modeling.py never reads (Google's Chinese
#: models state the pooler keys and `directionality`); configs converted to transformers' keep them.
_GOOGLE = ("initializer_range", "directionality", "pooler_fc_size", "pooler_num_attention_heads",
           "pooler_num_fc_layers", "pooler_size_per_head", "pooler_type")

#: Keys that never change what a family computes, in each dialect.
INERT = {
    HF: (*_DROPOUT, *_GOOGLE, *_TRANSFORMERS),
    GOOGLE: (*_DROPOUT, *_GOOGLE, *_TRANSFORMERS),
    FAIRSEQ: (),
}
