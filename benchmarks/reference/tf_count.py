"""Reference for `bertconv audit` on a TF checkpoint: TensorFlow's reader lists the shapes
(tf.train.load_checkpoint + get_variable_to_shape_map) and the model parameters are counted.

usage: tf_count.py PREFIX
"""
import math
import sys

import tensorflow as tf

import bert_names

reader = tf.train.load_checkpoint(sys.argv[1])
shapes = reader.get_variable_to_shape_map()
print(sum(math.prod(shape) for name, shape in shapes.items() if not bert_names.NOT_PARAMETERS.match(name)))
