"""Run as a script in a fresh process, as a serving process would: loads exported models with plain Keras and
with plain TensorFlow (neither ttj nor the programs' modules are imported: the examples have no custom
layers) and prints, for each, both predictions for the features in its .npz file, as one JSON list. One
array named ``features`` is the model's single input; other names are the inputs of a model taking a dict.

``export_probe.py EXPORT_DIR FEATURES_NPZ [EXPORT_DIR FEATURES_NPZ ...]``
"""

from __future__ import annotations

import json
import sys
from typing import Any

import keras
import numpy as np
import tensorflow as tf


def predictions(where: str, features_path: str) -> dict[str, Any]:
    with np.load(features_path) as saved:
        arrays = {name: saved[name] for name in saved.files}
    features = arrays["features"] if list(arrays) == ["features"] else arrays
    by_keras = keras.saving.load_model(f"{where}/model.keras")(features, training=False)
    served = tf.saved_model.load(f"{where}/saved_model")  # held: its variables live as long as it does
    by_tensorflow = served.serve(tf.nest.map_structure(tf.constant, features))
    return {"keras": np.asarray(by_keras).tolist(), "saved_model": np.asarray(by_tensorflow).tolist()}


pairs = sys.argv[1:]
json.dump([predictions(where, features) for where, features in zip(pairs[::2], pairs[1::2], strict=True)], sys.stdout)
