"""After a 410 re-list kopf keeps, in its indexes, the objects deleted while the watch was away (no
DELETED event ever comes for them): a deleted pod would keep holding its slot, a deleted node keep its
pods alive. The index audit finds them with a fresh LIST and the planner stops seeing them."""

from __future__ import annotations

from typing import Any

from ttj.controller import audit
from ttj.controller.observe import JobIndexes, observe
from ttj.kubeapi import METADATA_TABLE, KubeError

KEY = ("ns", "mnist")


def obj(name: str, uid: str, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid}, **extra}


def pod(name: str, uid: str, node: str) -> dict[str, Any]:
    return obj(name, uid, spec={"nodeName": node}, status={"phase": "Running"})


class Lister:
    """A LIST answer per path, as a Table of the objects' metadata (what the audit asks for), in pages of
    ``page`` items (limit and continue); a path missing here answers 503."""

    def __init__(self, items: dict[str, list[dict[str, Any]]], page: int = 1) -> None:
        self.items = items
        self.page = page
        self.asked: list[tuple[str, list[tuple[str, str]]]] = []

    def request(
        self, method: str, path: str, *, body: Any = None, query: Any = (), accept: str = "", **_: Any
    ) -> dict[str, Any]:
        assert (method, accept) == ("GET", METADATA_TABLE)
        asked = dict(query)
        assert asked["includeObject"] == "Metadata"
        assert int(asked["limit"]) >= self.page
        self.asked.append((path, list(query)))
        if path not in self.items:
            raise KubeError(503, '{"message": "injected"}')
        start = int(asked.get("continue", "0"))
        end = start + self.page
        more = {"continue": str(end)} if end < len(self.items[path]) else {}
        rows = [{"cells": [], "object": {"metadata": item["metadata"]}} for item in self.items[path][start:end]]
        return {"kind": "Table", "metadata": more, "rows": rows}


def indexes() -> tuple[dict[Any, Any], dict[Any, Any], dict[Any, Any]]:
    pods = {
        KEY: [
            ("Pod", "mnist-worker-0-1", pod("mnist-worker-0-1", "p0", "gpu-0")),
            ("Pod", "mnist-worker-1-1", pod("mnist-worker-1-1", "p1", "gpu-1")),
        ]
    }
    leases = {KEY: [("Lease", "mnist-chief", obj("mnist-chief", "l1"))]}
    nodes = {"gpu-0": [obj("gpu-0", "n0")], "gpu-1": [obj("gpu-1", "n1-old"), obj("gpu-1", "n1-new")]}
    return pods, leases, nodes


def test_objects_deleted_during_a_watch_gap_are_found_and_no_longer_observed() -> None:
    pods, leases, nodes = indexes()
    lister = Lister(
        {
            "/api/v1/namespaces/ns/pods": [pod("mnist-worker-0-1", "p0", "gpu-0")],  # worker 1 deleted
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases": [obj("mnist-chief", "l1")],
            "/api/v1/nodes": [obj("gpu-0", "n0"), obj("gpu-1", "n1-new")],  # gpu-1 re-created meanwhile
        }
    )
    found = audit.audit(lister, [pods, leases], nodes)
    assert set(found) == {"p1", "n1-old"}
    assert found["p1"] == audit.Indexed(("Pod", "ns"), KEY, "mnist-worker-1-1")
    assert found["n1-old"] == audit.Indexed(("Node", ""), None, "gpu-1")
    pages = [query for path, query in lister.asked if path == "/api/v1/nodes"]
    assert [dict(query).get("continue") for query in pages] == [None, "1"], "two nodes, listed a page at a time"
    pods_asked = [query for path, query in lister.asked if path == "/api/v1/namespaces/ns/pods"]
    assert all(("labelSelector", "transient.training/job-name") in query for query in pods_asked)

    seen = observe(KEY, JobIndexes(pods, leases, [], nodes), gone=frozenset(found))  # type: ignore[arg-type]
    assert [p["metadata"]["name"] for p in seen.pods] == ["mnist-worker-0-1"]
    assert seen.lease is not None
    blind = observe(KEY, JobIndexes(pods, leases, [], nodes))  # type: ignore[arg-type]
    assert len(blind.pods) == 2, "without the audit the deleted pod is still there"


def test_a_list_that_failed_proves_nothing() -> None:
    pods, leases, nodes = indexes()
    lister = Lister({"/api/v1/nodes": [obj("gpu-0", "n0"), obj("gpu-1", "n1-new")]})  # pods and leases: 503
    assert set(audit.audit(lister, [pods, leases], nodes)) == {"n1-old"}


def test_an_object_indexed_after_the_snapshot_is_never_a_ghost() -> None:
    pods, leases, nodes = indexes()
    before = audit.snapshot([pods, leases], nodes)
    pods[KEY].append(("Pod", "mnist-worker-2-1", pod("mnist-worker-2-1", "p2", "gpu-0")))  # ADDED after the LIST
    listed: dict[audit.Place, set[str] | None] = {
        ("Pod", "ns"): {"p0", "p1"},
        ("Lease", "ns"): {"l1"},
        ("Node", ""): {"n0", "n1-old", "n1-new"},
    }
    assert audit.ghosts(before, listed) == {}


def test_a_deleted_node_wakes_the_jobs_with_pods_on_it_not_every_job() -> None:
    """A node deleted between the audit's snapshot and its LIST is found as a ghost while its DELETED event is
    still on its way; in a preemption wave that is common, and waking every job for it put a pass of each in
    front of the replacements."""
    other = ("ns", "other")
    found = {
        "p1": audit.Indexed(("Pod", "ns"), KEY, "mnist-worker-1-1"),
        "n1": audit.Indexed(("Node", ""), None, "gpu-1"),
        "n2": audit.Indexed(("Node", ""), None, "gpu-2"),
    }
    on_node = {"gpu-1": [other], "gpu-2": []}
    cases = [
        ({"p1"}, {KEY}),
        ({"n1"}, {other}),
        ({"n2"}, set()),
        ({"p1", "n1", "n2"}, {KEY, other}),
        (set(), set()),
    ]
    assert [audit.jobs_to_wake(found, new, on_node.__getitem__) for new, _ in cases] == [want for _, want in cases]
