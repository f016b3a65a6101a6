"""A worker whose job is gone does not hang on the operator's finalizer: the change of the pod that the pod watch
delivers releases it, as it wakes a live job; but only once a LIST shows the job gone, as the jobs index is empty
until kopf has listed the jobs (and a worker released while its job is there would have its loss never counted)."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import CollectorRegistry

from ttj.controller.context import OperatorContext
from ttj.controller.handlers import Handlers
from ttj.controller.metrics import Metrics
from ttj.controller.watches import change_of
from ttj_contract import API_VERSION, FINALIZER, KIND, LABEL_JOB

LABELS = {LABEL_JOB: "mnist"}
OWNER = [{"apiVersion": API_VERSION, "kind": KIND, "name": "mnist", "uid": "job-uid"}]


class Pods:
    """The API as the finalizer release sees it: one pod, being deleted, held by our finalizer; the jobs of its
    name that a LIST finds."""

    def __init__(self, jobs_listed: list[str]) -> None:
        self.requests: list[tuple[str, str]] = []
        self.jobs_listed = jobs_listed

    def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        self.requests.append((method, path))
        if path.endswith("/transienttrainingjobs"):
            return {"items": [{"metadata": {"name": "mnist", "uid": uid}} for uid in self.jobs_listed]}
        return {"metadata": {"name": "w-0", "resourceVersion": "3", "finalizers": [FINALIZER]}}


def deleted_pod() -> dict[str, Any]:
    metadata = {"name": "w-0", "namespace": "ns", "labels": LABELS, "finalizers": [FINALIZER], "ownerReferences": OWNER}
    return {"metadata": {**metadata, "deletionTimestamp": "2026-11-28T12:00:00Z"}}


def pod_changed(
    jobs: dict[Any, Any], body: dict[str, Any], jobs_listed: tuple[str, ...] = ()
) -> tuple[list[tuple[str, str]], bool]:
    """The requests the pod's change made, and whether it woke the job."""
    api = Pods(list(jobs_listed))
    ctx = OperatorContext(api=None, kube=api, metrics=Metrics(CollectorRegistry()))  # type: ignore[arg-type]
    handlers = Handlers(ctx)
    handlers.jobs = jobs  # type: ignore[assignment]

    async def scenario() -> bool:
        ctx.state.loop = asyncio.get_running_loop()
        wakeup = ctx.state.job(("ns", "mnist")).wakeup
        handlers.changed([change_of("Pod", "MODIFIED", body)])  # type: ignore[list-item]
        await asyncio.gather(*ctx.state.background)
        return wakeup.is_set()

    woken = asyncio.run(scenario())
    return api.requests, woken


def test_a_deleted_worker_of_a_gone_job_is_released() -> None:
    requests, _ = pod_changed({}, deleted_pod())
    assert [method for method, _path in requests] == ["GET", "GET", "PATCH"]
    assert requests[0][1].endswith("/namespaces/ns/transienttrainingjobs")
    assert all(path.endswith("/pods/w-0") for _method, path in requests[1:])


def test_a_deleted_worker_is_kept_while_the_jobs_index_lags_its_job() -> None:
    requests, _ = pod_changed({}, deleted_pod(), jobs_listed=("job-uid",))
    assert [method for method, _path in requests] == ["GET"]


def test_a_deleted_worker_of_a_job_of_the_same_name_created_since_is_released() -> None:
    requests, _ = pod_changed({}, deleted_pod(), jobs_listed=("newer-uid",))
    assert [method for method, _path in requests] == ["GET", "GET", "PATCH"]


def test_a_deleted_worker_of_a_live_job_is_left_to_its_pass() -> None:
    requests, woken = pod_changed({("ns", "mnist"): [True]}, deleted_pod())
    assert requests == []
    assert woken


def test_a_running_worker_of_a_gone_job_is_not_released_yet() -> None:
    running = {"metadata": {"name": "w-0", "namespace": "ns", "labels": LABELS, "finalizers": [FINALIZER]}}
    requests, _ = pod_changed({}, running)
    assert requests == []
