"""The model catalogue, written as pure functions of an explicit parameter dict.

The parameters live on the parameter servers as named resource variables; a worker reads them, runs
``forward`` on its own device and sends gradients back. Keeping the models free of Keras layers keeps
the variables under the trainer's control (names, placement, initialisation by the chief alone).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import tensorflow as tf

MODEL_NAMES = ("resnet32", "small-cnn")
NUM_CLASSES = 10
BN_DECAY = 0.9
BN_EPSILON = 1e-3


@dataclass(frozen=True)
class ParamSpec:
    name: str
    shape: tuple[int, ...]
    init: str  # "he", "glorot", "zeros", "ones"
    trainable: bool = True

    def initial_value(self, rng: np.random.Generator) -> np.ndarray:
        if self.init == "zeros":
            return np.zeros(self.shape, np.float32)
        if self.init == "ones":
            return np.ones(self.shape, np.float32)
        fan_in = int(np.prod(self.shape[:-1]))
        if self.init == "he":
            he: np.ndarray = rng.standard_normal(self.shape).astype(np.float32) * np.float32(np.sqrt(2.0 / fan_in))
            return he
        limit = np.sqrt(6.0 / (fan_in + self.shape[-1]))
        return rng.uniform(-limit, limit, self.shape).astype(np.float32)


Forward = Callable[[dict[str, "tf.Tensor"], "tf.Tensor", bool], tuple["tf.Tensor", dict[str, "tf.Tensor"]]]


@dataclass(frozen=True)
class Model:
    name: str
    params: list[ParamSpec]
    forward: Forward
    weight_decay: float = 0.0
    kernels: list[str] = field(default_factory=list)  # parameters under weight decay


class _Builder:
    """Collects parameter specs while describing a network, so the spec list and forward pass agree."""

    def __init__(self) -> None:
        self.params: list[ParamSpec] = []
        self.kernels: list[str] = []

    def conv(self, name: str, k: int, cin: int, cout: int) -> str:
        self.params.append(ParamSpec(f"{name}/kernel", (k, k, cin, cout), "he"))
        self.kernels.append(f"{name}/kernel")
        return name

    def bn(self, name: str, channels: int) -> str:
        self.params += [
            ParamSpec(f"{name}/gamma", (channels,), "ones"),
            ParamSpec(f"{name}/beta", (channels,), "zeros"),
            ParamSpec(f"{name}/moving_mean", (channels,), "zeros", trainable=False),
            ParamSpec(f"{name}/moving_variance", (channels,), "ones", trainable=False),
        ]
        return name

    def dense(self, name: str, cin: int, cout: int) -> str:
        self.params += [ParamSpec(f"{name}/kernel", (cin, cout), "glorot"), ParamSpec(f"{name}/bias", (cout,), "zeros")]
        self.kernels.append(f"{name}/kernel")
        return name


def _conv(tf: Any, params: dict[str, Any], name: str, x: Any, stride: int = 1) -> Any:
    return tf.nn.conv2d(x, params[f"{name}/kernel"], strides=stride, padding="SAME")


def _bn(tf: Any, params: dict[str, Any], name: str, x: Any, *, training: bool, updates: dict[str, Any]) -> Any:
    if training:
        mean, variance = tf.nn.moments(x, axes=[0, 1, 2])
        updates[f"{name}/moving_mean"] = params[f"{name}/moving_mean"] * BN_DECAY + mean * (1 - BN_DECAY)
        updates[f"{name}/moving_variance"] = params[f"{name}/moving_variance"] * BN_DECAY + variance * (1 - BN_DECAY)
    else:
        mean, variance = params[f"{name}/moving_mean"], params[f"{name}/moving_variance"]
    return tf.nn.batch_normalization(x, mean, variance, params[f"{name}/beta"], params[f"{name}/gamma"], BN_EPSILON)


def small_cnn() -> Model:
    """Two conv layers and a linear classifier (about 25k parameters): fast enough for tests on a laptop CPU."""
    import tensorflow as tf

    b = _Builder()
    b.conv("conv1", 3, 3, 16)
    b.params.append(ParamSpec("conv1/bias", (16,), "zeros"))
    b.conv("conv2", 3, 16, 32)
    b.params.append(ParamSpec("conv2/bias", (32,), "zeros"))
    b.dense("logits", 8 * 8 * 32, NUM_CLASSES)

    def forward(params: dict[str, Any], images: Any, training: bool) -> tuple[Any, dict[str, Any]]:
        x = tf.nn.relu(_conv(tf, params, "conv1", images) + params["conv1/bias"])
        x = tf.nn.max_pool2d(x, 2, 2, "SAME")
        x = tf.nn.relu(_conv(tf, params, "conv2", x) + params["conv2/bias"])
        x = tf.nn.max_pool2d(x, 2, 2, "SAME")
        x = tf.reshape(x, [-1, 8 * 8 * 32])
        return tf.matmul(x, params["logits/kernel"]) + params["logits/bias"], {}

    return Model("small-cnn", b.params, forward, 0.0, b.kernels)


def resnet32() -> Model:
    """ResNet-32 for CIFAR-10 (He et al. 2016, 6n+2 with n=5; identity shortcuts with zero padding), as in the paper."""
    import tensorflow as tf

    b = _Builder()
    blocks_per_stage = 5
    widths = (16, 32, 64)
    b.conv("init/conv", 3, 3, 16)
    b.bn("init/bn", 16)
    cin = 16
    layout: list[tuple[str, int, int, int]] = []
    for stage, width in enumerate(widths):
        for block in range(blocks_per_stage):
            stride = 2 if stage > 0 and block == 0 else 1
            name = f"stage{stage + 1}/block{block + 1}"
            b.conv(f"{name}/conv1", 3, cin, width)
            b.bn(f"{name}/bn1", width)
            b.conv(f"{name}/conv2", 3, width, width)
            b.bn(f"{name}/bn2", width)
            layout.append((name, cin, width, stride))
            cin = width
    b.dense("logits", widths[-1], NUM_CLASSES)

    def forward(params: dict[str, Any], images: Any, training: bool) -> tuple[Any, dict[str, Any]]:
        updates: dict[str, Any] = {}
        x = tf.nn.relu(
            _bn(tf, params, "init/bn", _conv(tf, params, "init/conv", images), training=training, updates=updates)
        )
        for name, block_in, block_out, stride in layout:
            y = tf.nn.relu(
                _bn(
                    tf,
                    params,
                    f"{name}/bn1",
                    _conv(tf, params, f"{name}/conv1", x, stride),
                    training=training,
                    updates=updates,
                )
            )
            y = _bn(
                tf, params, f"{name}/bn2", _conv(tf, params, f"{name}/conv2", y), training=training, updates=updates
            )
            shortcut = x
            if stride > 1:
                shortcut = shortcut[:, ::stride, ::stride, :]
            if block_out > block_in:
                extra = block_out - block_in
                shortcut = tf.pad(shortcut, [[0, 0], [0, 0], [0, 0], [extra // 2, extra - extra // 2]])
            x = tf.nn.relu(y + shortcut)
        x = tf.reduce_mean(x, axis=[1, 2])
        return tf.matmul(x, params["logits/kernel"]) + params["logits/bias"], updates

    return Model("resnet32", b.params, forward, 2e-4, b.kernels)


def build(name: str) -> Model:
    if name == "resnet32":
        return resnet32()
    if name == "small-cnn":
        return small_cnn()
    raise ValueError(f"unknown model {name!r}; known models: {', '.join(MODEL_NAMES)}")
