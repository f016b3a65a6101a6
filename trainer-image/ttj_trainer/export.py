"""The final model, for serving: written by the chief beside the checkpoints when the job succeeds.

``<checkpoint location>/export/step-<N>/model.keras`` (``keras.saving.load_model``) and
``<checkpoint location>/export/step-<N>/saved_model`` (``tf.saved_model.load``; its ``serve`` signature)
hold the values of the final checkpoint (global step N) in the program's own model.
"""

from __future__ import annotations

from typing import Any

import numpy as np

EXPORT_DIR = "export"
KERAS_FILE = "model.keras"
SAVED_MODEL_DIR = "saved_model"


def location(checkpoint_uri: str, step: int) -> str:
    return f"{checkpoint_uri.rstrip('/')}/{EXPORT_DIR}/step-{step}"


def export(store: Any, values: dict[str, np.ndarray], checkpoint_uri: str, step: int) -> dict[str, str]:
    """Gives the model its final values as local variables (it no longer trains) and writes both forms."""
    import tensorflow as tf

    where = location(checkpoint_uri, step)
    tf.io.gfile.makedirs(where)
    store.detach(values)
    model = store.model
    keras_path = f"{where}/{KERAS_FILE}"
    model.save(keras_path)
    saved_model = f"{where}/{SAVED_MODEL_DIR}"
    model.export(saved_model, verbose=False)
    return {"keras": keras_path, "saved_model": saved_model}
