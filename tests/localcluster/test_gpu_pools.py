"""Pools of several GPU types with simulated speeds, and stock-outs with the cluster autoscaler's Events.

A cluster of its own: a CPU pool, T4 spot in zones a and b, L4 spot twice a T4's speed, and a V100 pool that
starts stocked out. Everything is awaited (generous deadlines), nothing is timed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ttj.kubeapi import KubeClient
from ttj_localcluster.cluster import LocalCluster
from ttj_localcluster.nodes import cli as nodes_cli
from ttj_localcluster.nodes.autoscaler import (
    BACKOFF_REASON,
    MAX_SIZE_REASON,
    PoolView,
    ScanResult,
    failed_message,
    not_triggered_message,
    scan,
    triggered_message,
)
from ttj_localcluster.nodes.control import ControlClient
from ttj_localcluster.nodes.fleet import NodeFleet
from ttj_localcluster.nodes.pools import NodePool, instance_group_name, parse_pool_option, pool_from_mapping
from ttj_localcluster.nodes.scheduler import Scheduler

from .conftest import NodesCluster, local_cluster_options, wait_for

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
ACCELERATOR = "cloud.google.com/gke-accelerator"
POOL = "cloud.google.com/gke-nodepool"
ZONE = "topology.kubernetes.io/zone"


def gpu_pool(name: str, accelerator: str, zone: str, **more: Any) -> NodePool:
    return NodePool(
        name=name,
        nodes=1,
        provisioning="spot",
        accelerator=accelerator,
        gpus=1,
        cpu="8",
        memory="30Gi",
        machine_type="n1-standard-8",
        zone=zone,
        grace=1.0,
        restore_after=0.5,
        **more,
    )


POOLS = [
    NodePool(name="cpu", nodes=1),
    gpu_pool("t4-a", "nvidia-tesla-t4", "us-central1-a"),
    gpu_pool("t4-b", "nvidia-tesla-t4", "us-central1-b"),
    gpu_pool("l4", "nvidia-l4", "us-central1-a", speed=2.0, step_seconds=0.2),
    gpu_pool("v100", "nvidia-tesla-v100", "us-central1-c", speed=3.0, stocked_out=True),
    # out from one second after the start until restocked
    gpu_pool("a100", "nvidia-tesla-a100", "us-central1-f", speed=4.0, stock_out_window=(1.0, None)),
]


@pytest.fixture(scope="module")
def gpu_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodesCluster]:
    fleet = NodeFleet(
        POOLS,
        run_pods=True,
        state_dir=tmp_path_factory.mktemp("gpu-pools"),
        pod_network=False,
        autoscaler_scan_s=0.2,
    )
    with LocalCluster(addons=[fleet, Scheduler(seed=1)]) as cluster:
        kube = KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        yield NodesCluster(cluster, fleet, kube)
        kube.close()


def gpu_pod(name: str, selector: dict[str, str], code: str = "import time; time.sleep(600)") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "python:3.11",
                    "command": ["python", "-c", code],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
            "nodeSelector": selector,
            "tolerations": [GPU_TOLERATION],
            "terminationGracePeriodSeconds": 1,
        },
    }


def create(c: NodesCluster, pod: dict[str, Any]) -> None:
    c.kube.create("/api/v1/namespaces/default/pods", pod)


def events(c: NodesCluster, pod: str, reason: str) -> list[dict[str, Any]]:
    listed = c.kube.get("/api/v1/namespaces/default/events") or {}
    return [e for e in listed.get("items") or [] if e["involvedObject"]["name"] == pod and e["reason"] == reason]


def nodes_by_pool(c: NodesCluster, without: str) -> dict[str, dict[str, Any]] | None:
    """The Nodes by pool once the pool ``without`` has none left."""
    by_pool = {n["metadata"]["labels"][POOL]: n for n in (c.kube.get("/api/v1/nodes") or {})["items"]}
    return None if without in by_pool else by_pool


def printed(c: NodesCluster, pod: str) -> str | None:
    log = c.fleet.log_file("default", pod)
    return log.read_text() if log is not None and log.exists() and log.read_text().endswith("\n") else None


def node_of(c: NodesCluster, pod: str) -> str | None:
    found = c.pod(pod)
    return ((found or {}).get("spec") or {}).get("nodeName")


# -- pool options ---------------------------------------------------------------------------------


def test_pool_options_for_types_speeds_zones_and_stock_outs() -> None:
    parsed = [
        parse_pool_option(
            "name=l4,accelerator=nvidia-l4,provisioning=spot,zone=us-central1-b,speed=2.0,step-seconds=0.2"
        ),
        parse_pool_option("name=v100,accelerator=nvidia-tesla-v100,stocked-out=true"),
        pool_from_mapping({"name": "t4", "accelerator": "nvidia-tesla-t4", "stock-out-window": "30:90"}),
        pool_from_mapping({"name": "t4b", "accelerator": "nvidia-tesla-t4", "stock_out_window": [5, "never"]}),
    ]
    assert [(p.name, p.zone, p.speed, p.step_seconds, p.stocked_out, p.stock_out_window, p.gpus) for p in parsed] == [
        ("l4", "us-central1-b", 2.0, 0.2, False, None, 1),
        ("v100", "us-central1-a", 1.0, 0.0, True, None, 1),
        ("t4", "us-central1-a", 1.0, 0.0, False, (30.0, 90.0), 1),
        ("t4b", "us-central1-a", 1.0, 0.0, False, (5.0, None), 1),
    ]
    for bad, message in [
        ("name=x,speed=0", "speed must be > 0"),
        ("name=x,stock-out-window=9:3", "stock-out-window"),
        ("name=x,stocked-out=perhaps", "bad value 'perhaps' for stocked-out"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_pool_option(bad)


# -- the autoscaler's decisions (pure) -------------------------------------------------------------


def pending(name: str, selector: dict[str, str]) -> dict[str, Any]:
    pod = gpu_pod(name, selector)
    pod["metadata"].update(namespace="default", uid=f"uid-{name}")
    pod["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    }
    return pod


def views(**state: tuple[int, bool, bool]) -> list[PoolView]:
    """pool → (live nodes, stocked out, in backoff)."""
    return [PoolView(p, *state.get(p.name, (p.nodes, False, False))) for p in POOLS]


def test_scan_decisions() -> None:
    v100 = pending("v", {POOL: "v100"})
    t4 = pending("t", {ACCELERATOR: "nvidia-tesla-t4"})
    cpu_only = pending("c", {})
    cpu_only["spec"].update(tolerations=[])
    cpu_only["spec"]["containers"][0]["resources"] = {}
    selector = "node(s) didn't match Pod's node affinity/selector"
    untolerated = "node(s) had untolerated taint {nvidia.com/gpu: present}"
    cases = [
        # the stocked-out V100 pool is below its size: its scale-up is tried, and fails
        ([v100], views(v100=(0, True, False)), False, ScanResult(failed_pool=POOLS[4], failed_pods=[v100])),
        # then it is in backoff: NotTriggerScaleUp, every other pool counted with its reason
        (
            [v100],
            views(v100=(0, True, True)),
            False,
            ScanResult(not_triggered=[(v100, f"pod didn't trigger scale-up: 1 {BACKOFF_REASON}, 5 {selector}")]),
        ),
        # T4 in zone a out and in backoff, zone b full: nothing can be added for it
        (
            [t4],
            views(**{"t4-a": (0, True, True)}),
            False,
            ScanResult(
                not_triggered=[
                    (t4, f"pod didn't trigger scale-up: 1 {BACKOFF_REASON}, 1 {MAX_SIZE_REASON}, 4 {selector}")
                ]
            ),
        ),
        # zone b is below its size and in stock: its replacement is coming, nothing is said
        ([t4], views(**{"t4-a": (0, True, True), "t4-b": (0, False, False)}), False, ScanResult()),
        # the pod fits a live node: the scheduler will place it
        ([t4], views(**{"t4-a": (0, True, False)}), True, ScanResult()),
        # a CPU pod when the CPU pool is full: the GPU pools' taint, the CPU pool's size
        (
            [cpu_only],
            views(),
            False,
            ScanResult(
                not_triggered=[(cpu_only, f"pod didn't trigger scale-up: 1 {MAX_SIZE_REASON}, 5 {untolerated}")]
            ),
        ),
    ]
    for pods, pools, fits, expected in cases:
        assert scan(pods, pools, lambda _pod, fits=fits: fits) == expected  # type: ignore[misc]


def test_event_messages() -> None:
    assert not_triggered_message([[MAX_SIZE_REASON], [MAX_SIZE_REASON], [BACKOFF_REASON]]) == (
        "pod didn't trigger scale-up: 1 in backoff after failed scale-up, 2 max node group size reached"
    )
    assert failed_message(["us-central1-b"]) == (
        "Node scale up in zones us-central1-b associated with this pod failed: GCE out of resources. "
        "Pod is at risk of not being scheduled."
    )
    group = instance_group_name(POOLS[4])
    assert group.startswith("gke-ttj-local-v100-")
    assert group.endswith("-grp")
    assert triggered_message(PoolView(POOLS[4], 0, True, False)) == (
        "pod triggered scale-up: [{https://www.googleapis.com/compute/v1/projects/ttj-local/zones/us-central1-c/"
        f"instanceGroups/{group} 0->1 (max: 1)}}]"
    )


# -- on a running cluster --------------------------------------------------------------------------


def test_gpu_nodes_are_labelled_as_gke_and_the_speed_reaches_the_pods(gpu_cluster: NodesCluster) -> None:
    c = gpu_cluster
    by_pool = wait_for(lambda: nodes_by_pool(c, without="a100"), timeout=60, what="a100's scheduled stock-out")
    assert sorted(by_pool) == ["cpu", "l4", "t4-a", "t4-b"]  # v100 starts stocked out, a100 is out since 1 s
    assert [
        (
            pool,
            n["metadata"]["labels"].get(ACCELERATOR),
            n["metadata"]["labels"][ZONE],
            n["metadata"]["labels"].get("cloud.google.com/gke-spot"),
            n["status"]["capacity"].get("nvidia.com/gpu"),
            n["metadata"]["annotations"]["ttj.local/simulated-speed"],
        )
        for pool, n in sorted(by_pool.items())
    ] == [
        ("cpu", None, "us-central1-a", None, None, "1"),
        ("l4", "nvidia-l4", "us-central1-a", "true", "1", "2"),
        ("t4-a", "nvidia-tesla-t4", "us-central1-a", "true", "1", "1"),
        ("t4-b", "nvidia-tesla-t4", "us-central1-b", "true", "1", "1"),
    ]
    show = (
        "import os, time; print('speed=' + os.environ['TTJ_LOCAL_SIMULATED_SPEED'] + ' step='"
        " + os.environ['TTJ_LOCAL_SIMULATED_STEP_SECONDS'], flush=True); time.sleep(600)"
    )
    create(c, gpu_pod("on-l4", {POOL: "l4"}, show))
    assert wait_for(lambda: printed(c, "on-l4"), timeout=60, what="on-l4 printed") == "speed=2 step=0.2\n"
    c.kube.delete("/api/v1/namespaces/default/pods/on-l4")


def test_a_stocked_out_pool_answers_with_the_autoscaler_events_and_recovers(gpu_cluster: NodesCluster) -> None:
    c = gpu_cluster
    create(c, gpu_pod("needs-v100", {POOL: "v100"}))
    failed = wait_for(lambda: events(c, "needs-v100", "FailedScaleUp"), timeout=60, what="FailedScaleUp")
    assert [(e["type"], e["source"]["component"], e["message"]) for e in failed] == [
        (
            "Warning",
            "cluster-autoscaler",
            "Node scale up in zones us-central1-c associated with this pod failed: GCE out of resources. "
            "Pod is at risk of not being scheduled.",
        )
    ]
    assert [e["message"].split(" [")[0] for e in events(c, "needs-v100", "TriggeredScaleUp")] == [
        "pod triggered scale-up:"
    ]
    backoff = wait_for(lambda: events(c, "needs-v100", "NotTriggerScaleUp"), timeout=60, what="NotTriggerScaleUp")
    assert [(e["type"], e["source"]["component"], e["message"]) for e in backoff] == [
        (
            "Normal",
            "cluster-autoscaler",
            "pod didn't trigger scale-up: 1 in backoff after failed scale-up, "
            "5 node(s) didn't match Pod's node affinity/selector",
        )
    ]
    assert node_of(c, "needs-v100") is None
    answer = ControlClient.from_kubeconfig(c.kubeconfig).restock("v100")
    assert answer["stockedOut"] is False
    assert len(answer["nodes"]) == 1
    assert (
        wait_for(lambda: node_of(c, "needs-v100"), timeout=60, what="scheduled after the restock") == answer["nodes"][0]
    )
    c.kube.delete("/api/v1/namespaces/default/pods/needs-v100")


def test_t4_in_zone_b_while_zone_a_is_out(gpu_cluster: NodesCluster) -> None:
    c = gpu_cluster
    [zone_a_node] = c.fleet.nodes_of("t4-a")
    args = local_cluster_options("--kubeconfig", c.kubeconfig, "--stock-out", "t4-a")
    assert nodes_cli.run_command(args) == 0
    wait_for(lambda: not c.kube.get(f"/api/v1/nodes/{zone_a_node}"), timeout=60, what="zone a's node preempted")
    status = ControlClient.from_kubeconfig(c.kubeconfig).status()["pools"]
    assert (status["t4-a"]["stockedOut"], status["t4-a"]["nodes"], status["t4-b"]["stockedOut"]) == (True, [], False)
    # no replacement joins while the pool is out (its restore-after passes)
    create(c, gpu_pod("t4-anywhere", {ACCELERATOR: "nvidia-tesla-t4"}))
    create(c, gpu_pod("t4-zone-a", {ACCELERATOR: "nvidia-tesla-t4", ZONE: "us-central1-a"}))
    assert wait_for(lambda: node_of(c, "t4-anywhere"), timeout=60, what="T4 in zone b") == c.fleet.nodes_of("t4-b")[0]
    wait_for(lambda: events(c, "t4-zone-a", "FailedScaleUp"), timeout=60, what="FailedScaleUp for zone a")
    assert c.fleet.nodes_of("t4-a") == []
    assert node_of(c, "t4-zone-a") is None
    restock = local_cluster_options("--kubeconfig", c.kubeconfig, "--restock", "t4-a")
    assert nodes_cli.run_command(restock) == 0
    assert wait_for(lambda: node_of(c, "t4-zone-a"), timeout=60, what="zone a back") == c.fleet.nodes_of("t4-a")[0]
    for name in ("t4-anywhere", "t4-zone-a"):
        c.kube.delete(f"/api/v1/namespaces/default/pods/{name}")


def test_a_scheduled_stock_out_lasts_until_restocked(gpu_cluster: NodesCluster) -> None:
    c = gpu_cluster
    wait_for(lambda: c.fleet.registry.stocked_out("a100"), timeout=60, what="the a100 pool's scheduled stock-out")
    [record] = [r for r in c.fleet.preemptions if r.pool == "a100"]
    assert record.cause == "stock-out of pool a100"
    with pytest.raises(ValueError, match="pool a100 is stocked out: GCE out of resources in zone us-central1-f"):
        c.fleet.restore_pool("a100")
    [node] = c.fleet.restock("a100")["nodes"]
    assert c.fleet.nodes_of("a100") == [node]
    assert c.kube.get(f"/api/v1/nodes/{node}")["metadata"]["labels"][ACCELERATOR] == "nvidia-tesla-a100"


def test_a_stock_out_that_keeps_the_running_nodes(gpu_cluster: NodesCluster) -> None:
    c = gpu_cluster
    control = ControlClient.from_kubeconfig(c.kubeconfig)
    [node] = c.fleet.nodes_of("l4")
    assert control.stock_out("l4", keep_nodes=True) == {"pool": "l4", "stockedOut": True, "preempted": []}
    assert c.fleet.nodes_of("l4") == [node]
    with pytest.raises(RuntimeError, match="pool l4 is stocked out"):
        control.restore_pool("l4", nodes=1)
    c.fleet.preempt_node(node, wait=True)
    assert c.fleet.nodes_of("l4") == []
    assert control.restock("l4")["nodes"] == c.fleet.nodes_of("l4")
    assert control.status()["pools"]["l4"]["stockedOut"] is False
