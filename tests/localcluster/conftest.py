"""A local cluster with simulated GKE node pools whose pods run as processes (one per test module)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from ttj.kubeapi import KubeClient
from ttj_localcluster.cluster import LocalCluster
from ttj_localcluster.nodes import cli as nodes_cli
from ttj_localcluster.nodes.deployments import DeploymentController
from ttj_localcluster.nodes.fleet import NodeFleet
from ttj_localcluster.nodes.pools import NodePool, spot_t4_pool
from ttj_localcluster.nodes.scheduler import Scheduler

T = TypeVar("T")


def wait_for(probe: Callable[[], T | None], timeout: float = 30.0, what: str = "condition") -> T:
    """Poll until ``probe`` returns something truthy (generous deadline, no fixed sleeps)."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached within {timeout:.0f}s (last: {last!r})")


def local_cluster_options(*argv: str) -> argparse.Namespace:
    """``ttj local-cluster``'s options as the command parses them (the node options; ``--kubeconfig kc``)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubeconfig", default="kc")
    nodes_cli.add_arguments(parser)
    return parser.parse_args(list(argv))


@dataclass
class NodesCluster:
    cluster: LocalCluster
    fleet: NodeFleet
    kube: KubeClient

    @property
    def kubeconfig(self) -> str:
        return self.cluster.kubeconfig_path

    def pod(self, name: str, namespace: str = "default") -> dict[str, Any] | None:
        return self.kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")


TEST_POOLS = [
    NodePool(name="cpu", nodes=2),
    spot_t4_pool(name="gpu", nodes=2, grace=2.0, restore_after=0.5),
]


@pytest.fixture(scope="module")
def nodes_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodesCluster]:
    fleet = NodeFleet(TEST_POOLS, run_pods=True, state_dir=tmp_path_factory.mktemp("nodes-state"))
    with LocalCluster(addons=[fleet, Scheduler(seed=1), DeploymentController()]) as cluster:
        kube = KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        yield NodesCluster(cluster, fleet, kube)
        kube.close()
