"""The user program the issue-25 benchmarks train: ttj's small CNN (two conv layers, ~25k parameters) with
SGD and momentum on a fixed synthetic CIFAR-shaped set, as a ttj program (``bench.user_program:program``,
with the repository root on PYTHONPATH) and as the dataset function TensorFlow's own strategies use.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

from ttj_trainer.builtin import small_cnn
from ttj_trainer.program import InputContext, Program

EXAMPLES = 2048
CLASSES = 10


def dataset(batch: int, seed: int) -> Any:
    """Batches of ``batch`` from a fixed synthetic set (the same bytes in every process for a seed), repeated."""
    rng = np.random.default_rng(seed)
    images = rng.standard_normal((EXAMPLES, 32, 32, 3)).astype(np.float32)
    labels = rng.integers(0, CLASSES, EXAMPLES).astype(np.int32)
    return tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(batch, drop_remainder=True)


def model_and_optimizer() -> tuple[Any, Any]:
    return small_cnn(), keras.optimizers.SGD(0.02, momentum=0.9)


def program(args: dict[str, str]) -> Program:
    model, optimizer = model_and_optimizer()

    def train_input(ctx: InputContext) -> Any:
        return dataset(ctx.per_worker_batch, ctx.slot)

    return Program(
        model=model,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=optimizer,
        train_input=train_input,
    )
