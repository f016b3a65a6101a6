"""A child's change wakes its job's daemon only once kopf has stored it in the index.

kopf keeps what an index function returns only after the function has returned; a pass woken from inside
the function could read the child's previous state and then sleep until its timer. At 100 jobs × 8 workers
that left jobs Pending or Recovering for ~40 s with all their pods running. So index functions only index,
and an ``on.event`` handler per child resource (kopf runs those after indexing the event) pokes the job.
"""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
from prometheus_client import CollectorRegistry

from ttj.controller.context import OperatorContext
from ttj.controller.handlers import CHILD_RESOURCES, register
from ttj.controller.metrics import Metrics
from ttj_contract import LABEL_JOB

KEY = ("ns", "mnist")
KINDS = ["Lease", *CHILD_RESOURCES]  # the pods: test_pod_watch


def registered() -> tuple[OperatorContext, kopf.OperatorRegistry]:
    ctx = OperatorContext(api=None, metrics=Metrics(CollectorRegistry()))  # type: ignore[arg-type]
    registry = kopf.OperatorRegistry()
    register(registry, ctx)
    return ctx, registry


def by_id(handlers: Any) -> dict[str, Any]:
    return {str(h.id): h for h in handlers.get_all_handlers()}


def test_index_functions_index_without_waking_the_job() -> None:
    ctx, registry = registered()
    indexers = by_id(registry._indexing)
    wakeup = ctx.state.job(KEY).wakeup
    for kind in KINDS:
        body = kopf.Body({"metadata": {"name": f"{kind.lower()}-1", "namespace": "ns", "labels": {LABEL_JOB: "mnist"}}})
        indexed = asyncio.run(
            indexers[f"{kind.lower()}s_by_job"].fn(
                namespace="ns", name=f"{kind.lower()}-1", labels={LABEL_JOB: "mnist"}, body=body
            )
        )
        assert indexed == {KEY: (kind, f"{kind.lower()}-1", dict(body))}
        assert not wakeup.is_set(), f"the {kind} index function woke the job before kopf stored its result"


def test_each_child_event_wakes_its_job_after_indexing() -> None:
    ctx, registry = registered()
    watchers = by_id(registry._watching)

    async def scenario() -> None:
        ctx.state.loop = asyncio.get_running_loop()
        for kind in KINDS:
            wakeup = ctx.state.job(KEY).wakeup
            wakeup.clear()
            await watchers[f"{kind.lower()}_changed"].fn(namespace="ns", labels={LABEL_JOB: "mnist"})
            await asyncio.wait_for(wakeup.wait(), timeout=30)
            other = ctx.state.job(("ns", "other")).wakeup
            assert not other.is_set(), "only the child's own job is woken"

    asyncio.run(scenario())


def deployment(rv: str, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "mnist-ps-0", "namespace": "ns", "resourceVersion": rv, "labels": {LABEL_JOB: "mnist"}},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "ps"}]}}},
        "status": status,
    }


def test_a_deployment_wakes_its_job_only_when_what_the_planner_reads_of_it_changed() -> None:
    """A PS Deployment's status changes some five times as its pod comes up; the planner reads of it its metadata,
    its spec (not the template) and its ReplicaFailure condition."""
    ctx, registry = registered()
    changed = by_id(registry._watching)["deployment_changed"].fn
    failure = {"type": "ReplicaFailure", "status": "True", "message": "exceeded quota"}

    async def woken(body: dict[str, Any], event: str | None = "MODIFIED") -> bool:
        ctx.state.loop = asyncio.get_running_loop()
        wakeup = ctx.state.job(KEY).wakeup
        wakeup.clear()
        await changed(namespace="ns", labels={LABEL_JOB: "mnist"}, body=body, type=event)
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
        assert not await woken(scaled, None), "listed again unchanged, as kopf does each time a watch ends"
        assert await woken(deployment("7", conditions=[failure]), None), "listed again, changed during the gap"

    asyncio.run(scenario())


def test_a_child_listed_again_unchanged_wakes_no_pass() -> None:
    """kopf lists every kind again each time a watch ends: at 1,000 jobs, every job's every child at once."""
    ctx, registry = registered()
    changed = by_id(registry._watching)["service_changed"].fn
    service = {"kind": "Service", "metadata": {"name": "mnist", "namespace": "ns", "resourceVersion": "4"}}

    async def woken(body: dict[str, Any], event: str | None) -> bool:
        ctx.state.loop = asyncio.get_running_loop()
        wakeup = ctx.state.job(KEY).wakeup
        wakeup.clear()
        await changed(namespace="ns", labels={LABEL_JOB: "mnist"}, body=body, type=event)
        return wakeup.is_set()

    async def scenario() -> None:
        assert await woken(service, None), "the first listing: news"
        assert not await woken(service, None)
        assert await woken(service, "MODIFIED"), "a watch event is news"
        newer = {**service, "metadata": {**service["metadata"], "resourceVersion": "9"}}
        assert await woken(newer, None)

    asyncio.run(scenario())
