"""Run as a script in a fresh process: loads an exported model with plain Keras and with plain TensorFlow
(no ttj) and prints both predictions for the batch in an .npy file, as JSON lists. Keras needs the
program's custom layer classes to rebuild the model, so the program's module is imported first (as a
serving process imports the user's code); the SavedModel needs nothing.

``export_probe.py EXPORT_DIR BATCH_NPY MODULE``
"""

from __future__ import annotations

import importlib
import json
import sys

import keras
import numpy as np
import tensorflow as tf

where, batch_path, module = sys.argv[1:]
importlib.import_module(module)
batch = np.load(batch_path)
keras_model = keras.saving.load_model(f"{where}/model.keras")
served = tf.saved_model.load(f"{where}/saved_model")
by_keras = np.asarray(keras_model(batch, training=False))
by_tensorflow = np.asarray(served.serve(tf.constant(batch)))
json.dump({"keras": by_keras.tolist(), "saved_model": by_tensorflow.tolist()}, sys.stdout)
