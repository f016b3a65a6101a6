"""The node fleet's informers (scheduler, kubelets, Deployment controller) list again after a watch ends in
410 Gone, as client-go's reflector does, and tell their handlers what changed while they were away."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

from ttj_localcluster.nodes.kube import Informer

PATH = "/api/v1/namespaces/ns/configmaps"


def configmap(name: str, rv: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv)}}


GONE = {
    "type": "ERROR",
    "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version: 10 (12)"},
}


class ScriptedClient:
    """Answers each list and each watch from its script, in order; a watch beyond the script waits for the stop."""

    def __init__(self, lists: list[dict[str, Any]], watches: list[list[dict[str, Any]]], stop: threading.Event):
        self.lists, self.watches, self.stop = lists, watches, stop
        self.listed = 0
        self.watched_from: list[str] = []
        self.waiting = threading.Event()

    def request(self, method: str, path: str, *, query: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
        assert (method, path, list(query)) == ("GET", PATH, [])
        self.listed += 1
        return self.lists.pop(0)

    def watch_events(
        self, path: str, resource_version: str, timeout_seconds: int, query: Sequence[tuple[str, str]] = ()
    ) -> Iterator[dict[str, Any]]:
        assert (path, list(query)) == (PATH, [])
        self.watched_from.append(resource_version)
        if self.watches:
            yield from self.watches.pop(0)
            return
        self.waiting.set()
        self.stop.wait()


def test_a_watch_ending_in_410_lists_again_and_reports_what_changed_meanwhile() -> None:
    stop = threading.Event()
    api = ScriptedClient(
        lists=[
            {"metadata": {"resourceVersion": "10"}, "items": [configmap("a", 5), configmap("b", 6)]},
            # b was deleted and c created while the watch was away: no event will ever say so
            {"metadata": {"resourceVersion": "13"}, "items": [configmap("a", 11), configmap("c", 12)]},
        ],
        watches=[[{"type": "MODIFIED", "object": configmap("a", 11)}, GONE]],
        stop=stop,
    )
    informer = Informer(api, PATH, "test", stop)  # type: ignore[arg-type]
    seen: list[tuple[str, str]] = []
    informer.add_handler(lambda kind, obj, _old: seen.append((kind, obj["metadata"]["name"])))
    informer.start()
    try:
        assert api.waiting.wait(10), "the informer never watched again"
    finally:
        stop.set()
        informer.join(10)
    assert api.listed == 2
    assert api.watched_from == ["10", "13"]
    assert seen == [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("ADDED", "c"), ("DELETED", "b")]
    assert sorted(obj["metadata"]["name"] for obj in informer.items()) == ["a", "c"]
