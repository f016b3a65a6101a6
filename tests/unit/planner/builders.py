"""Small builders of jobs, pods, nodes and leases for planner table tests."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from ttj.planner.world import World
from ttj_contract import format_micro_time, format_time

T0 = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)


def job(name: str = "mnist", **spec: Any) -> dict[str, Any]:
    workers = spec.pop("workers", {})
    return {
        "apiVersion": "transient.training/v1alpha1",
        "kind": "TransientTrainingJob",
        "metadata": {"name": name, "namespace": "ns", "uid": "job-uid", "generation": 1},
        "spec": {
            "trainSteps": 1000,
            "model": "small-cnn",
            "dataset": "synthetic",
            "checkpoint": {"uri": "/ckpt"},
            "workers": {"replicas": 3, "minReplicas": 2, "maxReplicas": 4, **workers},
            **spec,
        },
    }


def node(
    name: str,
    kind: str = "spot",
    age: timedelta = timedelta(hours=10),
    *,
    ready: bool = True,
    now: datetime = T0,
    ready_since: datetime | None = None,
) -> dict[str, Any]:
    labels = {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
    if kind == "spot":
        labels["cloud.google.com/gke-spot"] = "true"
    elif kind == "preemptible":
        labels["cloud.google.com/gke-preemptible"] = "true"
    return {
        "metadata": {"name": name, "labels": labels, "creationTimestamp": format_time(now - age)},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "Unknown",
                    "lastTransitionTime": format_time(ready_since or now - age),
                }
            ]
        },
    }


def run_pod(world: World, name: str, node_name: str, now: datetime = T0) -> None:
    """The scheduler and kubelet: bind and start a pod."""
    pod = world.pod(name)
    assert pod is not None, name
    pod["spec"]["nodeName"] = node_name
    pod["status"] = {
        "phase": "Running",
        "startTime": format_time(now),
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": format_time(now)}],
    }


def terminate(
    world: World,
    name: str,
    exit_code: int,
    *,
    reason: str = "Error",
    message: str = "",
    pod_reason: str | None = None,
    now: datetime = T0,
) -> None:
    pod = world.pod(name)
    assert pod is not None
    status = pod["status"]
    status["phase"] = "Succeeded" if exit_code == 0 else "Failed"
    if pod_reason:
        status["reason"] = pod_reason
    status["containerStatuses"] = [
        {
            "name": "trainer",
            "state": {
                "terminated": {
                    "exitCode": exit_code,
                    "reason": reason,
                    "message": message,
                    "finishedAt": format_time(now),
                }
            },
        }
    ]


def renew(world: World, now: datetime, progress: dict[str, Any] | None = None) -> None:
    """The chief's heartbeat."""
    lease = world.observed.lease
    assert lease is not None
    lease["spec"]["renewTime"] = format_micro_time(now)
    if progress is not None:
        lease["metadata"].setdefault("annotations", {})["transient.training/progress"] = json.dumps(progress)
    lease["metadata"]["resourceVersion"] = str(int(lease["metadata"]["resourceVersion"]) + 1000)


def pods(world: World, role: str = "worker", alive: bool = True) -> list[dict[str, Any]]:
    out = [p for p in world.observed.pods if p["metadata"]["labels"].get("transient.training/role") == role]
    if alive:
        out = [
            p
            for p in out
            if not p["metadata"].get("deletionTimestamp") and p.get("status", {}).get("phase") in ("Pending", "Running")
        ]
    return out


def run_ps(world: World, name: str, index: int = 0, node_name: str = "cpu-0", now: datetime = T0) -> None:
    """The Deployment controller + kubelet: a running PS pod."""
    world.observed.pods.append(
        {
            "metadata": {
                "name": name,
                "namespace": "ns",
                "creationTimestamp": format_time(now),
                "labels": {
                    "transient.training/job-name": world.job["metadata"]["name"],
                    "transient.training/role": "ps",
                    "transient.training/ps-index": str(index),
                },
            },
            "spec": {"nodeName": node_name},
            "status": {"phase": "Running", "startTime": format_time(now)},
        }
    )


def start(world: World, nodes: list[dict[str, Any]], now: datetime = T0) -> None:
    """Reconcile once, then run the PS and every pending worker, one per node, and reconcile again."""
    for n in nodes:
        world.observed.nodes[n["metadata"]["name"]] = n
    world.observed.nodes.setdefault("cpu-0", node("cpu-0", "on-demand", now=now))
    world.reconcile(now)
    run_ps(world, "mnist-ps-0-abc", now=now)
    for pod, n in zip(pods(world), nodes, strict=False):
        run_pod(world, pod["metadata"]["name"], n["metadata"]["name"], now)
    world.reconcile(now)
