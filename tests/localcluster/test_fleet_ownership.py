"""One node fleet per cluster, and a fleet that cleans up after itself: its Nodes and the control ConfigMap go
when it stops; a second fleet is refused while the first answers, and takes over once it does not; a
``--pools`` file with ``pools: []`` means no pools."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ttj.kubeapi import KubeClient
from ttj_localcluster.cluster import LocalCluster
from ttj_localcluster.nodes import cli as nodes_cli
from ttj_localcluster.nodes.fleet import NodeFleet
from ttj_localcluster.nodes.fleet_ownership import CONTROL_PATH, FLEET_LABEL, FleetConflict
from ttj_localcluster.nodes.pools import NodePool, default_pools, node_object

from .conftest import local_cluster_options

POOL = NodePool(name="attached", nodes=2)


@pytest.fixture(scope="module")
def api_only() -> Iterator[LocalCluster]:
    """An API server with no nodes of its own, for fleets to attach to."""
    with LocalCluster() as cluster:
        yield cluster


@pytest.fixture
def kube(api_only: LocalCluster) -> Iterator[KubeClient]:
    client = KubeClient.from_kubeconfig(api_only.kubeconfig_path)
    yield client
    for node in client.request("GET", "/api/v1/nodes")["items"]:  # each test starts from no nodes
        client.delete(f"/api/v1/nodes/{node['metadata']['name']}")
    client.delete(CONTROL_PATH)
    client.close()


def fleet() -> NodeFleet:
    return NodeFleet([POOL], run_pods=False, pod_network=False)


def node_names(kube: KubeClient) -> list[str]:
    return sorted(n["metadata"]["name"] for n in kube.request("GET", "/api/v1/nodes")["items"])


def control_data(kube: KubeClient) -> dict[str, str] | None:
    configmap = kube.get(CONTROL_PATH)
    return None if configmap is None else dict(configmap.get("data") or {})


def closed_port_url() -> str:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/ttj-local"


def plant_dead_fleet(kube: KubeClient) -> tuple[str, str]:
    """What a fleet that was killed (SIGKILL, a crash) leaves: its ConfigMap naming a closed port, and a Node;
    (the Node's name, the dead control URL)."""
    kube.create("/api/v1/namespaces", {"metadata": {"name": "kube-system"}})
    data = {"url": closed_port_url(), "fleet": "deadfleet000", "owner": "pid 1 on elsewhere"}
    kube.create(CONTROL_PATH.rsplit("/", 1)[0], {"metadata": {"name": "ttj-local-control"}, "data": data})
    node = node_object(POOL, "gke-ttj-local-attached-dead-0000", "127.0.0.1")
    node.pop("status")
    node["metadata"]["labels"][FLEET_LABEL] = "deadfleet000"
    kube.create("/api/v1/nodes", node)
    return str(node["metadata"]["name"]), data["url"]


def test_a_stopped_fleet_leaves_no_nodes_and_no_control_configmap(api_only: LocalCluster, kube: KubeClient) -> None:
    first = fleet()
    first.start(api_only.kubeconfig_path)
    try:
        registered = node_names(kube)
        assert len(registered) == POOL.nodes
        assert control_data(kube) == {
            "url": first.control.url if first.control else None,
            "fleet": first.identity.id,
            "owner": first.identity.owner,
        }
        nodes = kube.request("GET", "/api/v1/nodes")["items"]
        assert {n["metadata"]["labels"][FLEET_LABEL] for n in nodes} == {first.identity.id}
    finally:
        first.stop()
    assert node_names(kube) == []
    assert control_data(kube) is None
    leases = kube.request("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases")["items"]
    assert [lease["metadata"]["name"] for lease in leases if lease["metadata"]["name"] in registered] == []


def test_a_second_fleet_is_refused_while_the_first_answers(api_only: LocalCluster, kube: KubeClient) -> None:
    first = fleet()
    first.start(api_only.kubeconfig_path)
    try:
        before = node_names(kube)
        second = fleet()
        with pytest.raises(
            FleetConflict, match=r"belongs to another node fleet \(pid \d+ on .*\) whose control server"
        ):
            second.start(api_only.kubeconfig_path)
        assert node_names(kube) == before  # the refused fleet registered nothing
        assert (control_data(kube) or {}).get("fleet") == first.identity.id
    finally:
        first.stop()


def test_a_fleet_leaves_a_configmap_another_fleet_took_over(api_only: LocalCluster, kube: KubeClient) -> None:
    first = fleet()
    first.start(api_only.kubeconfig_path)
    kube.merge_patch(CONTROL_PATH, {"data": {"fleet": "successor000", "url": "http://127.0.0.1:1/ttj-local"}})
    first.stop()
    assert (control_data(kube) or {}).get("fleet") == "successor000"
    assert node_names(kube) == []


def test_a_fleet_takes_over_from_a_dead_one_and_deletes_its_nodes(api_only: LocalCluster, kube: KubeClient) -> None:
    dead_node, dead_url = plant_dead_fleet(kube)
    said: list[str] = []
    successor = NodeFleet([POOL], run_pods=False, pod_network=False, announce=said.append)
    successor.start(api_only.kubeconfig_path)
    try:
        assert said == [
            "took over kube-system/ttj-local-control from the node fleet of pid 1 on elsewhere, whose control "
            f"server {dead_url} no longer answers; deleted its 1 Nodes"
        ]
        assert dead_node not in node_names(kube)
        assert len(node_names(kube)) == POOL.nodes
        assert (control_data(kube) or {}).get("fleet") == successor.identity.id
    finally:
        successor.stop()


def _nodes_only(kubeconfig: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-c",
        "from ttj_localcluster.cli import run; raise SystemExit(run())",
        "--nodes-only",
        "--kubeconfig",
        kubeconfig,
        "--pool",
        "name=attached,nodes=2",
        "--simulate-pods",
        "--pod-network",
        "host",
        *extra,
    ]


def test_the_nodes_only_command_takes_over_cleans_up_and_refuses_a_second_one(
    api_only: LocalCluster, kube: KubeClient, tmp_path: Path
) -> None:
    dead_node, _ = plant_dead_fleet(kube)
    command = _nodes_only(api_only.kubeconfig_path)
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ.copy()
    )
    output: list[str] = []
    try:
        assert process.stdout is not None
        while not any("attached to the API server" in line for line in output):
            line = process.stdout.readline()
            assert line, "".join(output)
            output.append(line)
        assert any(line.startswith("ttj local-cluster: took over kube-system/ttj-local-control") for line in output)
        assert dead_node not in node_names(kube)
        assert len(node_names(kube)) == 2
        second = subprocess.run(
            _nodes_only(api_only.kubeconfig_path),
            capture_output=True,
            text=True,
            env=os.environ.copy(),
            timeout=120,
            check=False,
        )
        assert second.returncode == 1
        assert second.stderr.splitlines()[-1].startswith(
            "ttj local-cluster: kube-system/ttj-local-control belongs to another node fleet"
        ), second.stderr
        assert len(node_names(kube)) == 2
    finally:
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=60)
    assert process.returncode == 0, "".join(output) + rest
    assert node_names(kube) == []
    assert control_data(kube) is None


