"""What wakes a job's reconcile daemon: a change of the job other than its status, and the children.

Every pass accrues cost, so every pass writes a new status. When the job's own status write woke the
daemon again, a running job was replanned and its status rewritten ~80 times a second, forever: under
CPU load that starved the local cluster's scheduler and the chief's heartbeat (the e2e flake).
"""

from __future__ import annotations

import asyncio
import copy
import threading
from typing import Any

import kopf
from prometheus_client import CollectorRegistry

from tests.unit.planner.builders import job
from ttj.controller.context import OperatorContext
from ttj.controller.metrics import Metrics

KEY = ("ns", "mnist")


def context() -> OperatorContext:
    return OperatorContext(api=None, metrics=Metrics(CollectorRegistry()))  # type: ignore[arg-type]


def body(obj: dict[str, Any]) -> kopf.Body:
    return kopf.Body(obj)


def test_a_status_write_does_not_wake_the_daemon_but_a_spec_or_metadata_change_does() -> None:
    ctx = context()
    first = job()
    first["metadata"]["resourceVersion"] = "10"
    assert ctx.job_changed(KEY, body(first))  # first sight

    written = copy.deepcopy(first)
    written["metadata"]["resourceVersion"] = "11"
    written["metadata"]["managedFields"] = [{"manager": "ttj", "subresource": "status"}]
    written["status"] = {"phase": "Running", "cost": {"usd": 0.0123, "accruedAt": "2026-11-21T12:00:01Z"}}
    assert not ctx.job_changed(KEY, body(written))  # our own status write: nothing new to plan for

    scaled = copy.deepcopy(written)
    scaled["metadata"]["resourceVersion"] = "12"
    scaled["spec"]["workers"]["replicas"] = 4
    assert ctx.job_changed(KEY, body(scaled))  # kubectl scale

    deleting = copy.deepcopy(scaled)
    deleting["metadata"]["resourceVersion"] = "13"
    deleting["metadata"]["deletionTimestamp"] = "2026-11-21T12:00:05Z"
    assert ctx.job_changed(KEY, body(deleting))
    assert ctx.job_changed(("ns", "other"), body(deleting))  # per job


def test_a_poke_from_an_index_thread_wakes_the_daemon() -> None:
    ctx = context()

    async def scenario() -> None:
        ctx.state.loop = asyncio.get_running_loop()
        wakeup = ctx.state.job(KEY).wakeup
        # kopf runs sync index functions in executor threads: that is where pokes come from.
        threading.Timer(0.05, ctx.poke, args=(KEY,)).start()
        await asyncio.wait_for(wakeup.wait(), timeout=30)

    asyncio.run(scenario())
