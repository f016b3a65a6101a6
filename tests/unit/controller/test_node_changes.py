"""A node's change reaches the jobs with pods on it: through the node index (keeping what the planner reads of
a node), and by waking those jobs a little later, so that the node's notice does not stand in front of the
events of its own pods; any pass before then sees the node as well, and cancels the wait. Its deletion, which
follows its pods' events, wakes them at once."""

from __future__ import annotations

import asyncio
import copy
from datetime import timedelta
from typing import Any

import kopf
from prometheus_client import CollectorRegistry

from tests.unit.planner.builders import T0, node
from ttj.controller.context import OperatorContext
from ttj.controller.handlers import NODE_CHANGE_DELAY_SECONDS, Handlers, child_index, index_node
from ttj.controller.memory import Wakeup
from ttj.controller.metrics import Metrics
from ttj.planner import PodState, classify_pod
from ttj_contract import AUTOSCALER_DELETION_TAINT, LABEL_JOB, format_time

KEY = ("ns", "mnist")
DRAIN_TAINT = {"key": AUTOSCALER_DELETION_TAINT, "value": "1700000000", "effect": "NoSchedule"}


def full_node() -> dict[str, Any]:
    """A node as the API serves it: far more than the planner reads."""
    served = node("n1")
    served["metadata"] |= {"uid": "u1", "resourceVersion": "7", "annotations": {"node.alpha/ttl": "0"}}
    served["spec"] = {"providerID": "gce://p/z/n1", "unschedulable": True, "taints": [DRAIN_TAINT]}
    served["status"] |= {
        "capacity": {"nvidia.com/gpu": "1", "cpu": "8"},
        "allocatable": {"nvidia.com/gpu": "1", "cpu": "7910m"},
        "images": [{"names": ["gcr.io/x/trainer:1"], "sizeBytes": 4_000_000_000}],
        "nodeInfo": {"kubeletVersion": "v1.30.5"},
    }
    return served


def test_the_node_index_keeps_what_the_planner_reads_of_a_node() -> None:
    served = full_node()
    indexed = asyncio.run(index_node(name="n1", body=kopf.Body(copy.deepcopy(served))))
    assert indexed == {
        "n1": {
            "metadata": {
                "name": "n1",
                "uid": "u1",
                "resourceVersion": "7",
                "labels": served["metadata"]["labels"],
                "creationTimestamp": served["metadata"]["creationTimestamp"],
            },
            "spec": {"taints": [DRAIN_TAINT]},
            "status": {"conditions": served["status"]["conditions"], "capacity": served["status"]["capacity"]},
        }
    }
    # the autoscaler's taint is how the planner tells a compute class's migration from a preemption
    worker: dict[str, Any] = {
        "metadata": {"name": "w", "deletionTimestamp": format_time(T0)},
        "spec": {"nodeName": "n1", "nodeSelector": {"cloud.google.com/compute-class": "gpu-fallback"}},
        "status": {"phase": "Running"},
    }
    verdict = classify_pod(worker, indexed, T0, timedelta(seconds=30))
    assert (verdict.state, verdict.migrated) == (PodState.PREEMPTED, True)


def context() -> OperatorContext:
    return OperatorContext(api=None, metrics=Metrics(CollectorRegistry()))  # type: ignore[arg-type]


def indexed_pods(ctx: OperatorContext, pods: dict[tuple[str, str], tuple[str, str]]) -> dict[Any, Any]:
    """The pods index as the pod index function fills it, job → (pod name, node name)."""
    index = child_index("Pod", ctx.state)
    indexed: dict[Any, Any] = {}
    for (namespace, job), (pod, node_name) in pods.items():
        body = {"metadata": {"name": pod, "namespace": namespace}, "spec": {"nodeName": node_name}}
        entry = asyncio.run(index(namespace=namespace, name=pod, labels={LABEL_JOB: job}, body=kopf.Body(body)))
        for key, value in entry.items():
            indexed.setdefault(key, []).append(value)
    return indexed


def test_a_node_change_wakes_only_the_jobs_with_pods_on_it_as_indexed() -> None:
    """Which jobs have pods on a node is kept as the pods are indexed, and let go when they are deleted: a node's
    event does not scan every job's every pod."""
    ctx = context()
    handlers = Handlers(ctx)
    pods_by_job = indexed_pods(ctx, {KEY: ("mnist-worker-0-0", "n1"), ("ns", "other"): ("other-worker-0-0", "n2")})
    assert ctx.state.jobs_on_node("n1") == [KEY]
    assert ctx.state.jobs_on_node("n2") == [("ns", "other")]
    assert ctx.state.jobs_on_node("n3") == []

    async def scenario() -> None:
        ctx.state.loop = asyncio.get_running_loop()
        ours = ctx.state.job(KEY).wakeup
        body = {"metadata": {"name": "mnist-worker-0-0", "namespace": "ns"}, "spec": {"nodeName": "n1"}}
        await handlers.pod_changed("ns", {LABEL_JOB: "mnist"}, "mnist-worker-0-0", body, type="DELETED")
        assert ctx.state.jobs_on_node("n1") == []
        ours.clear()
        del pods_by_job[KEY]
        await handlers.node_changed(name="n1", pods_by_job=pods_by_job, type="DELETED")  # type: ignore[arg-type]
        assert not ours.is_set()

    asyncio.run(scenario())


def test_a_node_change_wakes_the_jobs_on_it_later_any_pass_before_cancels_the_wait_and_its_deletion_at_once() -> None:
    ctx = context()
    handlers = Handlers(ctx)
    pods_by_job = indexed_pods(ctx, {KEY: ("mnist-worker-0-0", "n1"), ("ns", "other"): ("other-worker-0-0", "n2")})

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        ctx.state.loop = loop
        ours, other = ctx.state.job(KEY).wakeup, ctx.state.job(("ns", "other")).wakeup
        await handlers.node_changed(name="n1", pods_by_job=pods_by_job, type="MODIFIED")  # type: ignore[arg-type]
        assert not ours.is_set()
        assert ours.pending is not None
        assert 0 < ours.pending.when() - loop.time() <= NODE_CHANGE_DELAY_SECONDS
        assert other.pending is None, "only the jobs with pods on the node"
        first = ours.pending.when()
        await handlers.node_changed(name="n1", pods_by_job=pods_by_job, type="MODIFIED")  # type: ignore[arg-type]
        assert ours.pending.when() == first, "a second change of the node is seen by the same pass"
        ours.clear()  # a pass starts: it sees the node
        assert ours.pending is None
        await asyncio.sleep(0)
        assert not ours.is_set()

        await handlers.node_changed(name="n1", pods_by_job=pods_by_job, type="DELETED")  # type: ignore[arg-type]
        assert ours.is_set()
        assert other.pending is None
        assert not other.is_set()

    asyncio.run(scenario())


def test_a_delayed_wakeup_wakes() -> None:
    async def scenario() -> None:
        wakeup = Wakeup()
        wakeup.set_after(0.01)
        await asyncio.wait_for(wakeup.wait(), timeout=30)
        assert wakeup.pending is None

    asyncio.run(scenario())
