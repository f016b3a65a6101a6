"""Watches: resume from a resourceVersion, selectors, bookmarks, timeouts, 410 Gone."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client, watch

from ttj_localcluster.cluster import LocalCluster

from .conftest import wait_for


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


def _watch_lines(response: Any) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in response.read().splitlines() if line.strip()]
    response.release_conn()
    return lines


def _assert_gone(events: list[dict[str, Any]], since: str) -> None:
    """kube's watch cache answers a version older than its window with one ERROR event: 410 Expired."""
    assert [e["type"] for e in events] == ["ERROR"], events
    status = events[0]["object"]
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")
    assert status["message"].startswith(f"too old resource version: {since} ("), status["message"]


WATCHED_GROUP = "watch.conformance.ttj.example"


@pytest.fixture
def new_resource(k8s_api: client.ApiClient) -> Iterator[Callable[[], tuple[str, str]]]:
    """Makes a custom resource no one has asked for yet, (plural, kind): kube-apiserver starts its watch cache
    at the first request, from a list at that moment. Its CRD is deleted afterwards."""
    ext = client.ApiextensionsV1Api(k8s_api)
    made: list[str] = []

    def make() -> tuple[str, str]:
        suffix = uuid.uuid4().hex[:8]
        plural, kind = f"gauge{suffix}s", f"Gauge{suffix}"
        name = f"{plural}.{WATCHED_GROUP}"
        schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
        ext.create_custom_resource_definition(
            {
                "metadata": {"name": name},
                "spec": {
                    "group": WATCHED_GROUP,
                    "scope": "Namespaced",
                    "names": {"plural": plural, "singular": f"gauge{suffix}", "kind": kind},
                    "versions": [{"name": "v1", "served": True, "storage": True, "schema": schema}],
                },
            }
        )
        made.append(name)

        def established() -> bool:
            crd = ext.read_custom_resource_definition(name)
            return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))

        wait_for(established, what="the CRD to be established")
        return plural, kind

    yield make
    for name in made:
        ext.delete_custom_resource_definition(name)


def test_a_watch_from_before_the_watch_cache_began_is_gone_and_a_relist_resumes(
    k8s_api: client.ApiClient,
    core: client.CoreV1Api,
    namespace: str,
    new_resource: Callable[[], tuple[str, str]],
) -> None:
    """A version older than a resource's watch cache (here: taken before its CRD existed) is 410 Gone; the
    client lists again and watches from the list's version."""
    custom = client.CustomObjectsApi(k8s_api)
    before = core.list_namespaced_config_map(namespace).metadata.resource_version
    plural, kind = new_resource()
    response = custom.list_namespaced_custom_object(
        WATCHED_GROUP,
        "v1",
        namespace,
        plural,
        watch=True,
        resource_version=before,
        timeout_seconds=5,
        _preload_content=False,
    )
    _assert_gone(_watch_lines(response), before)
    relisted = custom.list_namespaced_custom_object(WATCHED_GROUP, "v1", namespace, plural)
    version = relisted["metadata"]["resourceVersion"]
    body = {"apiVersion": f"{WATCHED_GROUP}/v1", "kind": kind, "metadata": {"name": "after"}}
    custom.create_namespaced_custom_object(WATCHED_GROUP, "v1", namespace, plural, body)
    response = custom.list_namespaced_custom_object(
        WATCHED_GROUP,
        "v1",
        namespace,
        plural,
        watch=True,
        resource_version=version,
        timeout_seconds=2,
        _preload_content=False,
    )
    events = _watch_lines(response)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "after")]


def test_local_window_drops_its_oldest_events(
    local_cluster: LocalCluster | None, core: client.CoreV1Api, namespace: str
) -> None:
    """A resource's window holds so many events (kube: 100 to 100 Ki, resized by their age): older is gone."""
    if local_cluster is None:
        pytest.skip("a real apiserver's watch cache keeps 75 s of events, up to 100 Ki per resource")
    start = core.list_namespaced_config_map(namespace).metadata.resource_version
    store = local_cluster.server.store
    store.set_history_size(5)
    try:
        for i in range(10):
            core.create_namespaced_config_map(namespace, {"metadata": {"name": f"old-{i}"}})
        response = core.list_namespaced_config_map(
            namespace, watch=True, resource_version=start, timeout_seconds=2, _preload_content=False
        )
        events = _watch_lines(response)
    finally:
        store.set_history_size(None)
    _assert_gone(events, start)


def test_local_watches_resuming_across_a_restart_of_the_caches_are_gone(
    local_cluster: LocalCluster | None, core: client.CoreV1Api, namespace: str
) -> None:
    """As after an apiserver restart: the caches start from now, so a watch resuming from before is gone."""
    if local_cluster is None:
        pytest.skip("a real apiserver is not restarted by the tests")
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "seen"}})
    last_seen = core.list_namespaced_config_map(namespace).metadata.resource_version
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "missed"}})
    local_cluster.restart_watch_caches()
    response = core.list_namespaced_config_map(
        namespace, watch=True, resource_version=last_seen, timeout_seconds=2, _preload_content=False
    )
    _assert_gone(_watch_lines(response), last_seen)
