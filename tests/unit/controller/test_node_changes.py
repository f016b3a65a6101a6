"""A node's change reaches the jobs with pods on it: through the node index (keeping what the planner reads of
a node), and by waking those jobs a little later, so that the node's notice does not stand in front of the
events of its own pods; any pass before then sees the node as well, and cancels the wait. Its deletion, which
follows its pods' events, wakes them at once."""

from __future__ import annotations

import asyncio
import copy
from datetime import timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from tests.unit.planner.builders import T0, node
from ttj.controller.context import OperatorContext
from ttj.controller.handlers import NODE_CHANGE_DELAY_SECONDS, Handlers
from ttj.controller.memory import Wakeup
from ttj.controller.metrics import Metrics
from ttj.controller.watches import NODE, Batch, Listing, change_of
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
    change = change_of(NODE, "MODIFIED", copy.deepcopy(served))
    assert change is not None
    assert {change.name: change.obj} == {
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
    verdict = classify_pod(worker, {change.name: change.obj}, T0, timedelta(seconds=30))
    assert (verdict.state, verdict.migrated) == (PodState.PREEMPTED, True)


def context() -> OperatorContext:
    return OperatorContext(api=None, metrics=Metrics(CollectorRegistry()))  # type: ignore[arg-type]


def index_pods(handlers: Handlers, pods: dict[tuple[str, str], tuple[str, str]]) -> None:
    """The pods put in the operator's pod index as its watch delivers them, job → (pod name, node name)."""
    batch: Batch = []
    for (namespace, job), (pod, node_name) in pods.items():
        body = {"metadata": {"name": pod, "namespace": namespace, "labels": {LABEL_JOB: job}}}
        batch.append(change_of("Pod", "ADDED", body | {"spec": {"nodeName": node_name}}))  # type: ignore[arg-type]
    handlers.changed(batch)


def node_event(handlers: Handlers, event: str, name: str = "n1", rv: str = "7") -> None:
    """A node's event as its watch delivers it."""
    handlers.changed([change_of(NODE, event, {"metadata": {"name": name, "resourceVersion": rv}})])  # type: ignore[list-item]


def test_a_node_change_wakes_only_the_jobs_with_pods_on_it_as_indexed() -> None:
    """Which jobs have pods on a node is kept as the pods are indexed, and let go when they are deleted: a node's
    event does not scan every job's every pod."""
    ctx = context()
    handlers = Handlers(ctx)
    index_pods(handlers, {KEY: ("mnist-worker-0-0", "n1"), ("ns", "other"): ("other-worker-0-0", "n2")})
    assert ctx.state.jobs_on_node("n1") == [KEY]
    assert ctx.state.jobs_on_node("n2") == [("ns", "other")]
    assert ctx.state.jobs_on_node("n3") == []

    async def scenario() -> None:
        ctx.state.loop = asyncio.get_running_loop()
        ours = ctx.state.job(KEY).wakeup
        body = {"metadata": {"name": "mnist-worker-0-0", "namespace": "ns", "labels": {LABEL_JOB: "mnist"}}}
        handlers.changed([change_of("Pod", "DELETED", body)])  # type: ignore[list-item]
        assert ctx.state.jobs_on_node("n1") == []
        assert ours.is_set(), "the deletion woke its job"
        assert KEY not in handlers.indexes["Pod"]
        ours.clear()
        node_event(handlers, "DELETED")
        assert not ours.is_set()

    asyncio.run(scenario())


def test_a_node_change_wakes_the_jobs_on_it_later_any_pass_before_cancels_the_wait_and_its_deletion_at_once() -> None:
    ctx = context()
    handlers = Handlers(ctx)
    index_pods(handlers, {KEY: ("mnist-worker-0-0", "n1"), ("ns", "other"): ("other-worker-0-0", "n2")})

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        ctx.state.loop = loop
        ours, other = ctx.state.job(KEY).wakeup, ctx.state.job(("ns", "other")).wakeup
        node_event(handlers, "MODIFIED")
        assert not ours.is_set()
        assert ours.pending is not None
        assert 0 < ours.pending.when() - loop.time() <= NODE_CHANGE_DELAY_SECONDS
        assert other.pending is None, "only the jobs with pods on the node"
        first = ours.pending.when()
        node_event(handlers, "MODIFIED")
        assert ours.pending.when() == first, "a second change of the node is seen by the same pass"
        ours.clear()  # a pass starts: it sees the node
        assert ours.pending is None
        await asyncio.sleep(0)
        assert not ours.is_set()

        node_event(handlers, "DELETED")
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


def test_a_node_listed_again_unchanged_wakes_no_job() -> None:
    """The nodes are listed again after a watch error or 410 Gone: 1,000 jobs' passes for nothing, were each listed
    node news."""
    ctx = context()
    handlers = Handlers(ctx)
    index_pods(handlers, {KEY: ("mnist-worker-0-0", "n1")})

    def listing(rv: str) -> list[Listing]:
        node = {"metadata": {"name": "n1", "resourceVersion": rv}}
        return [Listing(NODE, "", [change_of(NODE, "ADDED", node)])]  # type: ignore[list-item]

    async def scenario() -> None:
        ctx.state.loop = asyncio.get_running_loop()
        ours = ctx.state.job(KEY).wakeup
        node_event(handlers, "MODIFIED")
        assert ours.pending is not None
        ours.clear()
        handlers.changed(listing("7"))  # type: ignore[arg-type]
        assert ours.pending is None
        assert not ours.is_set()
        handlers.changed(listing("8"))  # type: ignore[arg-type]
        assert ours.pending is not None, "changed while the watch was away"

    asyncio.run(scenario())


def test_a_pod_seen_deleted_is_no_longer_shown_as_our_last_write_of_it() -> None:
    """A pass shows the pods as our writes left them until the watch shows those writes; a pod whose finalizer we
    released and that the watch then saw deleted must not come back from that memory (its loss would stay
    accounted for ever, no newer pod event coming to push it out)."""
    ctx = context()
    handlers = Handlers(ctx)
    index_pods(handlers, {KEY: ("mnist-worker-0-0", "n1")})
    released = {"metadata": {"name": "mnist-worker-0-0", "namespace": "ns", "resourceVersion": "99"}}
    ctx.state.job(KEY).written_children[("Pod", "mnist-worker-0-0")] = released
    ctx.state.job(KEY).written_children[("Pod", "mnist-worker-1-0")] = {"metadata": {"name": "mnist-worker-1-0"}}
    body = {"metadata": {"name": "mnist-worker-0-0", "namespace": "ns", "labels": {LABEL_JOB: "mnist"}}}
    handlers.changed([change_of("Pod", "DELETED", body)])  # type: ignore[list-item]
    assert list(ctx.state.job(KEY).written_children) == [("Pod", "mnist-worker-1-0")]
