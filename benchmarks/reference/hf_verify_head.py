"""Reference for plain `bertconv verify`: what a user does with transformers to learn whether a
checkpoint carries its MLM head, trained and tied. Load it for masked LM with the loading info
(a head transformers had to initialize is among the missing keys), compare the decoder with the
word embeddings, and look for the initializer's values in the head (LayerNorm gamma 1, beta 0,
output bias 0).

usage: hf_verify_head.py MODEL_DIR
"""
import sys

import torch
from transformers import BertForMaskedLM

model, info = BertForMaskedLM.from_pretrained(sys.argv[1], output_loading_info=True)
head = model.cls.predictions
missing = [key for key in info["missing_keys"] if key.startswith("cls.predictions")]
decoder, table = head.decoder.weight, model.bert.embeddings.word_embeddings.weight
tied = decoder.data_ptr() == table.data_ptr() or torch.equal(decoder, table)
initial = bool(torch.all(head.transform.LayerNorm.weight == 1) and torch.all(head.transform.LayerNorm.bias == 0)
               and torch.all(head.bias == 0))
print(f"MLM head missing: {missing or 'none'}; tied: {tied}; initializer values: {initial}")
sys.exit(1 if missing or not tied or initial else 0)
