"""Events: core/v1 and events.k8s.io/v1 serve the same objects, with kube's field conversions between them."""

from __future__ import annotations

import json
import threading
from typing import Any

from kubernetes import client, watch

from .conftest import raw_request, wait_for

CORE = "/api/v1/namespaces/{ns}/events"
EVENTS_V1 = "/apis/events.k8s.io/v1/namespaces/{ns}/events"


def core_event(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {"kind": "Pod", "name": "trainer-0", "namespace": namespace, "apiVersion": "v1"},
        "reason": "Preempted",
        "message": "the node was preempted",
        "type": "Warning",
        "source": {"component": "ttj-operator"},
        "firstTimestamp": "2026-11-21T10:00:00Z",
        "lastTimestamp": "2026-11-21T10:00:05Z",
        "count": 2,
        "reportingComponent": "transient.training/operator",
        "reportingInstance": "ttj-operator-0",
        "action": "Replace",
    }


def events_v1_event(namespace: str, name: str) -> dict[str, Any]:
    """Sent raw: the typed client would rewrite the MicroTimes as ``+00:00`` without a fraction (refused)."""
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "eventTime": "2026-11-21T10:00:00.000000Z",
        "series": {"count": 3, "lastObservedTime": "2026-11-21T10:01:00.000000Z"},
        "reportingController": "transient.training/operator",
        "reportingInstance": "ttj-operator-0",
        "action": "Elect",
        "reason": "ChiefElected",
        "note": "trainer-1 is the chief",
        "type": "Normal",
        "regarding": {"kind": "Pod", "name": "trainer-1", "namespace": namespace, "apiVersion": "v1"},
    }


