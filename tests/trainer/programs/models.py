"""Programs for the trainer's tests (entrypoints ``tests.trainer.programs.models:<name>``)."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

from ttj_trainer.program import InputContext, Program

FEATURES = 12
CLASSES = 3


def _optimizer(name: str) -> Any:
    if name == "sgd":
        return keras.optimizers.SGD(0.05, momentum=0.9, nesterov=True)
    if name == "adam":
        return keras.optimizers.Adam(keras.optimizers.schedules.ExponentialDecay(0.01, 4, 0.8))
    if name == "adagrad":
        return keras.optimizers.Adagrad(0.05)
    raise ValueError(f"unknown optimizer {name!r}")


def tabular(ctx: InputContext) -> tf.data.Dataset:
    """Learnable, deterministic batches: the class is the argmax of three fixed projections."""
    rng = np.random.default_rng(ctx.seed)
    features = rng.standard_normal((ctx.per_worker_batch * 64, FEATURES)).astype(np.float32)
    projection = np.random.default_rng(7).standard_normal((FEATURES, CLASSES)).astype(np.float32)
    labels = np.argmax(features @ projection, axis=1).astype(np.int32)
    return tf.data.Dataset.from_tensor_slices((features, labels)).batch(ctx.per_worker_batch).repeat()


@keras.saving.register_keras_serializable(package="ttj_tests")
class Scale(keras.layers.Layer):  # type: ignore[misc]
    """A custom layer with a weight of its own (registered, so a saved model can be loaded back)."""

    def build(self, input_shape: Any) -> None:
        self.factor = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="factor")

    def call(self, inputs: Any) -> Any:
        return inputs * self.factor


def mlp(args: dict[str, str]) -> Program:
    """Functional model: Dense, BatchNormalization, Dropout, a custom layer; the optimizer from args."""
    inputs = keras.Input((FEATURES,))
    x = keras.layers.Dense(32, activation="relu", kernel_regularizer=keras.regularizers.L2(1e-4))(inputs)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.Dropout(0.2, seed=3)(x)
    x = Scale()(x)
    outputs = keras.layers.Dense(CLASSES)(x)
    return Program(
        model=keras.Model(inputs, outputs),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=_optimizer(args.get("optimizer", "sgd")),
        train_input=tabular,
    )


class Wide(keras.Model):
    """Subclassed: a large embedding table looked up by id plus a dense tower."""

    def __init__(self, rows: int, width: int) -> None:
        super().__init__()
        self.table = keras.layers.Embedding(rows, width)
        self.dense = keras.layers.Dense(1)

    def call(self, inputs: Any, training: bool = False) -> Any:
        ids, dense = inputs
        pooled = keras.ops.mean(self.table(ids), axis=1)
        return self.dense(keras.ops.concatenate([pooled, dense], axis=1))


def embedding(args: dict[str, str]) -> Program:
    rows, width, touched = int(args.get("rows", "1000000")), int(args.get("width", "8")), int(args.get("ids", "4"))

    def train_input(ctx: InputContext) -> tf.data.Dataset:
        rng = np.random.default_rng(ctx.seed)
        n = ctx.per_worker_batch * 16
        ids = rng.integers(0, rows, (n, touched)).astype(np.int64)
        dense = rng.standard_normal((n, 4)).astype(np.float32)
        labels = (dense[:, :1] > 0).astype(np.float32)
        return tf.data.Dataset.from_tensor_slices(((ids, dense), labels)).batch(ctx.per_worker_batch).repeat()

    return Program(
        model=Wide(rows, width),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
        optimizer=_optimizer(args.get("optimizer", "sgd")),
        train_input=train_input,
    )


EVAL_STEPS = 4


def evaluation_set(ctx: InputContext) -> tf.data.Dataset:
    """Six batches (finite) of held-out examples from the same distribution as ``tabular``'s."""
    rng = np.random.default_rng(10_000 + ctx.seed)
    features = rng.standard_normal((ctx.per_worker_batch * 6, FEATURES)).astype(np.float32)
    projection = np.random.default_rng(7).standard_normal((FEATURES, CLASSES)).astype(np.float32)
    labels = np.argmax(features @ projection, axis=1).astype(np.int32)
    return tf.data.Dataset.from_tensor_slices((features, labels)).batch(ctx.per_worker_batch)


def mlp_with_evaluation(args: dict[str, str]) -> Program:
    """``mlp`` with an evaluation set, two Keras metrics, and at most EVAL_STEPS batches per evaluation."""
    program = mlp(args)
    program.eval_input = evaluation_set
    program.metrics = [
        keras.metrics.SparseCategoricalAccuracy(name="accuracy"),
        keras.metrics.SparseCategoricalCrossentropy(from_logits=True, name="crossentropy"),
    ]
    program.eval_steps = EVAL_STEPS
    return program


LINEAR_RATE = 0.05


def linear_targets(features: np.ndarray) -> np.ndarray:
    return features @ np.linspace(-1.0, 1.0, FEATURES, dtype=np.float32) + 0.5


def linear(args: dict[str, str]) -> Program:
    """Least squares with plain SGD from zero weights: each update is a closed form, so a test can follow
    the weights a worker computes on step by step."""

    def train_input(ctx: InputContext) -> tf.data.Dataset:
        rng = np.random.default_rng(ctx.seed)
        features = rng.standard_normal((ctx.per_worker_batch * 64, FEATURES)).astype(np.float32)
        targets = linear_targets(features).astype(np.float32)
        return tf.data.Dataset.from_tensor_slices((features, targets)).batch(ctx.per_worker_batch).repeat()

    return Program(
        model=keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(1, kernel_initializer="zeros")]),
        loss=lambda labels, predictions: tf.reduce_mean(tf.square(predictions[:, 0] - labels)),
        optimizer=keras.optimizers.SGD(LINEAR_RATE),
        train_input=train_input,
    )
