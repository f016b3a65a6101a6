"""Programs that cannot be trained, each the way a user gets it wrong (``tests.trainer.programs.bad:<name>``)."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tests.trainer.programs.models import FEATURES, tabular
from ttj_trainer.program import Program

NOT_A_FUNCTION = 42


def raises(args: dict[str, str]) -> Program:
    raise KeyError(f"no argument 'units' in {sorted(args)}")


def wrong_return(args: dict[str, str]) -> Any:
    return keras.Sequential([keras.layers.Dense(1)])


def _program(model: Any, loss: Any = None) -> Program:
    return Program(
        model=model,
        loss=loss or keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=keras.optimizers.SGD(0.1),
        train_input=tabular,
    )


def no_trainable(args: dict[str, str]) -> Program:
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(3)])
    model.trainable = False
    return _program(model)


def misfit(args: dict[str, str]) -> Program:
    """The model wants images; the data are rows of 12 numbers."""
    return _program(keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Flatten(), keras.layers.Dense(3)]))


def nan_loss(args: dict[str, str]) -> Program:
    """A loss that is finite for the check's step and NaN once training runs (it takes the log of zero)."""
    calls = {"traced": 0}

    def loss(labels: Any, logits: Any) -> Any:
        calls["traced"] += 1
        base = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        scale = 1.0 if calls["traced"] == 1 else float("nan")
        return tf.reduce_mean(base) * scale

    return _program(keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(3)]), loss)


def eval_misfit(args: dict[str, str]) -> Program:
    """Trains fine, but its evaluation set has rows of 5 numbers for a model of 12."""
    program = _program(keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(3)]))
    program.eval_input = lambda ctx: tf.data.Dataset.from_tensor_slices(
        (tf.zeros((8, 5)), tf.zeros((8,), tf.int32))
    ).batch(4)
    return program


def eval_metric_not_a_metric(args: dict[str, str]) -> Program:
    """Names its metric by a string: ttj wants keras.metrics.Metric objects."""
    program = _program(keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(3)]))
    program.eval_input = tabular
    program.metrics = ["accuracy"]
    return program
