"""Reference for `bertconv audit`: transformers loads the checkpoint and counts its parameters.

usage: hf_load_count.py MODEL_DIR
"""
import sys

from transformers import BertForPreTraining

model = BertForPreTraining.from_pretrained(sys.argv[1])
print(model.num_parameters())
