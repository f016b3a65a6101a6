"""The dataset catalogue: CIFAR-10 (from spec.data, else downloaded once into a cache), and synthetic data.

CIFAR-10 is read from ``spec.data.uri`` (``TTJ_DATA_URI``) when the job gives one, a path or gs://. Without
it, the public archive is downloaded into the cache directory (``TTJ_DATA_CACHE``, an emptyDir the operator
mounts) once per pod, its MD5 checked against the one the CIFAR-10 page publishes, and unpacked there; a
pod whose cache already holds it does not download again. Either way the files may be in either of the
standard layouts (searched in the directory itself and in the sub-directory named by the archive):

* the python version: ``data_batch_1`` ... ``data_batch_5`` (pickles; ``cifar-10-batches-py/``),
* the binary version: ``data_batch_1.bin`` ... ``data_batch_5.bin`` (``cifar-10-batches-bin/``).

Files are read through ``tf.io.gfile``, so ``gs://bucket/path`` works as well as a mounted path.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import pickle
import tarfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ttj_contract import BUILTIN_DATASETS
from ttj_trainer.logs import event

log = logging.getLogger("ttj_trainer.data")
#: The public archive (python version) and the MD5 its page publishes.
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"
DOWNLOAD_TIMEOUT_SECONDS = 60.0
_UNPACKED_MARK = ".complete"

DATASET_NAMES = BUILTIN_DATASETS
IMAGE_SHAPE = (32, 32, 3)
NUM_CLASSES = 10
_CIFAR_MEAN = np.array([0.4914, 0.4822, 0.4465], np.float32)
_CIFAR_STD = np.array([0.2470, 0.2435, 0.2616], np.float32)


class DatasetError(Exception):
    """The dataset cannot be found or read: the trainer exits 3 with this message."""


def _join(directory: str, name: str) -> str:
    return f"{directory.rstrip('/')}/{name}"


def load_cifar10(data_dir: str, named: str = "spec.data.uri") -> tuple[np.ndarray, np.ndarray]:
    """Returns the 50,000 training images (NHWC, float32, normalised) and labels (int32); ``named`` is how
    error messages call ``data_dir`` (the spec field it came from)."""
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
        except (tf.errors.OpError, OSError, pickle.UnpicklingError, KeyError, ValueError, EOFError) as err:
            text = " ".join(str(err).split())[:300]
            raise DatasetError(
                f"cannot read CIFAR-10 from {named} {directory!r}: {type(err).__name__}: {text}"
            ) from err
    raise DatasetError(
        f"CIFAR-10 not found at {named} {data_dir!r}: expected data_batch_1..5 (python pickles) or "
        "data_batch_1..5.bin (binary), directly or under cifar-10-batches-py/ or cifar-10-batches-bin/. "
        "Set spec.data to where the dataset is, leave spec.data out to download it, or use "
        "spec.dataset: synthetic to train without data."
    )


def download_cifar10(cache_dir: str, url: str = CIFAR10_URL, md5: str = CIFAR10_MD5) -> str:
    """Downloads and unpacks the CIFAR-10 archive into ``cache_dir`` unless it is there already; returns the
    directory to read it from. The archive's MD5 must be ``md5``; nothing unverified is unpacked."""
    named = "spec.dataset cifar10 without spec.data"
    cache = Path(cache_dir)
    unpacked = cache / "cifar-10"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with (cache / ".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one download per cache, however many processes share it
            if (unpacked / _UNPACKED_MARK).exists():
                event(log, "dataset found in the cache", dataset="cifar10", path=str(unpacked))
                return str(unpacked)
            archive = cache / "cifar-10.tar.gz.part"
            event(log, "downloading the dataset", dataset="cifar10", url=url, cache=str(cache))
            digest = _fetch(url, archive)
            if digest != md5.lower():
                archive.unlink(missing_ok=True)
                raise DatasetError(
                    f"{named}: the archive from {url} has MD5 {digest}, not the published {md5}; it was "
                    "discarded. Set spec.data to a verified copy of the dataset."
                )
            with tarfile.open(archive, "r:gz") as tar:
                tar.extractall(unpacked, filter="data")
            archive.unlink()
            (unpacked / _UNPACKED_MARK).write_text(f"{url} {digest}\n")
            event(log, "dataset downloaded and verified", dataset="cifar10", md5=digest, path=str(unpacked))
            return str(unpacked)
    except DatasetError:
        raise
    except (OSError, tarfile.TarError, ValueError) as err:
        text = " ".join(str(err).split())[:300]
        raise DatasetError(
            f"{named}: could not download {url} into the cache {cache_dir}: {type(err).__name__}: {text}. "
            "Set spec.data to where a copy of the dataset is (a path, gs://, or a claim to mount)."
        ) from err


def _fetch(url: str, target: Path) -> str:
    """Streams ``url`` to ``target``; returns the MD5 of what was written (the published checksum's kind)."""
    digest = hashlib.md5(usedforsecurity=False)
    with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_SECONDS) as response, target.open("wb") as out:
        while chunk := response.read(1 << 20):
            digest.update(chunk)
            out.write(chunk)
    return digest.hexdigest()


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
    name: str,
    data_uri: str,
    batch_size: int,
    seed: int,
    rng: np.random.Generator,
    *,
    cache_dir: str = "",
    url: str = CIFAR10_URL,
    md5: str = CIFAR10_MD5,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The dataset ``name`` as endless training batches (raises DatasetError when it cannot be had): from
    ``data_uri`` when given, else downloaded into ``cache_dir``."""
    if name == "synthetic":
        return synthetic_batches(batch_size, seed, rng)
    if name == "cifar10":
        if data_uri:
            images, labels = load_cifar10(data_uri)
        else:
            where = download_cifar10(cache_dir or default_cache(), url, md5)
            images, labels = load_cifar10(where, named="the downloaded archive in")
        return shuffled_batches(images, labels, batch_size, rng, augment=True)
    raise DatasetError(f"unknown dataset {name!r}; known datasets: {', '.join(DATASET_NAMES)}")


def default_cache() -> str:
    """Outside a pod (no TTJ_DATA_CACHE): the user's cache directory, as Keras keeps ~/.keras/datasets."""
    return str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ttj-data")


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
