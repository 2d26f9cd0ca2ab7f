"""Reference for `bertconv convert model.h5 --to hf`: bert4keras builds the model
(build_transformer_model), loads the h5 (load_weights), and the weights are exported through its
own variable_mapping() to Google names, then to Hugging Face names, written with safetensors.

usage: b4k_to_hf.py MODEL_H5 BERT_CONFIG OUT_DIR   (needs TF_KERAS=1 TF_USE_LEGACY_KERAS=1)
"""
import json
import os
import sys

import numpy as np
from bert4keras.backend import K
from bert4keras.models import build_transformer_model
from safetensors.numpy import save_file

import bert_names

h5, config_path, out = sys.argv[1:4]
bert = build_transformer_model(config_path, with_pool=True, with_nsp=True, with_mlm=True, return_keras_model=False)
bert.model.load_weights(h5)
tensors = {}
for layer_name, google_names in bert.variable_mapping().items():
    if layer_name not in bert.layers:
        continue
    values = K.batch_get_value(bert.layers[layer_name].trainable_weights)
    for google, value in zip(google_names, values):
        if google == "cls/seq_relationship/output_weights":  # Keras NSP-Proba kernel is [H, 2]
            value = value.T
        hf, transpose = bert_names.google_to_hf(google)
        tensors[hf] = np.ascontiguousarray(value.T if transpose else value)
os.makedirs(out)
save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
with open(config_path) as f:
    config = json.load(f)
with open(os.path.join(out, "config.json"), "w") as f:
    json.dump(bert_names.hf_config(config), f, indent=2)
