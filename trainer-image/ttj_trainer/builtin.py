"""The built-in networks (``spec.model``: resnet32, small-cnn) on the built-in datasets (``spec.dataset``),
as programs like any user's: ``ttj_trainer.builtin:program`` with the job's settings as arguments."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

from ttj_contract import BUILTIN_MODELS, DEFAULT_BUILTIN_DATASET, DEFAULT_BUILTIN_MODEL
from ttj_trainer import data
from ttj_trainer.program import InputContext, Program

BN_MOMENTUM = 0.9
BN_EPSILON = 1e-3
RESNET_WEIGHT_DECAY = 2e-4


@keras.saving.register_keras_serializable(package="ttj")
class ShortcutPad(keras.layers.Layer):  # type: ignore[misc]
    """ResNet's identity shortcut where a stage narrows the image and widens the channels: subsample, then
    pad the new channels with zeros (He et al. 2016, option A)."""

    def __init__(self, stride: int, extra: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stride = stride
        self.extra = extra

    def call(self, inputs: Any) -> Any:
        x = inputs[:, :: self.stride, :: self.stride, :]
        return keras.ops.pad(x, [[0, 0], [0, 0], [0, 0], [self.extra // 2, self.extra - self.extra // 2]])

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "stride": self.stride, "extra": self.extra}


def small_cnn() -> Any:
    """Two conv layers and a linear classifier (about 25k parameters): fast enough for tests on a laptop CPU."""
    inputs = keras.Input(data.IMAGE_SHAPE)
    x = keras.layers.Conv2D(16, 3, padding="same", activation="relu", kernel_initializer="he_normal")(inputs)
    x = keras.layers.MaxPooling2D(2, padding="same")(x)
    x = keras.layers.Conv2D(32, 3, padding="same", activation="relu", kernel_initializer="he_normal")(x)
    x = keras.layers.MaxPooling2D(2, padding="same")(x)
    outputs = keras.layers.Dense(data.NUM_CLASSES)(keras.layers.Flatten()(x))
    return keras.Model(inputs, outputs, name="small_cnn")


def resnet32() -> Any:
    """ResNet-32 for CIFAR-10 (6n+2 with n=5; identity shortcuts with zero padding), as in the paper."""
    regularizer = keras.regularizers.L2(RESNET_WEIGHT_DECAY / 2)  # the paper's decay × ½‖w‖²

    def conv(x: Any, width: int, stride: int = 1) -> Any:
        return keras.layers.Conv2D(
            width,
            3,
            stride,
            padding="same",
            use_bias=False,
            kernel_initializer="he_normal",
            kernel_regularizer=regularizer,
        )(x)

    def bn(x: Any) -> Any:
        return keras.layers.BatchNormalization(momentum=BN_MOMENTUM, epsilon=BN_EPSILON)(x)

    inputs = keras.Input(data.IMAGE_SHAPE)
    x = keras.layers.ReLU()(bn(conv(inputs, 16)))
    width_in = 16
    for stage, width in enumerate((16, 32, 64)):
        for block in range(5):
            stride = 2 if stage > 0 and block == 0 else 1
            y = keras.layers.ReLU()(bn(conv(x, width, stride)))
            y = bn(conv(y, width))
            shortcut = x if stride == 1 and width == width_in else ShortcutPad(stride, width - width_in)(x)
            x = keras.layers.ReLU()(keras.layers.Add()([y, shortcut]))
            width_in = width
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(data.NUM_CLASSES, kernel_regularizer=regularizer)(x)
    return keras.Model(inputs, outputs, name="resnet32")


def check_data(args: dict[str, str]) -> None:
    """Has the built-in dataset ready (read or downloaded) before anything waits for the parameter servers, so
    that data that cannot be had fails at once (DatasetError), with no PS up."""
    if args.get("dataset", DEFAULT_BUILTIN_DATASET) != "cifar10":
        return
    if args.get("data_uri"):
        data.load_cifar10(args["data_uri"])
    else:
        data.download_cifar10(
            args.get("data_cache", "") or data.default_cache(),
            args.get("cifar10_url", data.CIFAR10_URL),
            args.get("cifar10_md5", data.CIFAR10_MD5),
        )


def program(args: dict[str, str]) -> Program:
    """Arguments: model, dataset, learning_rate, momentum, seed (the job's), data_uri, data_cache,
    cifar10_url, cifar10_md5 (as the trainer's configuration reads them)."""
    name = args.get("model", DEFAULT_BUILTIN_MODEL)
    if name not in BUILTIN_MODELS:
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(BUILTIN_MODELS)}")
    dataset = args.get("dataset", DEFAULT_BUILTIN_DATASET)
    job_seed = int(args.get("seed", "0"))

    def train_input(ctx: InputContext) -> Any:
        # Read (or downloaded) now, so that a dataset that cannot be had is a DatasetError here.
        batches = data.batches(
            dataset,
            args.get("data_uri", ""),
            ctx.per_worker_batch,
            job_seed,
            np.random.default_rng(ctx.seed),
            cache_dir=args.get("data_cache", ""),
            url=args.get("cifar10_url", data.CIFAR10_URL),
            md5=args.get("cifar10_md5", data.CIFAR10_MD5),
        )
        signature = (
            tf.TensorSpec((None, *data.IMAGE_SHAPE), tf.float32),
            tf.TensorSpec((None,), tf.int32),
        )
        return tf.data.Dataset.from_generator(lambda: batches, output_signature=signature)

    return Program(
        model=resnet32() if name == "resnet32" else small_cnn(),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=keras.optimizers.SGD(
            float(args.get("learning_rate", "0.1")), momentum=float(args.get("momentum", "0.9"))
        ),
        train_input=train_input,
    )
