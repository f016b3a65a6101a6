"""The dataset catalogue: CIFAR-10 in both standard layouts (tiny stand-in files), and synthetic data."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from ttj_trainer import data


def _images(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (count, 3072), dtype=np.uint8), rng.integers(0, 10, count).astype(np.int64)


def write_python_batches(directory: Path) -> list[int]:
    directory.mkdir(parents=True)
    labels_all: list[int] = []
    for i in range(1, 6):
        pixels, labels = _images(4, i)
        with open(directory / f"data_batch_{i}", "wb") as f:
            pickle.dump({b"data": pixels, b"labels": labels.tolist()}, f)
        labels_all += labels.tolist()
    return labels_all


def write_binary_batches(directory: Path) -> list[int]:
    directory.mkdir(parents=True)
    labels_all: list[int] = []
    for i in range(1, 6):
        pixels, labels = _images(3, i)
        records = np.concatenate([labels.astype(np.uint8)[:, None], pixels], axis=1)
        (directory / f"data_batch_{i}.bin").write_bytes(records.tobytes())
        labels_all += labels.tolist()
    return labels_all


def test_cifar10_python_pickles_under_the_archive_directory(tmp_path: Path) -> None:
    labels = write_python_batches(tmp_path / "cifar-10-batches-py")
    images, loaded = data.load_cifar10(str(tmp_path))
    assert images.shape == (20, 32, 32, 3)
    assert images.dtype == np.float32
    assert loaded.tolist() == labels
    assert abs(float(images.mean())) < 1.0  # normalised


def test_cifar10_binary_batches_directly_in_the_directory(tmp_path: Path) -> None:
    labels = write_binary_batches(tmp_path / "bin")
    images, loaded = data.load_cifar10(str(tmp_path / "bin"))
    assert images.shape == (15, 32, 32, 3)
    assert loaded.tolist() == labels


def test_missing_cifar10_says_where_it_looked_and_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(data.DatasetError, match="TTJ_DATASET=synthetic"):
        data.batches("cifar10", str(tmp_path), 8, 0, np.random.default_rng(0))


def test_cifar10_batches_are_augmented_and_shaped(tmp_path: Path) -> None:
    write_python_batches(tmp_path / "py")
    images, labels = next(data.batches("cifar10", str(tmp_path / "py"), 8, 0, np.random.default_rng(0)))
    assert images.shape == (8, 32, 32, 3)
    assert labels.shape == (8,)


def test_synthetic_templates_are_shared_by_seed_and_noise_is_per_worker() -> None:
    a_images, a_labels = next(data.synthetic_batches(64, seed=3, rng=np.random.default_rng(1)))
    b_images, b_labels = next(data.synthetic_batches(64, seed=3, rng=np.random.default_rng(2)))
    assert a_images.shape == (64, 32, 32, 3)
    assert not np.array_equal(a_labels, b_labels)
    # Same class, same seed: the class means agree (shared templates), though the batches differ.
    for label in set(a_labels.tolist()) & set(b_labels.tolist()):
        a_mean = a_images[a_labels == label].mean(axis=0)
        b_mean = b_images[b_labels == label].mean(axis=0)
        assert np.corrcoef(a_mean.ravel(), b_mean.ravel())[0, 1] > 0.2
