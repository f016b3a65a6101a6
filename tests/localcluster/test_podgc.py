"""Pods deleted with a grace period around their node's end are not left ``Terminating``: the pod garbage
collector (kube-controller-manager's PodGC) removes those deleted after their node went away (what one pass
decides, and the collector against the API), and the kubelet removes one deleted while its node was shutting
it down, once its shutdown ends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ttj.kubeapi import KubeClient
from ttj_localcluster.cluster import LocalCluster
from ttj_localcluster.nodes import cli as nodes_cli
from ttj_localcluster.nodes.fleet import NodeFleet
from ttj_localcluster.nodes.podgc import PodGarbageCollector, Sweep, orphans, plan_sweep
from ttj_localcluster.nodes.pools import NodePool, node_object
from ttj_localcluster.nodes.scheduler import Scheduler

from .conftest import local_cluster_options, wait_for

NOW = 1000.0


def pod(
    name: str, node: str = "", *, phase: str = "Running", deleting: bool = False, created: str = "2026-01-01T00:00:00Z"
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}, "status": {"phase": phase}}


SWEEPS: list[tuple[str, list[dict[str, Any]], dict[str, float], int, Sweep]] = [
    (
        "a pod on a missing node: its node enters quarantine",
        [pod("a", "gone"), pod("b", "here")],
        {},
        12500,
        Sweep(terminated=(), unscheduled_terminating=(), check_nodes=(), quarantined={"gone": NOW}),
    ),
    (
        "still missing, quarantine not over: it stays, with when it was first missed",
        [pod("a", "gone")],
        {"gone": NOW - 39},
        12500,
        Sweep(terminated=(), unscheduled_terminating=(), check_nodes=(), quarantined={"gone": NOW - 39}),
    ),
    (
        "quarantine over: the node is to be looked up, and leaves the quarantine",
        [pod("a", "gone"), pod("b", "gone", deleting=True)],
        {"gone": NOW - 40},
        12500,
        Sweep(terminated=(), unscheduled_terminating=(), check_nodes=("gone",), quarantined={}),
    ),
    (
        "the node showed up (the informer lagged): out of quarantine",
        [pod("a", "here")],
        {"here": NOW - 10},
        12500,
        Sweep(terminated=(), unscheduled_terminating=(), check_nodes=(), quarantined={}),
    ),
    (
        "no pod is bound there any more: out of quarantine",
        [pod("a", "here")],
        {"gone": NOW - 10},
        12500,
        Sweep(terminated=(), unscheduled_terminating=(), check_nodes=(), quarantined={}),
    ),
    (
        "terminating and never scheduled: deleted; pending ones and terminating bound ones are not",
        [pod("u", deleting=True, phase="Pending"), pod("p", phase="Pending"), pod("t", "here", deleting=True)],
        {},
        12500,
        Sweep(terminated=(), unscheduled_terminating=("ns/u",), check_nodes=(), quarantined={}),
    ),
    (
        "terminated pods beyond the threshold: the oldest, by creation time then name",
        [
            pod("new", "here", phase="Failed", created="2026-01-03T00:00:00Z"),
            pod("old-b", "here", phase="Succeeded", created="2026-01-01T00:00:00Z"),
            pod("old-a", "here", phase="Failed", created="2026-01-01T00:00:00Z"),
            pod("running", "here", created="2025-01-01T00:00:00Z"),
        ],
        {},
        1,
        Sweep(terminated=("ns/old-a", "ns/old-b"), unscheduled_terminating=(), check_nodes=(), quarantined={}),
    ),
    (
        "a threshold of 0 turns the terminated-pod GC off",
        [pod("done", "here", phase="Failed")],
        {},
        0,
        Sweep(terminated=(), unscheduled_terminating=(), check_nodes=(), quarantined={}),
    ),
]


@pytest.mark.parametrize(
    ("pods", "quarantined", "threshold", "expected"), [s[1:] for s in SWEEPS], ids=[s[0] for s in SWEEPS]
)
def test_one_pass_decides(
    pods: list[dict[str, Any]], quarantined: dict[str, float], threshold: int, expected: Sweep
) -> None:
    sweep = plan_sweep(pods, ["here"], quarantined, NOW, quarantine=40.0, terminated_threshold=threshold)
    assert sweep == expected


def test_orphans_are_the_pods_bound_to_confirmed_deleted_nodes() -> None:
    pods = [pod("a", "gone"), pod("b", "here"), pod("c", "gone", deleting=True), pod("d")]
    assert orphans(pods, ["gone"]) == ("ns/a", "ns/c")
    assert orphans(pods, []) == ()


def test_the_pod_gc_runs_wherever_the_deployment_controllers_do() -> None:
    def kinds(*argv: str) -> list[str]:
        return [type(addon).__name__ for addon in nodes_cli.build_addons(local_cluster_options(*argv))]

    assert {
        "local cluster": kinds(),
        "nodes only": kinds("--nodes-only"),
        "nodes only, with controllers": kinds("--nodes-only", "--with-controllers"),
    } == {
        "local cluster": ["NodeFleet", "Scheduler", "DeploymentController", "PodGarbageCollector"],
        "nodes only": ["NodeFleet"],
        "nodes only, with controllers": ["NodeFleet", "DeploymentController", "PodGarbageCollector"],
    }


@pytest.fixture
def api_only() -> Iterator[LocalCluster]:
    """An API server alone: no kubelet finishes graceful deletions, no collector runs unless a test starts it."""
    with LocalCluster() as cluster:
        yield cluster


def _bound_pod(kube: KubeClient, name: str, node: str) -> None:
    body = {
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
    }
    kube.create("/api/v1/namespaces/default/pods", body)
    kube.merge_patch(f"/api/v1/namespaces/default/pods/{name}/status", {"status": {"phase": "Running"}})


def test_a_pod_deleted_with_grace_after_its_node_is_gone_is_force_deleted(api_only: LocalCluster) -> None:
    api = KubeClient.from_kubeconfig(api_only.kubeconfig_path)
    pool = NodePool(name="p", nodes=1)
    for node in ("doomed", "alive"):
        api.create("/api/v1/nodes", {k: v for k, v in node_object(pool, node, "127.0.0.1").items() if k != "status"})
    _bound_pod(api, "orphan", "doomed")
    _bound_pod(api, "kept", "alive")
    api.delete("/api/v1/nodes/doomed")
    for name in ("orphan", "kept"):
        api.delete(f"/api/v1/namespaces/default/pods/{name}", grace_seconds=30)
    # With no kubelet and no collector, both stay Terminating: graceful deletion waits for the node.
    terminating = {name: (api.get(f"/api/v1/namespaces/default/pods/{name}") or {}) for name in ("orphan", "kept")}
    assert {name: bool(p["metadata"].get("deletionTimestamp")) for name, p in terminating.items()} == {
        "orphan": True,
        "kept": True,
    }

    collector = PodGarbageCollector(period=3600, quarantine=0)
    collector.start(api_only.kubeconfig_path)
    try:
        # Its first pass (at start, over what its informers listed) confirms the node is gone with a GET.
        wait_for(lambda: api.get("/api/v1/namespaces/default/pods/orphan") is None, what="the orphan to be deleted")
        assert collector.collect() == []  # the pod on a live node is its kubelet's business, never the collector's
        assert api.get("/api/v1/namespaces/default/pods/kept") is not None
    finally:
        collector.stop()
        api.close()


#: Ignores SIGTERM until the file $RELEASE exists, then exits: its shutdown lasts exactly as long as the test wants.
ENDS_WHEN_RELEASED = (
    "import os, signal, sys, time\n"
    "def on_term(*_):\n"
    "    while not os.path.exists(os.environ['RELEASE']):\n"
    "        time.sleep(0.05)\n"
    "    sys.exit(143)\n"
    "signal.signal(signal.SIGTERM, on_term)\n"
    "print('running', flush=True)\n"
    "while True:\n"
    "    time.sleep(1)\n"
)


def test_a_pod_deleted_while_its_node_shuts_down_is_removed_when_its_shutdown_ends(tmp_path: Path) -> None:
    release = tmp_path / "release"
    pool = NodePool(name="spot", nodes=1, provisioning="spot", grace=600.0, restore_after=None)
    fleet = NodeFleet([pool], run_pods=True, state_dir=tmp_path / "state", pod_network=False)
    path = "/api/v1/namespaces/default/pods/slow"
    with LocalCluster(addons=[fleet, Scheduler(seed=1)]) as cluster:
        kube = KubeClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            container = {
                "name": "main",
                "image": "python:3.11",
                "command": ["python", "-c", ENDS_WHEN_RELEASED],
                "env": [{"name": "RELEASE", "value": str(release)}],
            }
            spec = {"containers": [container], "restartPolicy": "Never", "terminationGracePeriodSeconds": 600}
            kube.create("/api/v1/namespaces/default/pods", {"metadata": {"name": "slow"}, "spec": spec})
            wait_for(lambda: ((kube.get(path) or {}).get("status") or {}).get("phase") == "Running", what="running")
            log = fleet.log_file("default", "slow")
            wait_for(lambda: log is not None and "running" in log.read_text(), what="the process started")

            fleet.preempt_pod("default", "slow")

            def shutting_down() -> bool:
                conditions = ((kube.get(path) or {}).get("status") or {}).get("conditions") or []
                return any(c["type"] == "DisruptionTarget" for c in conditions)

            wait_for(shutting_down, what="the kubelet shutting the pod down")
            kube.delete(path)  # with its grace period, while the node shuts it down
            deleting = kube.get(path)
            assert deleting is not None
            assert deleting["metadata"]["deletionTimestamp"]
            release.touch()  # its shutdown ends now, after the deletion

            wait_for(lambda: kube.get(path) is None, what="the pod removed by its kubelet")
        finally:
            release.touch()
            kube.close()
