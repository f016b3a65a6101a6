"""A worker whose job is gone does not hang on the operator's finalizer: the pod's own event handler releases
it (one handler per pod event for both the poke and the release: kopf builds each handler's and each filter's
arguments on every event of thousands of pods)."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
from prometheus_client import CollectorRegistry

from ttj.controller.context import OperatorContext
from ttj.controller.handlers import register
from ttj.controller.metrics import Metrics
from ttj_contract import FINALIZER, LABEL_JOB

LABELS = {LABEL_JOB: "mnist"}


class Pods:
    """The API as the finalizer release sees it: one pod, being deleted, held by our finalizer."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []

    def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        self.requests.append((method, path))
        return {"metadata": {"name": "w-0", "resourceVersion": "3", "finalizers": [FINALIZER]}}


def deleted_pod() -> dict[str, Any]:
    metadata = {"name": "w-0", "namespace": "ns", "labels": LABELS, "finalizers": [FINALIZER]}
    return {"metadata": {**metadata, "deletionTimestamp": "2026-11-28T12:00:00Z"}}


def pod_changed(jobs: dict[Any, Any], body: dict[str, Any]) -> tuple[list[tuple[str, str]], bool]:
    """The requests the pod's event handler made, and whether it woke the job."""
    api = Pods()
    ctx = OperatorContext(api=None, kube=api, metrics=Metrics(CollectorRegistry()))  # type: ignore[arg-type]
    registry = kopf.OperatorRegistry()
    register(registry, ctx)
    handler = next(h for h in registry._watching.get_all_handlers() if h.id == "pod_changed").fn

    async def scenario() -> bool:
        ctx.state.loop = asyncio.get_running_loop()
        wakeup = ctx.state.job(("ns", "mnist")).wakeup
        await handler(namespace="ns", name="w-0", labels=LABELS, body=body, jobs=jobs)
        return wakeup.is_set()

    woken = asyncio.run(scenario())
    return api.requests, woken


def test_a_deleted_worker_of_a_gone_job_is_released() -> None:
    requests, _ = pod_changed({}, deleted_pod())
    assert [method for method, _path in requests] == ["GET", "PATCH"]
    assert all(path.endswith("/pods/w-0") for _method, path in requests)


def test_a_deleted_worker_of_a_live_job_is_left_to_its_pass() -> None:
    requests, woken = pod_changed({("ns", "mnist"): [True]}, deleted_pod())
    assert requests == []
    assert woken


def test_a_running_worker_of_a_gone_job_is_not_released_yet() -> None:
    running = {"metadata": {"name": "w-0", "namespace": "ns", "labels": LABELS, "finalizers": [FINALIZER]}}
    requests, _ = pod_changed({}, running)
    assert requests == []
