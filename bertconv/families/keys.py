"""The config keys every family shares: those BERT's computation reads, and those that never
change what any of the families computes (dropout, bookkeeping, labels, generation settings).

A family adds its own in its declaration (`Family.computes`, `fixed`, `inert`).
"""

from __future__ import annotations

from .family import FAIRSEQ, GOOGLE, HF

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
