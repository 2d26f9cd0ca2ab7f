"""Reference for `bertconv convert HF --to tf`: transformers loads the model, TensorFlow writes a
Google-named TF1 checkpoint (tf.raw_ops.SaveV2, the op a TF1 Saver runs), plus bert_config.json.

usage: hf_to_tf.py MODEL_DIR OUT_DIR
"""
import json
import os
import sys

import numpy as np
import tensorflow as tf
from transformers import BertForPreTraining

import bert_names

source, out = sys.argv[1], sys.argv[2]
model = BertForPreTraining.from_pretrained(source)
tensors = {}
for name, value in model.state_dict().items():
    mapped = bert_names.hf_to_google(name)
    if mapped is None:  # the tied decoder, buffers
        continue
    google, transpose = mapped
    array = value.detach().numpy()
    tensors[google] = np.ascontiguousarray(array.T) if transpose else array
os.makedirs(out)
names = sorted(tensors)
tf.raw_ops.SaveV2(prefix=os.path.join(out, "bert_model.ckpt"), tensor_names=names,
                  shape_and_slices=[""] * len(names), tensors=[tensors[n] for n in names])
config = model.config.to_dict()
with open(os.path.join(out, "bert_config.json"), "w") as f:
    json.dump(bert_names.google_config(config), f, indent=2)
