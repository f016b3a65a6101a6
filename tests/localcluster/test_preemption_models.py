"""Preemptions drawn from the lifetime model and scripted ones, with simulated pods (no processes)."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from typing import Any

import pytest

from ttj.kubeapi import KubeClient
from ttj.preemption.lifetimes import LifetimeDistribution
from ttj_contract import NODE_POOL_LABEL
from ttj_localcluster.cluster import LocalCluster
from ttj_localcluster.nodes.control import ControlClient
from ttj_localcluster.nodes.deployments import DeploymentController
from ttj_localcluster.nodes.fleet import NodeFleet
from ttj_localcluster.nodes.podstate import SHUTDOWN_MESSAGE
from ttj_localcluster.nodes.pools import NodePool, spot_t4_pool
from ttj_localcluster.nodes.registry import NodeState
from ttj_localcluster.nodes.scheduler import Scheduler

from .conftest import NodesCluster, wait_for

DAY_IN_3_SECONDS = 24 * 3600 / 3.0

POOLS = [
    NodePool(name="cpu", nodes=2, cpu="64", memory="256Gi"),
    NodePool(
        name="k80",
        nodes=3,
        provisioning="preemptible",
        accelerator="nvidia-tesla-k80",
        gpus=1,
        preemption="lifetime",
        seed=11,
        time_scale=DAY_IN_3_SECONDS,
        grace=0.2,
        restore_after=None,
    ),
    spot_t4_pool(
        name="scripted",
        nodes=1,
        cpu="4",
        memory="15Gi",
        machine_type="n1-standard-4",
        preemption="scripted",
        preempt_at=(0.5,),
        grace=0.2,
        restore_after=0.2,
    ),
    NodePool(name="spare", nodes=1, restore_after=None),
    NodePool(name="slow-stop", nodes=1, grace=15.0, stop_seconds=1.5, restore_after=None),
    NodePool(name="stop-capped", nodes=1, grace=0.2, stop_seconds=600.0, restore_after=None),
]


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodesCluster]:
    fleet = NodeFleet(POOLS, run_pods=False, state_dir=tmp_path_factory.mktemp("sim-state"))
    with LocalCluster(addons=[fleet, Scheduler(seed=2), DeploymentController()]) as cluster:
        kube = KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        yield NodesCluster(cluster, fleet, kube)
        kube.close()


def test_preemptible_nodes_die_at_drawn_lifetimes(simulated: NodesCluster) -> None:
    # Preemptible VMs live 24 h at most: with a day squeezed into 3 s, every K80 node goes.
    wait_for(
        lambda: len([p for p in simulated.fleet.preemptions if p.pool == "k80" and p.done.is_set()]) == 3, timeout=30
    )
    records = [p for p in simulated.fleet.preemptions if p.pool == "k80"]
    assert all("lifetime" in r.cause for r in records)
    assert simulated.fleet.nodes_of("k80") == []
    assert all(simulated.kube.get(f"/api/v1/nodes/{r.node}") is None for r in records)
    # The same seed draws the same lifetimes.
    dist = LifetimeDistribution.for_accelerator("nvidia-tesla-k80")
    rng_a, rng_b = random.Random(11), random.Random(11)
    assert [dist.sample(rng_a) for _ in range(3)] == [dist.sample(rng_b) for _ in range(3)]


def test_scripted_preemption_and_pool_restore(simulated: NodesCluster) -> None:
    record = wait_for(lambda: next((p for p in simulated.fleet.preemptions if p.pool == "scripted"), None), timeout=30)
    assert record.cause == "scripted"
    record.done.wait(30)
    replacement = wait_for(lambda: simulated.fleet.nodes_of("scripted"), timeout=30, what="replacement node")
    assert replacement[0] != record.node


def test_simulated_pods_run_at_once_and_fail_on_preemption(simulated: NodesCluster) -> None:
    c = simulated
    replicas = 30
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "many"},
        "spec": {
            "replicas": replicas,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"app": "many"}},
            "template": {
                "metadata": {"labels": {"app": "many"}},
                "spec": {
                    "nodeSelector": {"cloud.google.com/gke-nodepool": "cpu"},
                    "containers": [{"name": "c", "image": "anything", "resources": {"requests": {"cpu": "1"}}}],
                },
            },
        },
    }
    c.kube.request("POST", "/apis/apps/v1/namespaces/default/deployments", body=deployment)
    wait_for(
        lambda: (
            (c.kube.get("/apis/apps/v1/namespaces/default/deployments/many") or {})
            .get("status", {})
            .get("availableReplicas")
            == replicas
        ),
        timeout=60,
        what="all replicas available",
    )
    pods = c.kube.request("GET", "/api/v1/namespaces/default/pods", query=[("labelSelector", "app=many")])["items"]
    assert len({p["status"]["podIP"] for p in pods}) == replicas
    node = pods[0]["spec"]["nodeName"]
    on_node = [p["metadata"]["name"] for p in pods if p["spec"]["nodeName"] == node]
    # Even an on-demand node can be preempted on demand (a maintenance event, say).
    c.fleet.preempt_node(node, wait=True)
    for name in on_node:
        pod = c.pod(name)
        assert pod is not None
        assert pod["status"]["phase"] == "Failed"
        assert pod["status"]["message"] == SHUTDOWN_MESSAGE
    # The ReplicaSet replaces the failed pods on what is left.
    wait_for(
        lambda: (
            len(
                [
                    p
                    for p in c.kube.request(
                        "GET", "/api/v1/namespaces/default/pods", query=[("labelSelector", "app=many")]
                    )["items"]
                    if p["status"].get("phase") == "Running"
                ]
            )
            == replicas
        ),
        timeout=60,
        what="replacements running",
    )


def _bare_pod(name: str, pool: str) -> dict[str, Any]:
    spec = {"nodeSelector": {NODE_POOL_LABEL: pool}, "containers": [{"name": "c", "image": "anything"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def test_simulated_containers_take_their_pools_stop_seconds_within_the_grace(simulated: NodesCluster) -> None:
    """A trainer writes its checkpoint after SIGTERM: the pool's stop_seconds, capped by the grace period."""
    c = simulated
    for name, pool in (("slow", "slow-stop"), ("capped", "stop-capped")):
        c.kube.request("POST", "/api/v1/namespaces/default/pods", body=_bare_pod(name, pool))
        wait_for(lambda n=name: (c.pod(n) or {}).get("status", {}).get("phase") == "Running", what=f"{name} running")
    started = time.monotonic()
    slow = c.fleet.preempt_node(c.fleet.nodes_of("slow-stop")[0], wait=True)
    assert slow.done.is_set()
    assert time.monotonic() - started >= 1.5
    capped = c.fleet.preempt_node(c.fleet.nodes_of("stop-capped")[0], wait=True)
    assert capped.done.is_set()  # not 600 s: SIGKILL at the end of the grace period
    for name in ("slow", "capped"):
        status = (c.pod(name) or {}).get("status", {})
        disruption = [cond for cond in status["conditions"] if cond["type"] == "DisruptionTarget"]
        assert (status["phase"], status["message"], len(disruption)) == ("Failed", SHUTDOWN_MESSAGE, 1)


