"""Pools of a GKE custom compute class, and the cluster autoscaler's drain of a node the class's active migration
leaves: the ToBeDeletedByClusterAutoscaler taint, each pod evicted through the Eviction API, the node deleted
and not replaced. Everything is awaited (generous deadlines), nothing is timed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from ttj.kubeapi import KubeClient
from ttj_localcluster.cluster import LocalCluster
from ttj_localcluster.nodes import cli as nodes_cli
from ttj_localcluster.nodes.control import ControlClient
from ttj_localcluster.nodes.fleet import NodeFleet
from ttj_localcluster.nodes.pools import NodePool, node_object, parse_pool_option
from ttj_localcluster.nodes.scheduler import Scheduler

from .conftest import NodesCluster, local_cluster_options, wait_for

CLASS = "flex"
CLASS_LABEL = "cloud.google.com/compute-class"
HOLD = "ttj.test/hold"


def class_pool(name: str, accelerator: str, provisioning: str) -> NodePool:
    return NodePool(
        name=name,
        nodes=1,
        provisioning=provisioning,
        accelerator=accelerator,
        gpus=1,
        machine_type="g2-standard-4" if accelerator == "nvidia-l4" else "n1-standard-4",
        grace=1.0,
        restore_after=0.5,
        compute_class=CLASS,
    )


POOLS = [
    NodePool(name="cpu", nodes=1),
    class_pool("flex-l4", "nvidia-l4", "spot"),
    class_pool("flex-t4", "nvidia-tesla-t4", "on-demand"),
]


@pytest.fixture(scope="module")
def class_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodesCluster]:
    fleet = NodeFleet(POOLS, run_pods=True, state_dir=tmp_path_factory.mktemp("compute-class"), pod_network=False)
    with LocalCluster(addons=[fleet, Scheduler(seed=1)]) as cluster:
        kube = KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        yield NodesCluster(cluster, fleet, kube)
        kube.close()


def class_pod(name: str, selector: dict[str, str] | None = None) -> dict[str, Any]:
    """A worker of the class, as ttj builds it: the class's selector and the toleration of its taint."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "finalizers": [HOLD]},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "python:3.11",
                    "command": ["python", "-c", "import time; time.sleep(600)"],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
            "nodeSelector": selector or {CLASS_LABEL: CLASS},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": CLASS_LABEL, "operator": "Equal", "value": CLASS, "effect": "NoSchedule"},
            ],
            "terminationGracePeriodSeconds": 2,
        },
    }


def running_on(c: NodesCluster, name: str) -> str | None:
    pod = c.pod(name) or {}
    return (pod.get("spec") or {}).get("nodeName") if (pod.get("status") or {}).get("phase") == "Running" else None


def test_a_class_pool_is_labelled_and_tainted_with_its_class() -> None:
    pool = parse_pool_option("name=flex,accelerator=nvidia-l4,provisioning=spot,compute-class=gpu-fallback")
    node = node_object(pool, "n", "127.0.0.1")
    assert node["metadata"]["labels"][CLASS_LABEL] == "gpu-fallback"
    assert node["spec"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        {"key": CLASS_LABEL, "value": "gpu-fallback", "effect": "NoSchedule"},
    ]
    with pytest.raises(ValueError, match="compute-class must be a label value"):
        parse_pool_option("name=x,compute-class=not a class")


def test_a_migration_drains_the_node_the_autoscalers_way_and_the_pool_does_not_replace_it(
    class_cluster: NodesCluster,
) -> None:
    c = class_cluster
    c.kube.create("/api/v1/namespaces/default/pods", class_pod("w"))
    node = wait_for(lambda: running_on(c, "w"), 60, "the class's worker to run")
    pool = c.fleet.registry.pool_of(node)
    assert pool in ("flex-l4", "flex-t4")

    tainted = threading.Event()

    def watch_taint() -> None:
        while not tainted.is_set():
            current = c.kube.get(f"/api/v1/nodes/{node}") or {}
            keys = {t.get("key") for t in (current.get("spec") or {}).get("taints") or []}
            if "ToBeDeletedByClusterAutoscaler" in keys or not current:
                tainted.set()

    watcher = threading.Thread(target=watch_taint, daemon=True)
    watcher.start()
    record = ControlClient.from_kubeconfig(c.kubeconfig).migrate_node(node, wait=True)
    watcher.join(5)
    assert (record["node"], record["pool"], record["pods"], record["refused"], record["done"]) == (
        node,
        pool,
        ["default/w"],
        [],
        True,
    )
    assert tainted.is_set()
    assert c.kube.get(f"/api/v1/nodes/{node}") is None, "the drained node is deleted"
    evicted = c.pod("w")
    assert evicted is not None  # held by its finalizer, as ttj's workers are
    assert evicted["metadata"].get("deletionTimestamp")
    disruption = [x for x in evicted["status"]["conditions"] if x["type"] == "DisruptionTarget"]
    assert [(x["status"], x["reason"]) for x in disruption] == [("True", "EvictionByEvictionAPI")]
    listed = (c.kube.get("/api/v1/namespaces/default/events") or {}).get("items") or []
    assert [e["source"]["component"] for e in listed if e["reason"] == "ScaleDown"] == ["cluster-autoscaler"]
    described = c.fleet.describe()["pools"][pool]
    assert (described["migrated"], described["preempted"], described["nodes"]) == (1, 0, [])
    c.kube.merge_patch("/api/v1/namespaces/default/pods/w", {"metadata": {"finalizers": None}})

    # the worker's replacement lands on the class's other pool
    c.kube.create("/api/v1/namespaces/default/pods", class_pod("w2"))
    other = wait_for(lambda: running_on(c, "w2"), 60, "the replacement to run")
    assert c.fleet.registry.pool_of(other) != pool


def test_a_pod_without_the_classs_toleration_stays_off_its_nodes(class_cluster: NodesCluster) -> None:
    c = class_cluster
    pod = class_pod("untolerated")
    pod["spec"]["tolerations"] = pod["spec"]["tolerations"][:1]
    pod["spec"]["containers"][0].pop("resources")
    pod["metadata"]["finalizers"] = []
    c.kube.create("/api/v1/namespaces/default/pods", pod)

    def unschedulable() -> str | None:
        conditions = ((c.pod("untolerated") or {}).get("status") or {}).get("conditions") or []
        return next((x.get("message") for x in conditions if x.get("reason") == "Unschedulable"), None)

    message = wait_for(unschedulable, 30, "the scheduler to refuse the pod")
    assert "cloud.google.com/compute-class" in message


def test_the_migrate_node_option_is_a_control_command() -> None:
    args = local_cluster_options("--migrate-node", "gke-x", "--wait")
    assert (args.migrate_node, args.wait) == ("gke-x", True)
    assert "compute-class=NAME" in nodes_cli.POOL_HELP
