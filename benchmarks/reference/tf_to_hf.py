"""Reference for `bertconv convert TF --to hf`: TensorFlow reads every tensor
(tf.train.load_checkpoint + get_tensor), the safetensors library writes model.safetensors.

usage: tf_to_hf.py PREFIX OUT_DIR
"""
import json
import os
import sys

import numpy as np
import tensorflow as tf
from safetensors.numpy import save_file

import bert_names

prefix, out = sys.argv[1], sys.argv[2]
reader = tf.train.load_checkpoint(prefix)
tensors = {}
for name in reader.get_variable_to_shape_map():
    if bert_names.NOT_PARAMETERS.match(name):
        continue
    hf, transpose = bert_names.google_to_hf(name)
    array = reader.get_tensor(name)
    tensors[hf] = np.ascontiguousarray(array.T) if transpose else array
os.makedirs(out)
save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
with open(os.path.join(os.path.dirname(prefix), "bert_config.json")) as f:
    config = json.load(f)
with open(os.path.join(out, "config.json"), "w") as f:
    json.dump(bert_names.hf_config(config), f, indent=2)