def test_a_lost_node_goes_silent_until_the_pool_is_restored(simulated: NodesCluster) -> None:
    c = simulated
    node = c.fleet.nodes_of("spare")[0]
    c.kube.request("POST", "/api/v1/namespaces/default/pods", body=_bare_pod("stranded", "spare"))
    wait_for(lambda: (c.pod("stranded") or {}).get("status", {}).get("phase") == "Running", what="stranded running")
    control = ControlClient.from_kubeconfig(c.kubeconfig)
    assert control.lose_node(node) == {"node": node}
    assert c.fleet.registry.state_of(node) is NodeState.UNREACHABLE
    assert c.fleet.nodes_of("spare") == []
    lost = c.kube.get(f"/api/v1/nodes/{node}")
    assert lost is not None  # left to others (the operator, a person) to delete
    ready = next(cond for cond in lost["status"]["conditions"] if cond["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("Unknown", "NodeStatusUnknown")
    taints = {(t["key"], t["effect"]) for t in lost["spec"]["taints"]}
    assert {("node.kubernetes.io/unreachable", "NoSchedule"), ("node.kubernetes.io/unreachable", "NoExecute")} <= taints
    pod = c.pod("stranded")
    assert pod is not None
    assert pod["status"]["phase"] == "Running"  # the last status its kubelet wrote
    with pytest.raises(RuntimeError, match="no live node"):
        control.preempt_node(node)
    with pytest.raises(RuntimeError, match="no live node"):
        control.lose_node(node)
    restored = control.restore_pool("spare")["nodes"]
    assert len(restored) == 1
    assert restored != [node]
    assert c.fleet.nodes_of("spare") == restored
    assert control.status()["pools"]["spare"]["nodes"] == restored


def test_controllers_converge_through_api_faults(simulated: NodesCluster) -> None:
    """Failed writes (409/500/503) of bindings and status, and watches that drop: the controllers retry and
    relist, as client-go based controllers do, and still bring a Deployment up. A binding refused with 409
    is retried too, as kube-scheduler does, until the watch shows the pod bound."""
    from ttj_localcluster.apiserver.faults import FaultRule

    c = simulated
    faults = c.cluster.faults
    faults.configure(
        seed=5,
        rules=[
            # the first bindings are refused as a conflict, though no pod is bound yet
            FaultRule(probability=1.0, codes=[409], verbs=["create"], resources=["pods/binding"], count=3),
            FaultRule(
                probability=0.3,
                codes=[500, 503],
                verbs=["create", "patch"],
                resources=["pods/status", "pods/binding", "replicasets/status", "deployments/status"],
            ),
        ],
        watch_drop_probability=0.1,
    )
    try:
        replicas = 12
        deployment = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "faulty"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "faulty"}},
                "template": {
                    "metadata": {"labels": {"app": "faulty"}},
                    "spec": {
                        "nodeSelector": {"cloud.google.com/gke-nodepool": "cpu"},
                        "containers": [{"name": "c", "image": "anything"}],
                    },
                },
            },
        }
        c.kube.request("POST", "/apis/apps/v1/namespaces/default/deployments", body=deployment)
        wait_for(
            lambda: (
                (c.kube.get("/apis/apps/v1/namespaces/default/deployments/faulty") or {})
                .get("status", {})
                .get("availableReplicas")
                == replicas
            ),
            timeout=90,
            what="all replicas available despite faults",
        )
        assert faults.rules[0].injected == 3
        assert faults.rules[1].injected > 0
    finally:
        faults.clear()
