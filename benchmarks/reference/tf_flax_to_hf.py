"""Reference for `bertconv convert tf_model.h5|flax_model.msgpack --to hf`: transformers 4.57 (its
oracle environment: transformers 5 reads neither file) loads the TF or Flax file into the PyTorch
class `config.json` names and `save_pretrained` writes model.safetensors.

`from_pretrained(from_tf=True / from_flax=True)` builds the model on torch's meta device and, with
the torch of that environment, saves meta tensors; this does what it does without that step:
build the class from the config, then the same `load_tf2_checkpoint_in_pytorch_model` /
`load_flax_checkpoint_in_pytorch_model` it calls.

usage: tf_flax_to_hf.py MODEL_DIR OUT_DIR
"""
import json
import os
import sys

import transformers
from transformers.modeling_flax_pytorch_utils import load_flax_checkpoint_in_pytorch_model
from transformers.modeling_tf_pytorch_utils import load_tf2_checkpoint_in_pytorch_model

directory, out = sys.argv[1], sys.argv[2]
config = transformers.AutoConfig.from_pretrained(directory)
model = getattr(transformers, json.load(open(os.path.join(directory, "config.json")))["architectures"][0])(config)
if os.path.exists(os.path.join(directory, "tf_model.h5")):
    model = load_tf2_checkpoint_in_pytorch_model(model, os.path.join(directory, "tf_model.h5"))
else:
    model = load_flax_checkpoint_in_pytorch_model(model, os.path.join(directory, "flax_model.msgpack"))
model.save_pretrained(out)
