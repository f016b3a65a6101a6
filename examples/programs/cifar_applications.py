"""A ``keras.applications`` network (ResNet50V2 by default, weights=None) on CIFAR-10.

Worker ``slot`` of ``slot_count`` reads every ``slot_count``-th image from a shuffled copy (its own seed),
repeating: a refilled slot starts its share again. ``spec.program.entrypoint: cifar_applications:program``;
``args.network`` names any ``keras.applications`` constructor taking ``input_shape`` and ``classes``.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from ttj_trainer.program import InputContext, Program


def program(args: dict[str, str]) -> Program:
    constructor = getattr(keras.applications, args.get("network", "ResNet50V2"))
    model = constructor(weights=None, input_shape=(32, 32, 3), classes=10, classifier_activation=None)
    lr = keras.optimizers.schedules.CosineDecay(
        float(args.get("learning_rate", "0.1")), int(args.get("steps", "20000"))
    )

    def train_input(ctx: InputContext) -> Any:
        (images, labels), _ = keras.datasets.cifar10.load_data()
        dataset = tf.data.Dataset.from_tensor_slices((images, labels[:, 0]))
        dataset = dataset.shard(ctx.slot_count, ctx.slot).shuffle(10_000, seed=ctx.seed).repeat()
        return dataset.map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, y)).batch(ctx.per_worker_batch)

    def eval_input(ctx: InputContext) -> Any:
        _, (images, labels) = keras.datasets.cifar10.load_data()
        dataset = tf.data.Dataset.from_tensor_slices((images, labels[:, 0]))
        return dataset.map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, y)).batch(ctx.per_worker_batch)

    return Program(
        model=model,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=keras.optimizers.SGD(lr, momentum=0.9, nesterov=True),
        train_input=train_input,
        eval_input=eval_input,
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
    )
