"""A ``keras.applications`` network (ResNet50V2 by default, weights=None) on CIFAR-10.

Worker ``slot`` of ``slot_count`` reads every ``slot_count``-th image from a shuffled copy (its own seed),
repeating: a refilled slot starts its share again. ``spec.program.entrypoint: cifar_applications:program``.

Arguments (``spec.program.args``, all strings):

- ``network``: any ``keras.applications`` constructor taking ``input_shape`` and ``classes`` (``ResNet50V2``);
- ``alpha``: the width multiplier of the MobileNet networks (only passed when given);
- ``learning_rate`` (``0.1``) and ``steps`` (``20000``, the cosine decay's length: the job's ``trainSteps``);
- ``data``: ``keras`` (CIFAR-10 from ``keras.datasets``: downloaded into ``~/.keras/datasets`` unless there)
  or ``synthetic`` (CIFAR-shaped images that can be learnt: one fixed pattern per class plus noise, for a
  try-out without the download).
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

from ttj_trainer.program import InputContext, Program

SHAPE, CLASSES = (32, 32, 3), 10


def program(args: dict[str, str]) -> Program:
    constructor = getattr(keras.applications, args.get("network", "ResNet50V2"))
    width = {"alpha": float(args["alpha"])} if "alpha" in args else {}
    model = constructor(weights=None, input_shape=SHAPE, classes=CLASSES, classifier_activation=None, **width)
    lr = keras.optimizers.schedules.CosineDecay(
        float(args.get("learning_rate", "0.1")), int(args.get("steps", "20000"))
    )
    data = args.get("data", "keras")
    if data not in ("keras", "synthetic"):
        raise ValueError(f"data must be 'keras' or 'synthetic', not {data!r}")

    def images(train: bool, seed: int) -> tuple[np.ndarray, np.ndarray]:
        if data == "keras":
            train_set, test_set = keras.datasets.cifar10.load_data()
            x, y = train_set if train else test_set
            return x.astype(np.float32) / 255.0, y[:, 0].astype(np.int32)
        patterns = np.random.default_rng(0).uniform(0.0, 1.0, (CLASSES, *SHAPE)).astype(np.float32)
        rng = np.random.default_rng(seed)
        labels = rng.integers(0, CLASSES, 2048 if train else 512).astype(np.int32)
        noise = rng.normal(0.0, 0.25, (len(labels), *SHAPE)).astype(np.float32)
        return np.clip(patterns[labels] + noise, 0.0, 1.0), labels

    def train_input(ctx: InputContext) -> Any:
        dataset = tf.data.Dataset.from_tensor_slices(images(True, ctx.seed))
        dataset = dataset.shard(ctx.slot_count, ctx.slot).shuffle(10_000, seed=ctx.seed).repeat()
        return dataset.batch(ctx.per_worker_batch)

    def eval_input(ctx: InputContext) -> Any:
        return tf.data.Dataset.from_tensor_slices(images(False, 1)).batch(ctx.per_worker_batch)

    return Program(
        model=model,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=keras.optimizers.SGD(lr, momentum=0.9, nesterov=True),
        train_input=train_input,
        eval_input=eval_input,
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
    )
