"""The operator's own watches of the jobs' children and the nodes: the indexes a pass reads, what a listing does
to them, a watch thread's list → watch → relist after 410 Gone, the batches handed to the loop, and where it
watches."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from ttj.controller.handlers import _places_now
from ttj.controller.watches import NODE, Batch, Change, Inbox, Index, Indexes, Listing, Watches, change_of
from ttj.kubeapi import KubeError
from ttj_contract import LABEL_JOB


def pod(name: str, namespace: str = "ns", job: str = "mnist", rv: str = "1", **spec: Any) -> dict[str, Any]:
    labels = {LABEL_JOB: job} if job else {}
    metadata = {"name": name, "namespace": namespace, "labels": labels, "resourceVersion": rv}
    return {"metadata": metadata, "spec": {"containers": [{"name": "t"}], **spec}, "status": {"phase": "Pending"}}


def slim(name: str, namespace: str = "ns", job: str = "mnist", rv: str = "1") -> dict[str, Any]:
    metadata = {"name": name, "namespace": namespace, "labels": {LABEL_JOB: job}, "resourceVersion": rv}
    return {"metadata": metadata, "spec": {}, "status": {"phase": "Pending"}}


def added(obj: dict[str, Any], event: str = "ADDED", kind: str = "Pod") -> Change:
    change = change_of(kind, event, obj)
    assert change is not None
    return change


def contents(index: Index) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """job → [(pod, resourceVersion)]"""
    return {
        key: sorted((name, p["metadata"]["resourceVersion"]) for _k, name, p in pods) for key, pods in index.items()
    }


def test_a_change_is_what_the_planner_reads_of_the_object_and_a_child_of_no_job_is_none() -> None:
    key = ("ns", "mnist")
    service = {"metadata": {"name": "mnist", "namespace": "ns", "labels": {LABEL_JOB: "mnist"}}, "spec": {}}
    served = {"metadata": {"name": "n1", "resourceVersion": "3", "managedFields": []}, "status": {"images": []}}
    cases = [
        (("Pod", "MODIFIED", pod("w-0")), Change("Pod", "w-0", key, slim("w-0"))),
        (("Pod", "DELETED", pod("w-0")), Change("Pod", "w-0", key, None)),
        (("Pod", "ADDED", pod("other", job="")), None),
        # a listed child carries no kind (a list's items do not); the planner's children do
        (
            ("Service", "ADDED", service),
            Change("Service", "mnist", key, {"apiVersion": "v1", "kind": "Service", **service}),
        ),
        (
            (NODE, "MODIFIED", served),
            Change(
                NODE,
                "n1",
                None,
                {
                    "metadata": {"name": "n1", "resourceVersion": "3"},
                    "spec": {"taints": []},
                    "status": {"conditions": [], "capacity": {}},
                },
            ),
        ),
    ]
    assert [change_of(*args) for args, _ in cases] == [expected for _, expected in cases]


CASES: list[tuple[str, list[Batch], dict[tuple[str, str], list[tuple[str, str]]], list[tuple[str, bool]]]] = [
    (
        "changes put and delete",
        [[added(pod("w-0")), added(pod("w-1")), added(pod("w-0", rv="2")), added(pod("w-1"), "DELETED")]],
        {("ns", "mnist"): [("w-0", "2")]},
        [("w-0", True), ("w-1", True), ("w-0", True), ("w-1", False)],
    ),
    (
        "a namespace's listing drops its pods not listed, leaves other namespaces, reports only what changed",
        [
            [added(pod("w-0")), added(pod("w-1")), added(pod("x-0", namespace="other", job="x"))],
            [Listing("Pod", "ns", [added(pod("w-0")), added(pod("w-2"))])],
        ],
        {("ns", "mnist"): [("w-0", "1"), ("w-2", "1")], ("other", "x"): [("x-0", "1")]},
        [("w-0", True), ("w-1", True), ("x-0", True), ("w-2", True), ("w-1", False)],
    ),
    (
        "the listing of every namespace drops every pod not listed, and the jobs left without pods",
        [
            [added(pod("w-0")), added(pod("x-0", namespace="other", job="x"))],
            [Listing("Pod", "", [added(pod("w-0", rv="5"))])],
        ],
        {("ns", "mnist"): [("w-0", "5")]},
        [("w-0", True), ("x-0", True), ("w-0", True), ("x-0", False)],
    ),
]


@pytest.mark.parametrize(("what", "batches", "expected", "reported"), CASES, ids=[case[0] for case in CASES])
def test_the_index_after_changes_and_listings(
    what: str,
    batches: list[Batch],
    expected: dict[tuple[str, str], list[tuple[str, str]]],
    reported: list[tuple[str, bool]],
) -> None:
    indexes = Indexes()
    applied = [change for batch in batches for change in indexes.apply(batch)]
    assert contents(indexes["Pod"]) == expected
    assert [(a.change.name, a.change.obj is not None) for a in applied] == reported
    assert indexes["Pod"].get(("ns", "nothing"), []) == []
    assert all(not indexes[kind] for kind in indexes.by_kind if kind != "Pod")


def test_nodes_are_indexed_by_name_and_a_listing_of_them_drops_those_it_lacks() -> None:
    def node(name: str, rv: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "resourceVersion": rv}}

    indexes = Indexes()
    first = indexes.apply([added(node("n1", "1"), kind=NODE), added(node("n2", "1"), kind=NODE)])
    relisted = indexes.apply([Listing(NODE, "", [added(node("n1", "1"), kind=NODE)])])
    assert [(a.change.name, a.change.obj is not None) for a in first + relisted] == [
        ("n1", True),
        ("n2", True),
        ("n2", False),
    ], "n1 listed again unchanged is no change"
    assert {name: [n["metadata"]["resourceVersion"] for n in nodes] for name, nodes in indexes[NODE].items()} == {
        "n1": ["1"]
    }


def test_a_place_counts_as_listed_once_its_listing_is_applied() -> None:
    async def scenario() -> None:
        indexes = Indexes()
        waiting = asyncio.ensure_future(indexes.listed("ns"))
        indexes.apply([added(pod("w-0"))])
        await asyncio.sleep(0)
        assert not waiting.done(), "a watch event is no listing"
        indexes.apply([Listing(kind, "ns", []) for kind in ("Pod", "Lease", "Service", "Deployment", "ServiceAccount")])
        indexes.apply([Listing(kind, "ns", []) for kind in ("Role", "RoleBinding", "NetworkPolicy")])
        await asyncio.sleep(0)
        assert not waiting.done(), "nor is a place listed before the nodes are"
        indexes.apply([Listing(NODE, "", [])])
        await asyncio.wait_for(waiting, timeout=30)
        assert not indexes.listed_event("Pod", "other").is_set()

    asyncio.run(scenario())


class Cluster:
    """The API as a watch sees it: listings, and watches that each replay a script of events."""

    def __init__(self, listings: list[list[dict[str, Any]]], watches: list[list[dict[str, Any]]]) -> None:
        self.listings = listings
        self.watches = watches
        self.calls: list[tuple[str, str, str]] = []
        self.done = threading.Event()
        self.closed = False

    def request(self, method: str, path: str, *, query: Sequence[tuple[str, str]] = (), **_: Any) -> dict[str, Any]:
        assert ("labelSelector", LABEL_JOB) in query
        self.calls.append(("list", path, ""))
        if not self.listings:
            self.done.set()
            raise KubeError(503, "no more listings in this script")
        items = self.listings.pop(0)
        return {"metadata": {"resourceVersion": str(10 * len(self.calls))}, "items": items}

    def watch_events(
        self, path: str, version: str, timeout_seconds: int, query: Sequence[tuple[str, str]] = ()
    ) -> Iterator[dict[str, Any]]:
        assert ("labelSelector", LABEL_JOB) in query
        self.calls.append(("watch", path, version))
        if not self.watches:
            self.done.set()
            raise KubeError(503, "no more watches in this script")
        yield from self.watches.pop(0)

    def close(self) -> None:
        self.closed = True


def run_watch(cluster: Cluster, place: str) -> list[Batch]:
    delivered: list[Batch] = []
    watch = Watches(cluster, delivered.append)  # type: ignore[arg-type]
    watch.start("Pod", place)
    assert cluster.done.wait(30)
    watch.close()
    assert cluster.closed
    return delivered


def test_the_watch_lists_watches_from_the_listing_resumes_and_lists_again_after_410_gone() -> None:
    cluster = Cluster(
        listings=[[pod("w-0")], [pod("w-0", rv="7")]],
        watches=[
            [
                {"type": "ADDED", "object": pod("w-1", rv="11")},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}},
            ],
            [
                {"type": "DELETED", "object": pod("w-1", rv="13")},
                {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}},
            ],
        ],
    )
    delivered = run_watch(cluster, "ns")
    path = "/api/v1/namespaces/ns/pods"
    assert cluster.calls[:5] == [
        ("list", path, ""),
        ("watch", path, "10"),
        ("watch", path, "12"),  # where the bookmark left it
        ("list", path, ""),  # after the 410
        ("watch", path, "40"),
    ]
    assert delivered[:4] == [
        [Listing("Pod", "ns", [added(pod("w-0"))])],
        [added(pod("w-1", rv="11"))],
        [added(pod("w-1", rv="13"), "DELETED")],
        [Listing("Pod", "ns", [added(pod("w-0", rv="7"))])],
    ]


def test_the_watch_of_every_namespace_lists_and_watches_all_pods_and_outlives_a_failed_list() -> None:
    cluster = Cluster(listings=[], watches=[])
    cluster.listings = [[pod("w-0", namespace="a")]]
    delivered = run_watch(cluster, "")
    assert cluster.calls[:2] == [("list", "/api/v1/pods", ""), ("watch", "/api/v1/pods", "10")]
    assert delivered[0] == [Listing("Pod", "", [added(pod("w-0", namespace="a"))])]


def test_the_inbox_hands_the_loop_one_callback_at_a_time_with_all_that_arrived() -> None:
    queued: list[Callable[[], Any]] = []
    applied: list[Batch] = []
    inbox = Inbox(queued.append, applied.append)
    one, two, three = added(pod("w-0")), added(pod("w-1")), added(pod("w-2"))
    inbox.deliver([one])
    inbox.deliver([two])
    assert len(queued) == 1
    queued.pop()()
    assert applied == [[one, two]]
    inbox.deliver([three])
    assert len(queued) == 1
    queued.pop()()
    assert applied == [[one, two], [three]]


class Namespaces:
    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.asked = 0

    def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        assert (method, path) == ("GET", "/api/v1/namespaces")
        self.asked += 1
        return {"items": [{"metadata": {"name": name}} for name in self.names]}


@pytest.mark.parametrize(
    ("patterns", "expected", "listed"),
    [
        ((), [""], False),
        (("ml", "research"), ["ml", "research"], False),
        (("ml-*",), ["ml-a", "ml-b"], True),
        (("ml-*, !ml-b", "team"), ["ml-a", "team"], True),
    ],
)
def test_where_the_pods_are_watched_from_the_start(
    patterns: tuple[str, ...], expected: list[str], listed: bool
) -> None:
    """Every namespace, the ones named, and those kopf's patterns match now."""
    api = Namespaces(["ml-a", "ml-b", "team", "kube-system"])
    assert _places_now(api, patterns) == expected  # type: ignore[arg-type]
    assert bool(api.asked) == listed


def test_where_each_kind_is_watched() -> None:
    """A job's children by the job label, in one namespace or all; the nodes, all of them."""
    from ttj.controller.watches import _path

    cases = {
        ("Pod", "ns"): "/api/v1/namespaces/ns/pods",
        ("Pod", ""): "/api/v1/pods",
        ("Deployment", "ns"): "/apis/apps/v1/namespaces/ns/deployments",
        ("Deployment", ""): "/apis/apps/v1/deployments",
        ("Lease", ""): "/apis/coordination.k8s.io/v1/leases",
        ("NetworkPolicy", "ml"): "/apis/networking.k8s.io/v1/namespaces/ml/networkpolicies",
        (NODE, ""): "/api/v1/nodes",
    }
    assert {where: _path(*where) for where in cases} == cases
