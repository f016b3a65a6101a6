"""The dataset catalogue: CIFAR-10 from a local path or gs:// (never downloaded), and synthetic CIFAR-shaped data.

CIFAR-10 is read from ``TTJ_DATA_DIR`` (default ``/data/cifar10``), in either of the standard layouts
(searched in the directory itself and in the sub-directory named by the archive):

* the python version: ``data_batch_1`` ... ``data_batch_5`` (pickles; ``cifar-10-batches-py/``),
* the binary version: ``data_batch_1.bin`` ... ``data_batch_5.bin`` (``cifar-10-batches-bin/``).

Files are read through ``tf.io.gfile``, so ``gs://bucket/path`` works as well as a mounted path.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import numpy as np

from ttj_contract import Env
from ttj_trainer.config import Knob

DATASET_NAMES = ("cifar10", "synthetic")
IMAGE_SHAPE = (32, 32, 3)
NUM_CLASSES = 10
_CIFAR_MEAN = np.array([0.4914, 0.4822, 0.4465], np.float32)
_CIFAR_STD = np.array([0.2470, 0.2435, 0.2616], np.float32)


class DatasetError(Exception):
    """The dataset cannot be found or read: the trainer exits 3 with this message."""


def _join(directory: str, name: str) -> str:
    return f"{directory.rstrip('/')}/{name}"


def load_cifar10(data_dir: str) -> tuple[np.ndarray, np.ndarray]:
    """Returns the 50,000 training images (NHWC, float32, normalised) and labels (int32)."""
    import tensorflow as tf

    for directory in (data_dir, _join(data_dir, "cifar-10-batches-py"), _join(data_dir, "cifar-10-batches-bin")):
        pickled = [_join(directory, f"data_batch_{i}") for i in range(1, 6)]
        binary = [_join(directory, f"data_batch_{i}.bin") for i in range(1, 6)]
        try:
            if all(tf.io.gfile.exists(p) for p in pickled):
                images, labels = [], []
                for path in pickled:
                    with tf.io.gfile.GFile(path, "rb") as f:
                        batch = pickle.load(f, encoding="bytes")
                    images.append(np.asarray(batch[b"data"], np.uint8).reshape(-1, 3, 32, 32))
                    labels.append(np.asarray(batch[b"labels"], np.int32))
                return _normalise(np.concatenate(images)), np.concatenate(labels)
            if all(tf.io.gfile.exists(p) for p in binary):
                records = []
                for path in binary:
                    with tf.io.gfile.GFile(path, "rb") as f:
                        records.append(np.frombuffer(f.read(), np.uint8).reshape(-1, 1 + 3 * 32 * 32))
                raw = np.concatenate(records)
                return _normalise(raw[:, 1:].reshape(-1, 3, 32, 32)), raw[:, 0].astype(np.int32)
        except (tf.errors.OpError, OSError, pickle.UnpicklingError, KeyError, ValueError) as err:
            raise DatasetError(f"cannot read CIFAR-10 from {directory}: {err}") from err
    raise DatasetError(
        f"CIFAR-10 not found under {Knob.DATA_DIR}={data_dir!r}: expected data_batch_1..5 (python pickles) or "
        "data_batch_1..5.bin (binary), directly or under cifar-10-batches-py/ or cifar-10-batches-bin/. "
        f"Use {Env.DATASET}=synthetic to train without data."
    )


def _normalise(images_nchw: np.ndarray) -> np.ndarray:
    images = images_nchw.transpose(0, 2, 3, 1).astype(np.float32) / 255.0
    return (images - _CIFAR_MEAN) / _CIFAR_STD


def synthetic_batches(batch_size: int, seed: int, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Endless CIFAR-shaped batches that can be learnt: a fixed random template per class plus fresh noise.

    Every worker derives the same templates from the job's seed (so they all train towards one model) and
    draws its own labels and noise from ``rng``; nothing is held in memory beyond the ten templates.
    """
    templates = np.random.default_rng(seed).standard_normal((NUM_CLASSES, *IMAGE_SHAPE)).astype(np.float32) * 0.5
    while True:
        labels = rng.integers(0, NUM_CLASSES, batch_size).astype(np.int32)
        noise = rng.standard_normal((batch_size, *IMAGE_SHAPE), dtype=np.float32)
        yield templates[labels] + noise, labels


def batches(
    name: str, data_dir: str, batch_size: int, seed: int, rng: np.random.Generator
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The dataset ``name`` as endless training batches (raises DatasetError when it cannot be read)."""
    if name == "synthetic":
        return synthetic_batches(batch_size, seed, rng)
    if name == "cifar10":
        images, labels = load_cifar10(data_dir)
        return shuffled_batches(images, labels, batch_size, rng, augment=True)
    raise DatasetError(f"unknown dataset {name!r}; known datasets: {', '.join(DATASET_NAMES)}")


def shuffled_batches(
    images: np.ndarray, labels: np.ndarray, batch_size: int, rng: np.random.Generator, augment: bool
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Endless shuffled epochs; with ``augment`` the standard CIFAR pad-4 random crop and horizontal flip."""
    count = len(labels)
    if count < batch_size:
        raise DatasetError(f"the dataset has {count} examples, fewer than one batch of {batch_size}")
    while True:
        order = rng.permutation(count)
        for start in range(0, count - batch_size + 1, batch_size):
            index = order[start : start + batch_size]
            batch = images[index]
            if augment:
                batch = _augment(batch, rng)
            yield batch, labels[index]


def _augment(batch: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    padded = np.pad(batch, ((0, 0), (4, 4), (4, 4), (0, 0)))
    out = np.empty_like(batch)
    offsets = rng.integers(0, 9, (len(batch), 2))
    flips = rng.random(len(batch)) < 0.5
    for i, (dy, dx) in enumerate(offsets):
        crop = padded[i, dy : dy + 32, dx : dx + 32]
        out[i] = crop[:, ::-1] if flips[i] else crop
    return out
