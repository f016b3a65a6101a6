"""The sweep for worker pods left on the accounting finalizer after their job went: which indexed pods it
finds, and that a job read back from the API keeps the pods it still owns."""

from __future__ import annotations

from typing import Any

import pytest

from ttj.controller.orphans import Orphan, finalizing_orphans, job_uids, still_owned
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


class Jobs:
    """The API as the sweep's read of a job sees it: the jobs of the name asked, as a LIST answers."""

    def __init__(self, *uids: str) -> None:
        self.uids = uids
        self.requests: list[tuple[str, str, Any]] = []

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        self.requests.append((method, path, kwargs.get("query")))
        return {"items": [{"metadata": {"name": "gone", "uid": uid}} for uid in self.uids]}


@pytest.mark.parametrize(
    ("uids", "owned"),
    [
        ((), False),  # the job is gone
        (("u2",), False),  # a new job of the same name
        (("u1",), True),  # the jobs index lags: the job is there
    ],
)
def test_a_job_read_back_keeps_only_the_pods_it_owns(uids: tuple[str, ...], owned: bool) -> None:
    api = Jobs(*uids)
    assert still_owned(Orphan(GONE, "held", "u1"), job_uids(api, GONE)) is owned
    # a LIST by name: the operator's role may list jobs, not get them
    assert api.requests == [
        (
            "GET",
            "/apis/transient.training/v1alpha1/namespaces/ns/transienttrainingjobs",
            [("fieldSelector", "metadata.name=gone")],
        )
    ]
