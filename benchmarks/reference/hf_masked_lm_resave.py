"""Reference for `bertconv convert --to hf` of any family transformers has: its masked-LM class
(`AutoModelForMaskedLM`) from_pretrained + save_pretrained.

usage: hf_masked_lm_resave.py MODEL_DIR OUT_DIR
"""
import sys

from transformers import AutoModelForMaskedLM

AutoModelForMaskedLM.from_pretrained(sys.argv[1]).save_pretrained(sys.argv[2])
