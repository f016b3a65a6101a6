"""The dataset catalogue: CIFAR-10 in both standard layouts (tiny stand-in files), and synthetic data."""

from __future__ import annotations

import hashlib
import io
import pickle
import tarfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

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
    with pytest.raises(data.DatasetError) as raised:
        data.batches("cifar10", str(tmp_path), 8, 0, np.random.default_rng(0))
    message = str(raised.value)
    assert f"spec.data.uri {str(tmp_path)!r}" in message
    assert "spec.dataset: synthetic" in message
    assert "TTJ_" not in message, "the message names spec fields, not environment variables"


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


# -- downloading CIFAR-10 when the job gives no data ------------------------------------------------------
def cifar10_archive(tmp_path: Path) -> bytes:
    """A generated archive in the layout of the public one: cifar-10-batches-py/data_batch_1..5."""
    write_python_batches(tmp_path / "archive" / "cifar-10-batches-py")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(tmp_path / "archive" / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    return buffer.getvalue()


class ArchiveServer:
    """Serves one archive over real HTTP and counts the downloads."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def do_GET(self) -> None:
                server.requests += 1
                if self.path != "/cifar-10-python.tar.gz":
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(server.body)))
                self.end_headers()
                self.wfile.write(server.body)

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}/cifar-10-python.tar.gz"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ArchiveServer]:
    server = ArchiveServer(cifar10_archive(tmp_path))
    yield server
    server.http.shutdown()
    server.http.server_close()


def test_without_data_cifar10_is_downloaded_once_verified_and_trained_on(tmp_path: Path, served: ArchiveServer) -> None:
    md5 = hashlib.md5(served.body, usedforsecurity=False).hexdigest()
    cache = tmp_path / "cache"
    rng = np.random.default_rng(0)
    images, labels = next(data.batches("cifar10", "", 8, 0, rng, cache_dir=str(cache), url=served.url, md5=md5))
    assert (images.shape, labels.shape) == ((8, 32, 32, 3), (8,))
    assert served.requests == 1
    # A second trainer process in the same pod finds it in the cache volume: no second download.
    next(data.batches("cifar10", "", 8, 0, rng, cache_dir=str(cache), url=served.url, md5=md5))
    assert served.requests == 1
    assert not list(cache.glob("*.part")), "no partial archive is left behind"


def test_an_archive_with_the_wrong_checksum_is_discarded_and_named_as_such(
    tmp_path: Path, served: ArchiveServer
) -> None:
    cache = tmp_path / "cache"
    wrong = "0" * 32
    with pytest.raises(data.DatasetError) as raised:
        data.batches("cifar10", "", 8, 0, np.random.default_rng(0), cache_dir=str(cache), url=served.url, md5=wrong)
    message = str(raised.value)
    assert hashlib.md5(served.body, usedforsecurity=False).hexdigest() in message
    assert "spec.data" in message
    assert not (cache / "cifar-10").exists(), "nothing unverified is unpacked"
    assert not list(cache.glob("*.part"))


def test_an_unreachable_archive_is_a_dataset_error_naming_the_spec(tmp_path: Path) -> None:
    with pytest.raises(data.DatasetError, match=r"spec.dataset cifar10 without spec.data.*Set spec.data"):
        data.download_cifar10(str(tmp_path / "cache"), url="http://127.0.0.1:9/none.tar.gz", md5="0" * 32)
