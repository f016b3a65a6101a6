"""Conformance fixtures: the same tests run against the local cluster or a real one (KUBECONFIG)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

REPO = Path(__file__).resolve().parents[2]
CRD_PATH = REPO / "crds" / "transient.training_transienttrainingjobs.yaml"


#: A scheduler no cluster runs: a pod naming it stays unscheduled, so a test may bind it by hand or expect it to
#: stay Pending without racing kube-scheduler (and, once bound to a node no kubelet runs, the kubelets).
NO_SCHEDULER = "ttj-conformance-no-scheduler"


def pod_spec(**extra: Any) -> dict[str, Any]:
    """A pod spec no scheduler takes: one container, never pulled or run anywhere."""
    return {"schedulerName": NO_SCHEDULER, "containers": [{"name": "c", "image": "i"}], **extra}


def wait_for(condition: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    """Poll until ``condition()`` returns something truthy; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def core(k8s_api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(k8s_api)


@pytest.fixture
def namespace(k8s_api: client.ApiClient) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards."""
    name = f"conf-{uuid.uuid4().hex[:10]}"
    api = client.CoreV1Api(k8s_api)
    api.create_namespace({"metadata": {"name": name, "labels": {"ttj-conformance": "true"}}})
    yield name
    try:
        api.delete_namespace(name)
    except client.ApiException as exc:
        if exc.status != 404:
            raise


def apply_crd(k8s_api: client.ApiClient, body: dict[str, Any]) -> None:
    """Create ``body`` (or replace the CRD of its name) and wait until it is established."""
    ext = client.ApiextensionsV1Api(k8s_api)
    name = body["metadata"]["name"]
    try:
        ext.create_custom_resource_definition(body)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
        current = ext.read_custom_resource_definition(name)
        ext.replace_custom_resource_definition(
            name, {**body, "metadata": {**body["metadata"], "resourceVersion": current.metadata.resource_version}}
        )

    def established() -> bool:
        crd = ext.read_custom_resource_definition(name)
        return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))

    wait_for(established, what=f"the CRD {name} to be established")


@pytest.fixture(scope="session")
def ttj_crd(k8s_api: client.ApiClient) -> dict[str, Any]:
    """Our CRD, applied once and established."""
    body: dict[str, Any] = yaml.safe_load(CRD_PATH.read_text())
    apply_crd(k8s_api, body)
    return body


def raw_request(
    k8s_api: client.ApiClient, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> Any:
    """A request the typed client has no method for (a given patch type, a subresource); returns parsed JSON."""
    serialized = k8s_api.param_serialize(
        method, path, header_params=headers or {"Accept": "application/json"}, body=body, auth_settings=["BearerToken"]
    )
    response = k8s_api.call_api(*serialized)
    response.read()
    if response.status >= 400:
        raise client.ApiException(http_resp=response)
    return json.loads(response.data)


def watch_events(k8s_api: client.ApiClient, path: str) -> list[Any]:
    """The events of a bounded watch (``path`` with ``watch=true&timeoutSeconds=N``): one JSON object per line,
    however many the server sent before the timeout."""
    serialized = k8s_api.param_serialize(
        "GET", path, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"]
    )
    response = k8s_api.call_api(*serialized)
    response.read()
    if response.status >= 400:
        raise client.ApiException(http_resp=response)
    return [json.loads(line) for line in response.data.splitlines() if line.strip()]


def minimal_job(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "transient.training/v1alpha1",
        "kind": "TransientTrainingJob",
        "metadata": {"name": name},
        "spec": {"trainSteps": 100, "checkpoint": {"uri": "/tmp/x"}, **spec},
    }
