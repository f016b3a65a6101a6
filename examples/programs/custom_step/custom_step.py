"""A custom training step: a two-headed regression whose loss ``compile`` cannot express.

The model predicts a mean and a log-variance; the loss is the Gaussian negative log-likelihood plus a
penalty that keeps the variance head calibrated, and gradients are clipped by their global norm before
``optimizer.apply`` (which ttj runs beside the variables on the parameter servers and which advances the
global step: call it exactly once per step). ``spec.program.entrypoint: custom_step:program``.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

from ttj_trainer.program import InputContext, Program

FEATURES = 10


def program(args: dict[str, str]) -> Program:
    inputs = keras.Input((FEATURES,))
    hidden = keras.layers.Dense(64, activation="relu")(inputs)
    hidden = keras.layers.Dropout(0.1)(hidden)
    outputs = keras.layers.Dense(2)(hidden)  # mean, log-variance
    model = keras.Model(inputs, outputs)
    clip = float(args.get("clip_norm", "1.0"))

    def gaussian_nll(labels: Any, outputs: Any) -> Any:
        mean, log_variance = outputs[:, 0], outputs[:, 1]
        return tf.reduce_mean(0.5 * (log_variance + tf.square(labels - mean) / tf.exp(log_variance)))

    def train_step(model: Any, optimizer: Any, features: Any, labels: Any) -> Any:
        with tf.GradientTape() as tape:
            outputs = model(features, training=True)
            loss = gaussian_nll(labels, outputs) + 1e-3 * tf.reduce_mean(tf.square(outputs[:, 1]))
        gradients = tape.gradient(loss, model.trainable_variables)
        gradients, _ = tf.clip_by_global_norm(gradients, clip)
        optimizer.apply(gradients, model.trainable_variables)
        return loss

    def train_input(ctx: InputContext) -> Any:
        rng = np.random.default_rng(ctx.seed)
        weights = np.random.default_rng(0).standard_normal(FEATURES).astype(np.float32)
        features = rng.standard_normal((ctx.per_worker_batch * 256, FEATURES)).astype(np.float32)
        noise = rng.standard_normal(len(features)).astype(np.float32) * (0.1 + np.abs(features[:, 0]))
        labels = features @ weights + noise
        return tf.data.Dataset.from_tensor_slices((features, labels)).repeat().batch(ctx.per_worker_batch)

    return Program(
        model=model,
        loss=gaussian_nll,
        optimizer=keras.optimizers.Adam(float(args.get("learning_rate", "0.003"))),
        train_input=train_input,
        train_step=train_step,
    )
