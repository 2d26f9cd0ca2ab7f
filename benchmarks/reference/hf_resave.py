"""Reference for `bertconv convert --to hf`: transformers from_pretrained + save_pretrained.

usage: hf_resave.py MODEL_DIR OUT_DIR
"""
import sys

from transformers import BertForPreTraining

BertForPreTraining.from_pretrained(sys.argv[1]).save_pretrained(sys.argv[2])
