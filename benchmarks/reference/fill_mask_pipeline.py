"""Reference for `bertconv fill-mask`: transformers' fill-mask pipeline, whole process.

usage: fill_mask_pipeline.py MODEL_DIR TEXT

Prints the top 5 predictions of the text's mask, one a line: token id, token, score (tab-separated).
"""
import sys

from transformers import pipeline

fill = pipeline("fill-mask", model=sys.argv[1], device="cpu")
for prediction in fill(sys.argv[2], top_k=5):
    print(prediction["token"], prediction["token_str"], f"{prediction['score']:.4f}", sep="\t")
