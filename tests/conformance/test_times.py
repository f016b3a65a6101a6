"""metav1.Time and MicroTime: the forms kube-apiserver accepts, and its refusals (400 on create and update,
422 naming ``patch`` on a patch), so that a client writing the wrong form fails here first.

Bodies go out as raw JSON: the typed ``kubernetes`` client parses a time into a ``datetime`` and writes it back
with ``isoformat()`` (``+00:00``, and no fraction when the microseconds are 0), which is itself a MicroTime
the API refuses.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from .conftest import pod_spec, raw_request

LAYOUT_MICRO = '"2006-01-02T15:04:05.000000Z07:00"'
LAYOUT_TIME = '"2006-01-02T15:04:05Z07:00"'


def _lease(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": {"holderIdentity": "pod-a", "leaseDurationSeconds": 15, **spec},
    }


LEASES = "/apis/coordination.k8s.io/v1/namespaces/{}/leases"
JSON = {"Content-Type": "application/json", "Accept": "application/json"}


def _post(k8s_api: client.ApiClient, path: str, body: dict[str, Any]) -> Any:
    return raw_request(k8s_api, "POST", path, body, JSON)


def _status(exc: client.ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


@pytest.mark.parametrize(
    ("value", "rest", "element"),
    [
        ("2026-11-21T10:00:00+00:00", "+00:00", ".000000"),
        ("2026-11-21T10:00:00Z", "Z", ".000000"),
        ("2026-11-21T10:00:00.123Z", ".123Z", ".000000"),
        ("2026-11-21 10:00:00.000000Z", " 10:00:00.000000Z", "T"),
    ],
)
def test_micro_time_refused_on_create(
    k8s_api: client.ApiClient, namespace: str, value: str, rest: str, element: str
) -> None:
    leases = client.CoordinationV1Api(k8s_api)
    with pytest.raises(client.ApiException) as caught:
        _post(k8s_api, LEASES.format(namespace), _lease("bad", acquireTime=value))
    assert caught.value.status == 400
    status = _status(caught.value)
    assert status["reason"] == "BadRequest"
    assert status["message"] == (
        f'Lease in version "v1" cannot be handled as a Lease: parsing time "{value}" as {LAYOUT_MICRO}: '
        f'cannot parse "{rest}" as "{element}"'
    )
    assert leases.list_namespaced_lease(namespace).items == []


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        ("2026-11-21T10:00:00.000000Z", "2026-11-21T10:00:00.000000Z"),
        ("2026-11-21T12:00:00.123456+02:00", "2026-11-21T10:00:00.123456Z"),
    ],
)
def test_micro_time_forms_accepted(k8s_api: client.ApiClient, namespace: str, value: str, stored: str) -> None:
    """Exactly six fractional digits, then ``Z`` or an offset; the server writes it back in UTC."""
    _post(k8s_api, LEASES.format(namespace), _lease("good", acquireTime=value, renewTime=value))
    lease = raw_request(k8s_api, "GET", f"{LEASES.format(namespace)}/good")
    assert lease["spec"]["acquireTime"] == lease["spec"]["renewTime"] == stored


def test_micro_time_refused_on_update_and_patch(k8s_api: client.ApiClient, namespace: str) -> None:
    leases = client.CoordinationV1Api(k8s_api)
    created = _post(k8s_api, LEASES.format(namespace), _lease("l", renewTime="2026-11-21T10:00:00.000000Z"))
    body = _lease("l", renewTime="2026-11-21T10:00:05+00:00")
    body["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    with pytest.raises(client.ApiException) as caught:
        raw_request(k8s_api, "PUT", f"{LEASES.format(namespace)}/l", body, JSON)
    assert caught.value.status == 400
    assert 'cannot parse "+00:00" as ".000000"' in _status(caught.value)["message"]

    with pytest.raises(client.ApiException) as caught:
        raw_request(
            k8s_api,
            "PATCH",
            f"{LEASES.format(namespace)}/l",
            {"spec": {"renewTime": "2026-11-21T10:00:05+00:00"}},
            {"Content-Type": "application/merge-patch+json", "Accept": "application/json"},
        )
    assert caught.value.status == 422
    status = _status(caught.value)
    assert status["reason"] == "Invalid"
    assert status["message"].startswith(' "" is invalid: patch: Invalid value: ')
    assert status["message"].endswith(
        f'parsing time "2026-11-21T10:00:05+00:00" as {LAYOUT_MICRO}: cannot parse "+00:00" as ".000000"'
    )
    assert [c["field"] for c in status["details"]["causes"]] == ["patch"]
    assert (
        leases.read_namespaced_lease("l", namespace).metadata.resource_version == created["metadata"]["resourceVersion"]
    )


def test_event_times(k8s_api: client.ApiClient, namespace: str) -> None:
    """events.k8s.io eventTime is a MicroTime; core firstTimestamp a Time (any fraction, any offset)."""
    body = {
        "metadata": {"name": "ev"},
        "eventTime": "2026-11-21T10:00:00Z",
        "reportingController": "ttj/test",
        "reportingInstance": "t",
        "action": "Tested",
        "reason": "Test",
        "type": "Normal",
        "regarding": {"kind": "Pod", "name": "x", "namespace": namespace},
    }
    with pytest.raises(client.ApiException) as caught:
        _post(k8s_api, f"/apis/events.k8s.io/v1/namespaces/{namespace}/events", body)
    assert caught.value.status == 400
    assert _status(caught.value)["message"] == (
        'Event in version "v1" cannot be handled as a Event: parsing time "2026-11-21T10:00:00Z" as '
        f'{LAYOUT_MICRO}: cannot parse "Z" as ".000000"'
    )

    involved = {"kind": "Pod", "name": "x", "namespace": namespace}
    _post(
        k8s_api,
        f"/api/v1/namespaces/{namespace}/events",
        {
            "metadata": {"name": "ok"},
            "involvedObject": involved,
            "reason": "Test",
            "firstTimestamp": "2026-11-21T12:00:00.5+02:00",
            "lastTimestamp": "2026-11-21T10:00:00Z",
        },
    )
    stored = raw_request(k8s_api, "GET", f"/api/v1/namespaces/{namespace}/events/ok")
    assert stored["firstTimestamp"] == "2026-11-21T10:00:00Z"  # a Time keeps whole seconds, in UTC
    with pytest.raises(client.ApiException) as caught:
        _post(
            k8s_api,
            f"/api/v1/namespaces/{namespace}/events",
            {"metadata": {"name": "bad"}, "involvedObject": involved, "reason": "T", "lastTimestamp": "2026-11-21"},
        )
    assert caught.value.status == 400
    assert _status(caught.value)["message"] == (
        'Event in version "v1" cannot be handled as a Event: parsing time "2026-11-21" as '
        f'{LAYOUT_TIME}: cannot parse "" as "T"'
    )


def test_time_in_pod_status(k8s_api: client.ApiClient, namespace: str) -> None:
    """metav1.Time without a zone is refused in a status write too."""
    core = client.CoreV1Api(k8s_api)
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "p"},
            "spec": pod_spec(),
        },
    )
    pod = raw_request(k8s_api, "GET", f"/api/v1/namespaces/{namespace}/pods/p")
    pod["status"]["startTime"] = "2026-11-21T10:00:00"
    with pytest.raises(client.ApiException) as caught:
        raw_request(
            k8s_api,
            "PUT",
            f"/api/v1/namespaces/{namespace}/pods/p/status",
            pod,
            JSON,
        )
    assert caught.value.status == 400
    assert _status(caught.value)["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: parsing time "2026-11-21T10:00:00" as '
        f'{LAYOUT_TIME}: cannot parse "" as "Z07:00"'
    )