def test_pool_options_replace_the_defaults_and_an_empty_pools_file_means_none(tmp_path: Path) -> None:
    empty, one = tmp_path / "empty.yaml", tmp_path / "one.yaml"
    empty.write_text("pools: []\n")
    one.write_text("pools:\n- {name: cpu, nodes: 1}\n")

    def pools(*argv: str) -> list[tuple[str, int]]:
        return [(p.name, p.nodes) for p in nodes_cli.pools_from_args(local_cluster_options(*argv))]

    assert {
        "no option": pools(),
        "pools: []": pools("--pools", str(empty)),
        "pools: [] and --pool": pools("--pools", str(empty), "--pool", "name=gpu,nodes=2"),
        "a file": pools("--pools", str(one)),
    } == {
        "no option": [(p.name, p.nodes) for p in default_pools()],
        "pools: []": [],
        "pools: [] and --pool": [("gpu", 2)],
        "a file": [("cpu", 1)],
    }


def test_a_fleet_without_pools_registers_no_node(api_only: LocalCluster, kube: KubeClient) -> None:
    empty = NodeFleet([], run_pods=False, pod_network=False)
    empty.start(api_only.kubeconfig_path)
    try:
        status: dict[str, Any] = empty.describe()
        assert (status["pools"], node_names(kube)) == ({}, [])
        assert (control_data(kube) or {}).get("fleet") == empty.identity.id
    finally:
        empty.stop()
