"""Watches: resume from a resourceVersion, selectors, bookmarks, timeouts, 410 Gone."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from kubernetes import client, watch

from ttj_localcluster.cluster import LocalCluster


def _events(core: client.CoreV1Api, namespace: str, **kwargs: Any) -> list[tuple[str, str]]:
    seen = []
    for event in watch.Watch().stream(core.list_namespaced_config_map, namespace, **kwargs):
        seen.append((event["type"], event["object"].metadata.name))
    return seen


def test_watch_from_resource_version(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "before"}})
    start = core.list_namespaced_config_map(namespace).metadata.resource_version
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "w"}})
    core.patch_namespaced_config_map("w", namespace, {"data": {"a": "1"}})
    core.delete_namespaced_config_map("w", namespace)
    seen = _events(core, namespace, resource_version=start, timeout_seconds=1)
    assert [e for e in seen if e[1] == "w"] == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]
    assert ("ADDED", "before") not in seen


def test_watch_without_version_starts_with_current_state(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "present"}})
    seen = _events(core, namespace, timeout_seconds=1)
    assert ("ADDED", "present") in seen


def test_watch_live_events_and_selector_transitions(core: client.CoreV1Api, namespace: str) -> None:
    start = core.list_namespaced_config_map(namespace).metadata.resource_version
    seen: list[tuple[str, str]] = []
    done = threading.Event()

    def consume() -> None:
        w = watch.Watch()
        for event in w.stream(
            core.list_namespaced_config_map,
            namespace,
            label_selector="pick=yes",
            resource_version=start,
            timeout_seconds=10,
        ):
            seen.append((event["type"], event["object"].metadata.name))
            if len(seen) == 3:
                w.stop()
        done.set()

    thread = threading.Thread(target=consume)
    thread.start()
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "s", "labels": {"pick": "no"}}})
    core.patch_namespaced_config_map("s", namespace, {"metadata": {"labels": {"pick": "yes"}}})
    core.patch_namespaced_config_map("s", namespace, {"data": {"x": "1"}})
    core.patch_namespaced_config_map("s", namespace, {"metadata": {"labels": {"pick": "no"}}})
    assert done.wait(15)
    thread.join()
    # entering the selector reads as ADDED, leaving it as DELETED
    assert seen == [("ADDED", "s"), ("MODIFIED", "s"), ("DELETED", "s")]


def test_watch_bookmarks_and_timeout(k8s_api: client.ApiClient, core: client.CoreV1Api, namespace: str) -> None:
    rv = core.list_namespaced_config_map(namespace).metadata.resource_version
    response = core.list_namespaced_config_map(
        namespace,
        watch=True,
        resource_version=rv,
        allow_watch_bookmarks=True,
        timeout_seconds=2,
        _preload_content=False,
    )
    lines = [json.loads(line) for line in response.read().splitlines() if line.strip()]
    response.release_conn()
    # a real apiserver sends bookmarks when it likes (roughly each minute); the stream must end by the timeout
    # and any bookmark must carry a resourceVersion only
    for event in lines:
        if event["type"] == "BOOKMARK":
            assert event["object"]["metadata"]["resourceVersion"]


def test_local_bookmarks_are_sent(local_cluster: LocalCluster | None, core: client.CoreV1Api, namespace: str) -> None:
    if local_cluster is None:
        pytest.skip("bookmark timing is the apiserver's choice on a real cluster")
    old = local_cluster.server.bookmark_interval_seconds
    local_cluster.server.bookmark_interval_seconds = 0.2
    try:
        rv = core.list_namespaced_config_map(namespace).metadata.resource_version
        response = core.list_namespaced_config_map(
            namespace,
            watch=True,
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=1,
            _preload_content=False,
        )
        types = [json.loads(line)["type"] for line in response.read().splitlines() if line.strip()]
        response.release_conn()
    finally:
        local_cluster.server.bookmark_interval_seconds = old
    assert "BOOKMARK" in types


def test_bookmark_never_skips_events_a_slow_client_has_not_read(core: client.CoreV1Api, namespace: str) -> None:
    """A watch that times out while events are still queued for a slow reader must not bookmark past them:
    the client resumes from the bookmark, so it would never see those events (seen at 100 jobs × 8 workers:
    the simulated kubelet missed bindings and pods stayed Pending for good)."""
    start = core.list_namespaced_config_map(namespace).metadata.resource_version
    created: set[int] = set()
    for i in range(300):  # ~12 MB of events: more than the socket buffers hold
        cm = core.create_namespaced_config_map(
            namespace, {"metadata": {"name": f"big-{i}"}, "data": {"x": "y" * 40_000}}
        )
        created.add(int(cm.metadata.resource_version))
    response = core.list_namespaced_config_map(
        namespace,
        watch=True,
        resource_version=start,
        allow_watch_bookmarks=True,
        timeout_seconds=1,
        _preload_content=False,
    )
    time.sleep(2.5)  # read nothing until the watch's timeout has passed: the server holds a backlog then
    sent: set[int] = set()
    for line in response.read().splitlines():
        if not line.strip():
            continue
        event = json.loads(line)
        rv = int(event["object"]["metadata"]["resourceVersion"])
        if event["type"] == "BOOKMARK":
            missing = sorted(v for v in created if v <= rv and v not in sent)
            assert not missing, f"bookmark at {rv} skips {len(missing)} events never sent (first {missing[:3]})"
        else:
            sent.add(rv)
    response.release_conn()


def test_local_bookmark_due_while_events_are_queued_delays_neither(
    local_cluster: LocalCluster | None, core: client.CoreV1Api, namespace: str
) -> None:
    """A bookmark falling due while events wait must neither jump past them nor stall the stream."""
    if local_cluster is None:
        pytest.skip("bookmark timing is the apiserver's choice on a real cluster")
    start = core.list_namespaced_config_map(namespace).metadata.resource_version
    created = {
        core.create_namespaced_config_map(namespace, {"metadata": {"name": f"q-{i}"}}).metadata.name for i in range(200)
    }
    old = local_cluster.server.bookmark_interval_seconds
    local_cluster.server.bookmark_interval_seconds = 0.0  # a bookmark is due before every event
    try:
        response = core.list_namespaced_config_map(
            namespace,
            watch=True,
            resource_version=start,
            allow_watch_bookmarks=True,
            timeout_seconds=3,
            _preload_content=False,
        )
        events = [json.loads(line) for line in response.read().splitlines() if line.strip()]
        response.release_conn()
    finally:
        local_cluster.server.bookmark_interval_seconds = old
    added = {e["object"]["metadata"]["name"] for e in events if e["type"] == "ADDED"}
    assert {name for name in added if name.startswith("q-")} == created


def test_too_old_resource_version_is_gone(
    local_cluster: LocalCluster | None, core: client.CoreV1Api, namespace: str
) -> None:
    if local_cluster is None:
        pytest.skip("cannot force a real apiserver's watch cache to forget")
    start = core.list_namespaced_config_map(namespace).metadata.resource_version
    store = local_cluster.server.store
    size = store._history_size
    store.set_history_size(5)
    try:
        for i in range(10):
            core.create_namespaced_config_map(namespace, {"metadata": {"name": f"old-{i}"}})
        response = core.list_namespaced_config_map(
            namespace, watch=True, resource_version=start, timeout_seconds=2, _preload_content=False
        )
        events = [json.loads(line) for line in response.read().splitlines() if line.strip()]
        response.release_conn()
    finally:
        store.set_history_size(size)
    assert events[0]["type"] == "ERROR"
    assert events[0]["object"]["code"] == 410
    assert events[0]["object"]["reason"] == "Expired"
