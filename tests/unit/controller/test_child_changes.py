"""A child's change wakes its job's pass once the index holds it (a pass woken before would read the child's
previous state and then sleep until its timer), and only when it may change what the pass plans: a PS
Deployment's status changing as its pod comes up, a child listed again unchanged are not (our own Lease write
coming back: test_own_writes)."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import CollectorRegistry

from ttj.controller.context import OperatorContext
from ttj.controller.handlers import CHILD_RESOURCES, Handlers
from ttj.controller.metrics import Metrics
from ttj.controller.watches import Change, Listing, change_of
from ttj_contract import LABEL_JOB

KEY = ("ns", "mnist")
KINDS = ["Lease", *CHILD_RESOURCES]  # the pods: test_watches, test_node_changes


def handlers() -> Handlers:
    return Handlers(OperatorContext(api=None, metrics=Metrics(CollectorRegistry())))  # type: ignore[arg-type]


def child(kind: str, name: str, rv: str = "1", **parts: Any) -> dict[str, Any]:
    metadata = {"name": name, "namespace": "ns", "resourceVersion": rv, "labels": {LABEL_JOB: "mnist"}}
    return {"metadata": metadata, **parts}


def change(kind: str, body: dict[str, Any], event: str = "MODIFIED") -> Change:
    made = change_of(kind, event, body)
    assert made is not None
    return made


def test_each_child_event_wakes_its_job_with_the_child_already_in_the_index() -> None:
    ours = handlers()

    async def scenario() -> None:
        ours.ctx.state.loop = asyncio.get_running_loop()
        for kind in KINDS:
            wakeup = ours.ctx.state.job(KEY).wakeup
            wakeup.clear()
            name = f"{kind.lower()}-1"
            ours.changed([change(kind, child(kind, name))])
            await asyncio.wait_for(wakeup.wait(), timeout=30)
            seen = [entry[1] for entry in ours.indexes[kind].get(KEY, [])]
            assert seen == [name], f"the {kind} is indexed by the time its job wakes"
            assert not ours.ctx.state.job(("ns", "other")).wakeup.is_set(), "only the child's own job is woken"

    asyncio.run(scenario())


def deployment(rv: str, **status: Any) -> dict[str, Any]:
    spec = {"replicas": 1, "template": {"spec": {"containers": [{"name": "ps"}]}}}
    return child("Deployment", "mnist-ps-0", rv, spec=spec, status=status)


def test_a_deployment_wakes_its_job_only_when_what_the_planner_reads_of_it_changed() -> None:
    """A PS Deployment's status changes some five times as its pod comes up; the planner reads of it its metadata,
    its spec (not the template) and its ReplicaFailure condition."""
    ours = handlers()
    failure = {"type": "ReplicaFailure", "status": "True", "message": "exceeded quota"}

    async def woken(body: dict[str, Any], event: str = "MODIFIED") -> bool:
        ours.ctx.state.loop = asyncio.get_running_loop()
        wakeup = ours.ctx.state.job(KEY).wakeup
        wakeup.clear()
        ours.changed([change("Deployment", body, event)])
        await asyncio.sleep(0)
        return wakeup.is_set()

    async def scenario() -> None:
        assert await woken(deployment("1"))  # the first event seen
        assert not await woken(deployment("2", replicas=1, observedGeneration=1))
        assert not await woken(deployment("3", replicas=1, readyReplicas=1, availableReplicas=1))
        assert await woken(deployment("4", replicas=1, conditions=[failure]))
        assert not await woken(deployment("5", replicas=1, conditions=[failure], unavailableReplicas=1))
        scaled = deployment("6", conditions=[failure])
        scaled["spec"]["replicas"] = 0
        assert await woken(scaled)
        assert await woken(scaled, "DELETED")

    asyncio.run(scenario())


def test_a_child_listed_again_unchanged_wakes_no_pass() -> None:
    """The children are listed again after a watch error or 410 Gone: at 1,000 jobs, every job's every child."""
    ours = handlers()
    service = child("Service", "mnist", "4")

    async def woken(*listed: dict[str, Any]) -> bool:
        ours.ctx.state.loop = asyncio.get_running_loop()
        wakeup = ours.ctx.state.job(KEY).wakeup
        wakeup.clear()
        ours.changed([Listing("Service", "ns", [change("Service", body, "ADDED") for body in listed])])
        return wakeup.is_set()

    async def scenario() -> None:
        assert await woken(service), "the first listing: news"
        assert not await woken(service)
        assert await woken(child("Service", "mnist", "9")), "changed while the watch was away"
        assert await woken(), "deleted while the watch was away"

    asyncio.run(scenario())
