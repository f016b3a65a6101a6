"""Shared fixtures. The cluster ones run against the cluster in KUBECONFIG when that is set (a real
cluster), else against a fresh embedded LocalCluster for the whole session."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ttj_localcluster.cluster import LocalCluster
from ttj_localcluster.harness import cluster_session


@pytest.fixture(scope="session", autouse=True)
def _session_temporary_directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every temporary file of the run (TensorFlow's autograph writes one per converted function, in this
    process and in every trainer it starts) lands in pytest's own directory, not in the machine's /tmp."""
    own = tmp_path_factory.mktemp("tmp")
    saved = (tempfile.tempdir, os.environ.get("TMPDIR"))
    tempfile.tempdir, os.environ["TMPDIR"] = str(own), str(own)
    yield own
    tempfile.tempdir = saved[0]
    if saved[1] is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = saved[1]


@pytest.fixture(scope="session")
def _cluster_session() -> Iterator[tuple[str, LocalCluster | None]]:
    with cluster_session() as session:
        yield session


@pytest.fixture(scope="session")
def kubeconfig(_cluster_session: tuple[str, LocalCluster | None]) -> str:
    """Path of a kubeconfig for the cluster under test."""
    return _cluster_session[0]


@pytest.fixture(scope="session")
def local_cluster(_cluster_session: tuple[str, LocalCluster | None]) -> LocalCluster | None:
    """The embedded cluster under test, or None when the tests run against a real cluster (KUBECONFIG)."""
    return _cluster_session[1]


@pytest.fixture(scope="session")
def k8s_api(kubeconfig: str) -> Iterator[Any]:
    """A kubernetes.client.ApiClient for the cluster under test."""
    from kubernetes import config

    api = config.new_client_from_config(config_file=kubeconfig)
    yield api
    api.close()


# The files that take minutes, longest first (docs/benchmarks.md, the suite's time): `make test` runs a file
# per test process at a time, and starting the long ones first lets the processes end together.
LONGEST_FIRST = (
    "e2e/test_deadline.py",
    "trainer/test_trainer.py",
    "e2e/test_fleet_fallback.py",
    "trainer/test_program.py",
    "e2e/test_example_programs.py",
    "trainer/test_trainer_in_the_field.py",
    "e2e/test_training.py",
    "e2e/test_training_variants.py",
    "chaos/test_chaos.py",
    "e2e/test_operator_recovery.py",
    "e2e/test_operator_timeline.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tests = Path(__file__).parent

    def rank(item: pytest.Item) -> int:
        relative = item.path.relative_to(tests).as_posix() if item.path.is_relative_to(tests) else ""
        return LONGEST_FIRST.index(relative) if relative in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: a file's tests keep their order
