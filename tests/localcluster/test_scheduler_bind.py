"""The scheduler's binding: a bind that fails for any reason is retried, never left assumed."""

from __future__ import annotations

from typing import Any

import pytest
import urllib3

from ttj.kubeapi import KubeError
from ttj_localcluster.nodes.kube import obj_key
from ttj_localcluster.nodes.pools import default_pools, node_object
from ttj_localcluster.nodes.scheduler import Scheduler, feasible_nodes_to_find


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


class ConflictingApi(FlakyApi):
    """Its first binding is refused with 409 (a write conflict, as the API answers under load or in the chaos
    suite's injected faults), though the pod is bound to no node."""

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        if path.endswith("/binding") and self.failures:
            self.failures -= 1
            raise KubeError(409, "Operation cannot be fulfilled: the object has been modified")
        return super().request(method, path, **kwargs)


def test_a_bind_refused_with_a_conflict_is_retried_until_the_watch_shows_the_pod_bound() -> None:
    pod = _gpu_pod("train-worker-1-1")
    node = node_object(default_pools()[0], "gke-ttj-local-default-pool-00000000-abcd", "10.0.0.2")
    scheduler = Scheduler(seed=1)
    api = ConflictingApi()
    pods = Cache(pod)
    scheduler.client, scheduler.pods, scheduler.nodes = api, pods, Cache(node)  # type: ignore[assignment]
    pod["spec"]["tolerations"] = []
    pod["spec"]["containers"][0]["resources"] = {}

    with pytest.raises(KubeError):
        scheduler._schedule(obj_key(pod))  # the work queue retries it after a back-off
    assert scheduler._assumed == {}
    scheduler._schedule(obj_key(pod))
    assert [b["target"]["name"] for b in api.bindings] == [node["metadata"]["name"]]

    pods.objects[obj_key(pod)] = {**pod, "spec": {**pod["spec"], "nodeName": node["metadata"]["name"]}}
    scheduler._assumed.clear()
    scheduler._schedule(obj_key(pod))  # a retry after the watch showed the binding binds nothing
    assert len(api.bindings) == 1


class RecordingApi(FlakyApi):
    def __init__(self) -> None:
        super().__init__()
        self.failures = 0
        self.status_patches: list[dict[str, Any]] = []

    def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:  # PodScheduled=False
        self.status_patches.append(patch)
        return patch


def _gpu_pod(name: str, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "trainer", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
    }
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": "ns", "uid": name}, "spec": spec, "status": {"phase": "Pending"}}


def test_the_node_cache_counts_bound_assumed_and_gone_pods() -> None:
    """What a node holds comes from the pod watch (bound pods) and the scheduler's own assumptions."""
    pool = next(p for p in default_pools() if p.gpus)
    first, second = (node_object(pool, f"gke-ttj-local-gpu-0000000{i}-abcd", "10.0.0.2") for i in (1, 2))
    for node in (first, second):
        node["status"]["allocatable"]["nvidia.com/gpu"] = "1"
        node["status"]["capacity"]["nvidia.com/gpu"] = "1"
    scheduler = Scheduler(seed=1)
    api = RecordingApi()
    running = _gpu_pod("running", first["metadata"]["name"])
    new, third = _gpu_pod("new"), _gpu_pod("third")
    scheduler.client, scheduler.pods, scheduler.nodes = api, Cache(running, new, third), Cache(first, second)  # type: ignore[assignment]
    scheduler.queue = type("Q", (), {"add": lambda self, key: None})()  # type: ignore[assignment]

    scheduler._on_pod("ADDED", running, None)
    scheduler._schedule(obj_key(new))
    assert [b["target"]["name"] for b in api.bindings] == [second["metadata"]["name"]]
    scheduler._schedule(obj_key(third))  # both GPUs taken: the bound one and the assumed one
    assert len(api.bindings) == 1
    assert obj_key(third) in scheduler._unschedulable
    message = api.status_patches[-1]["status"]["conditions"][-1]["message"]
    assert message == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."

    scheduler._on_pod("DELETED", running, running)
    scheduler._schedule(obj_key(third))
    assert [b["target"]["name"] for b in api.bindings] == [second["metadata"]["name"], first["metadata"]["name"]]


@pytest.mark.parametrize(("nodes", "found"), [(10, 10), (100, 100), (200, 100), (784, 344), (5000, 500)])
def test_feasible_nodes_to_find_follows_kube_scheduler(nodes: int, found: int) -> None:
    assert feasible_nodes_to_find(nodes) == found