def test_a_core_event_reads_as_an_events_k8s_io_event(k8s_api: client.ApiClient, namespace: str) -> None:
    created = raw_request(k8s_api, "POST", CORE.format(ns=namespace), core_event(namespace, "core-made"))
    seen = raw_request(k8s_api, "GET", EVENTS_V1.format(ns=namespace) + "/core-made")
    assert seen["apiVersion"] == "events.k8s.io/v1"
    assert seen["metadata"]["uid"] == created["metadata"]["uid"]
    assert seen["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert seen["regarding"]["name"] == "trainer-0"
    assert seen["note"] == "the node was preempted"
    assert seen["reason"] == "Preempted"
    assert seen["type"] == "Warning"
    assert seen["reportingController"] == "transient.training/operator"
    assert seen["reportingInstance"] == "ttj-operator-0"
    assert seen["action"] == "Replace"
    assert seen["deprecatedSource"] == {"component": "ttj-operator"}
    assert seen["deprecatedCount"] == 2
    assert seen["deprecatedFirstTimestamp"] == "2026-11-21T10:00:00Z"
    assert seen["deprecatedLastTimestamp"] == "2026-11-21T10:00:05Z"
    for core_only in ("involvedObject", "message", "source", "count", "reportingComponent"):
        assert core_only not in seen
    assert seen.get("eventTime") is None  # kube serves null: the core form had none


def test_an_events_k8s_io_event_reads_as_a_core_event(k8s_api: client.ApiClient, namespace: str) -> None:
    raw_request(k8s_api, "POST", EVENTS_V1.format(ns=namespace), events_v1_event(namespace, "v1-made"))
    seen = client.CoreV1Api(k8s_api).read_namespaced_event("v1-made", namespace)
    assert seen.involved_object.name == "trainer-1"
    assert seen.message == "trainer-1 is the chief"
    assert seen.reason == "ChiefElected"
    assert seen.reporting_component == "transient.training/operator"
    assert seen.reporting_instance == "ttj-operator-0"
    assert seen.series.count == 3
    assert seen.event_time is not None
    # the list of either API holds the same objects
    core_names = {e.metadata.name for e in client.CoreV1Api(k8s_api).list_namespaced_event(namespace).items}
    v1_names = {e.metadata.name for e in client.EventsV1Api(k8s_api).list_namespaced_event(namespace).items}
    assert "v1-made" in core_names
    assert core_names == v1_names


def test_writes_and_selectors_through_either_api(k8s_api: client.ApiClient, namespace: str) -> None:
    raw_request(k8s_api, "POST", EVENTS_V1.format(ns=namespace), events_v1_event(namespace, "series"))
    patched = raw_request(
        k8s_api,
        "PATCH",
        EVENTS_V1.format(ns=namespace) + "/series",
        {"series": {"count": 4, "lastObservedTime": "2026-11-21T10:02:00.000000Z"}},
        headers={"Content-Type": "application/merge-patch+json", "Accept": "application/json"},
    )
    assert patched["series"]["count"] == 4
    core = raw_request(k8s_api, "GET", CORE.format(ns=namespace) + "/series")
    assert core["series"]["count"] == 4
    assert core["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"]
    # an update through core/v1 shows through events.k8s.io/v1
    core["message"] = "trainer-2 is the chief"
    raw_request(k8s_api, "PUT", CORE.format(ns=namespace) + "/series", core)
    assert raw_request(k8s_api, "GET", EVENTS_V1.format(ns=namespace) + "/series")["note"] == "trainer-2 is the chief"
    # field selectors name each API's own fields
    by_core = client.CoreV1Api(k8s_api).list_namespaced_event(namespace, field_selector="involvedObject.name=trainer-1")
    by_v1 = client.EventsV1Api(k8s_api).list_namespaced_event(namespace, field_selector="regarding.name=trainer-1")
    assert [e.metadata.name for e in by_core.items] == ["series"]
    assert [e.metadata.name for e in by_v1.items] == ["series"]
    client.EventsV1Api(k8s_api).delete_namespaced_event("series", namespace)
    assert "series" not in {e.metadata.name for e in client.CoreV1Api(k8s_api).list_namespaced_event(namespace).items}


def test_a_core_watch_sees_events_written_through_events_k8s_io(k8s_api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(k8s_api)
    start = core.list_namespaced_event(namespace).metadata.resource_version
    seen: list[Any] = []

    def watch_core() -> None:
        stream = watch.Watch()
        for item in stream.stream(core.list_namespaced_event, namespace, resource_version=start, timeout_seconds=20):
            if item["object"].metadata.name == "watched":
                seen.append(item)
                stream.stop()

    watcher = threading.Thread(target=watch_core, daemon=True)
    watcher.start()
    raw_request(k8s_api, "POST", EVENTS_V1.format(ns=namespace), events_v1_event(namespace, "watched"))
    wait_for(lambda: seen, timeout=20, what="the core watch to see the event")
    watcher.join(5)
    assert seen[0]["type"] == "ADDED"
    assert seen[0]["object"].message == "trainer-1 is the chief"
    assert seen[0]["object"].involved_object.name == "trainer-1"


def test_an_events_k8s_io_watch_with_a_selector_sees_core_writes(k8s_api: client.ApiClient, namespace: str) -> None:
    events_api = client.EventsV1Api(k8s_api)
    start = events_api.list_namespaced_event(namespace).metadata.resource_version
    seen: list[dict[str, Any]] = []

    def watch_events_v1() -> None:
        # raw: the typed client cannot read an events.k8s.io Event whose eventTime is null (kube serves those)
        path = (
            f"{EVENTS_V1.format(ns=namespace)}?watch=1&resourceVersion={start}"
            "&fieldSelector=regarding.name%3Dtrainer-0&timeoutSeconds=20"
        )
        method, url, headers, body, _ = k8s_api.param_serialize(
            "GET", path, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"]
        )
        response = k8s_api.call_api(method, url, header_params=headers, body=body, _request_timeout=30)
        buffer = b""
        for chunk in response.response.stream(amt=None, decode_content=False):
            buffer += chunk
            if b"\n" in buffer:
                seen.append(json.loads(buffer.split(b"\n", 1)[0])["object"])
                response.response.shutdown()
                return

    watcher = threading.Thread(target=watch_events_v1, daemon=True)
    watcher.start()
    other = core_event(namespace, "not-selected")
    other["involvedObject"]["name"] = "trainer-9"
    raw_request(k8s_api, "POST", CORE.format(ns=namespace), other)
    raw_request(k8s_api, "POST", CORE.format(ns=namespace), core_event(namespace, "selected"))
    wait_for(lambda: seen, timeout=20, what="the events.k8s.io watch to see the core event")
    watcher.join(5)
    assert seen[0]["metadata"]["name"] == "selected"
    assert seen[0]["apiVersion"] == "events.k8s.io/v1"
    assert seen[0]["note"] == "the node was preempted"
    assert "message" not in seen[0]
