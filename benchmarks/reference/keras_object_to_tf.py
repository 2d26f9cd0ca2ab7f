"""Reference for issue 10 (`bertconv convert bert_model.ckpt out/ --to tf` on a bert4keras
pre-training checkpoint): the TensorFlow-based workaround. Rebuild bert4keras' model, restore the
object-based checkpoint into it with tf-keras (`load_weights(...).expect_partial()`, optimizer
state skipped), then write Google names through bert4keras' variable_mapping() with
tf.raw_ops.SaveV2 (bert4keras' own save_weights_as_checkpoint needs a TF1 graph session that
TensorFlow 2 no longer gives without patches).

The train_model's loss layers have no weights, so restoring into the bare BERT with MLM head
matches the object graph of the layers that do.

usage: keras_object_to_tf.py PREFIX BERT_CONFIG OUT_DIR   (needs TF_KERAS=1 TF_USE_LEGACY_KERAS=1)
"""
import os
import shutil
import sys

import numpy as np
import tensorflow as tf
from bert4keras.backend import K
from bert4keras.models import build_transformer_model

prefix, config_path, out = sys.argv[1:4]
bert = build_transformer_model(config_path, with_mlm="linear", return_keras_model=False)
bert.model.load_weights(prefix).expect_partial()
tensors = {}
for layer_name, google_names in bert.variable_mapping().items():
    if layer_name not in bert.layers:
        continue
    values = K.batch_get_value(bert.layers[layer_name].trainable_weights)
    for google, value in zip(google_names, values):
        if google == "cls/seq_relationship/output_weights":
            value = value.T
        tensors[google] = np.ascontiguousarray(value)
os.makedirs(out)
names = sorted(tensors)
tf.raw_ops.SaveV2(prefix=os.path.join(out, "bert_model.ckpt"), tensor_names=names,
                  shape_and_slices=[""] * len(names), tensors=[tensors[n] for n in names])
shutil.copyfile(config_path, os.path.join(out, "bert_config.json"))
