"""The scheduler's binding: a bind that fails for any reason is retried, never left assumed."""

from __future__ import annotations

from typing import Any

import pytest
import urllib3

from ttj_localcluster.nodes.kube import obj_key
from ttj_localcluster.nodes.pools import default_pools, node_object
from ttj_localcluster.nodes.scheduler import Scheduler


class Cache:
    """An informer's cache, without the watch."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = {obj_key(o): o for o in objects}

    def get(self, key: str) -> dict[str, Any] | None:
        return self.objects.get(key)

    def items(self) -> list[dict[str, Any]]:
        return list(self.objects.values())


class FlakyApi:
    """Its first binding breaks on the wire (the apiserver overloaded), the next ones land."""

    def __init__(self) -> None:
        self.bindings: list[dict[str, Any]] = []
        self.failures = 1

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        if path.endswith("/binding"):
            if self.failures:
                self.failures -= 1
                raise urllib3.exceptions.ReadTimeoutError(None, path, "read timed out")  # type: ignore[arg-type]
            self.bindings.append(kwargs["body"])
        return {}

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:  # the Scheduled event
        return body


def test_a_bind_lost_on_the_wire_is_retried_and_the_pod_bound() -> None:
    pod = {
        "metadata": {"name": "train-worker-1-1", "namespace": "ns", "uid": "u1"},
        "spec": {"containers": [{"name": "trainer", "resources": {}}]},
        "status": {"phase": "Pending"},
    }
    node = node_object(default_pools()[0], "gke-ttj-local-default-pool-00000000-abcd", "10.0.0.2")
    scheduler = Scheduler(seed=1)
    api = FlakyApi()
    scheduler.client, scheduler.pods, scheduler.nodes = api, Cache(pod), Cache(node)  # type: ignore[assignment]

    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        scheduler._schedule(obj_key(pod))  # the work queue retries it after a back-off
    scheduler._schedule(obj_key(pod))
    assert [b["target"]["name"] for b in api.bindings] == [node["metadata"]["name"]]
