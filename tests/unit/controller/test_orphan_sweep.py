"""The sweep for worker pods left on the accounting finalizer after their job went: which indexed pods it
finds, and that a job read back from the API keeps the pods it still owns."""

from __future__ import annotations

from typing import Any

import pytest

from ttj.controller.apply import Applier
from ttj.controller.orphans import Orphan, finalizing_orphans, still_owned
from ttj.kubeapi import KubeError
from ttj_contract import FINALIZER, KIND

GONE = ("ns", "gone")
LIVE = ("ns", "live")


def pod(name: str, *, deleting: bool = True, finalizers: tuple[str, ...] = (FINALIZER,), owner: str = "u1") -> Any:
    metadata: dict[str, Any] = {
        "name": name,
        "finalizers": list(finalizers),
        "ownerReferences": [{"kind": KIND, "name": "job", "uid": owner}],
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    return ("Pod", name, {"metadata": metadata})


def test_only_deleted_pods_our_finalizer_holds_of_jobs_not_indexed_are_found() -> None:
    pods_by_job = {
        GONE: [
            pod("held"),
            pod("running", deleting=False),
            pod("released", finalizers=()),
            pod("other-finalizer", finalizers=("example.com/keep",)),
        ],
        LIVE: [pod("a-live-jobs-lost-worker")],
    }
    assert finalizing_orphans(pods_by_job, {LIVE: True}) == [Orphan(GONE, "held", "u1")]


@pytest.mark.parametrize(
    ("job", "owned"),
    [
        (None, False),  # the job is gone
        ({"metadata": {"name": "job", "uid": "u2"}}, False),  # a new job of the same name
        ({"metadata": {"name": "job", "uid": "u1"}}, True),  # the index lags: the job is there
    ],
)
def test_a_job_read_back_keeps_only_the_pods_it_owns(job: dict[str, Any] | None, owned: bool) -> None:
    assert still_owned(Orphan(GONE, "held", "u1"), job) is owned


class Api:
    """The API as the sweep's release sees it: the job as ``job`` (None: not found), the pod held."""

    def __init__(self, job: dict[str, Any] | None) -> None:
        self.job = job
        self.requests: list[tuple[str, str]] = []

    def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        self.requests.append((method, path.rsplit("/", 2)[-2]))
        if "/pods/" in path:
            return {"metadata": {"name": "held", "resourceVersion": "3", "finalizers": [FINALIZER]}}
        if self.job is None:
            raise KubeError(404, "not found")
        return self.job


@pytest.mark.parametrize(
    ("job", "released", "requests"),
    [
        (None, True, [("GET", "transienttrainingjobs"), ("GET", "pods"), ("PATCH", "pods")]),
        ({"metadata": {"uid": "u2"}}, True, [("GET", "transienttrainingjobs"), ("GET", "pods"), ("PATCH", "pods")]),
        ({"metadata": {"uid": "u1"}}, False, [("GET", "transienttrainingjobs")]),
    ],
)
def test_the_applier_reads_the_job_before_it_releases(
    job: dict[str, Any] | None, released: bool, requests: list[tuple[str, str]]
) -> None:
    api = Api(job)
    assert Applier(api).release_orphan(Orphan(GONE, "held", "u1")) is released
    assert api.requests == requests
