"""Wide-and-deep click-through model with a 1M-row embedding table, on generated data.

Each example: 8 categorical ids (hashed into one table of ``rows`` rows, default 1,000,000) and 13 dense
features; the click depends on a few ids and the dense features, so the model has something to learn.
The embedding table lives on the parameter servers; each step reads and updates only the rows its batch
touches. ``spec.program.entrypoint: ctr:program``.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

from ttj_trainer.program import InputContext, Program

FIELDS, DENSE = 8, 13


def program(args: dict[str, str]) -> Program:
    rows = int(args.get("rows", "1000000"))
    width = int(args.get("width", "16"))

    ids = keras.Input((FIELDS,), dtype="int64", name="ids")
    dense = keras.Input((DENSE,), name="numeric")
    embedded = keras.layers.Embedding(rows, width, name="table")(ids)
    deep = keras.layers.Concatenate()([keras.layers.Flatten()(embedded), dense])
    deep = keras.layers.Dense(64, activation="relu")(deep)
    deep = keras.layers.Dense(32, activation="relu")(deep)
    wide = keras.layers.Embedding(rows, 1, name="wide")(ids)
    wide = keras.layers.Flatten()(wide)
    logit = keras.layers.Add()([keras.layers.Dense(1)(deep), keras.ops.sum(wide, axis=1, keepdims=True)])
    model = keras.Model({"ids": ids, "numeric": dense}, logit, name="wide_and_deep")

    def train_input(ctx: InputContext) -> Any:
        # Generated: every worker draws its own examples from the same hidden rule (its own seed).
        rng = np.random.default_rng(ctx.seed)
        secret = np.random.default_rng(0).standard_normal(DENSE).astype(np.float32)

        def examples() -> Any:
            while True:
                batch_ids = rng.zipf(1.3, (ctx.per_worker_batch, FIELDS)).astype(np.int64) % rows
                batch_dense = rng.standard_normal((ctx.per_worker_batch, DENSE)).astype(np.float32)
                score = batch_dense @ secret + np.where(batch_ids[:, 0] % 7 == 0, 2.0, -0.5)
                clicks = (score + rng.standard_normal(ctx.per_worker_batch) > 0).astype(np.float32)[:, None]
                yield {"ids": batch_ids, "numeric": batch_dense}, clicks

        signature = (
            {"ids": tf.TensorSpec((None, FIELDS), tf.int64), "numeric": tf.TensorSpec((None, DENSE), tf.float32)},
            tf.TensorSpec((None, 1), tf.float32),
        )
        return tf.data.Dataset.from_generator(examples, output_signature=signature)

    return Program(
        model=model,
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
        optimizer=keras.optimizers.Adagrad(float(args.get("learning_rate", "0.05"))),
        train_input=train_input,
    )
