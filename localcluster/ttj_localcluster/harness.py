"""Test harness: a cluster to test against — the one in ``KUBECONFIG`` when set (a real cluster), else a fresh
LocalCluster on a free port."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence

from .cluster import Addon, LocalCluster


@contextlib.contextmanager
def cluster_session(addons: Sequence[Addon] = ()) -> Iterator[tuple[str, LocalCluster | None]]:
    """Yields (kubeconfig path, the LocalCluster or None when testing against the real cluster in KUBECONFIG)."""
    real = os.environ.get("KUBECONFIG")
    if real:
        yield real, None
        return
    with LocalCluster(addons=addons) as cluster:
        yield cluster.kubeconfig_path, cluster
