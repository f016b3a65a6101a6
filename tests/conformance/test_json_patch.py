"""JSON patch (RFC 6902) as kube-apiserver applies it: every operation, and the answers when one fails."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from .conftest import raw_request

JSON_PATCH = "application/json-patch+json"


def _patch(k8s_api: client.ApiClient, namespace: str, operations: Any) -> Any:
    path = f"/api/v1/namespaces/{namespace}/configmaps/target"
    # With a parameter, as the official client would otherwise send a body that is no list as a strategic merge
    content_type = f"{JSON_PATCH}; charset=utf-8"
    return raw_request(k8s_api, "PATCH", path, operations, {"Accept": "application/json", "Content-Type": content_type})


@pytest.fixture
def target(core: client.CoreV1Api, namespace: str) -> Iterator[None]:
    """A ConfigMap with a list to patch: its finalizers, dropped afterwards so that the namespace can go."""
    core.create_namespaced_config_map(
        namespace,
        {"metadata": {"name": "target", "labels": {"app/name": "a"}, "finalizers": ["x.io/a"]}, "data": {"k": "v"}},
    )
    yield
    core.patch_namespaced_config_map("target", namespace, {"metadata": {"finalizers": None}})


@pytest.mark.usefixtures("target")
def test_every_operation(k8s_api: client.ApiClient, namespace: str) -> None:
    out = _patch(
        k8s_api,
        namespace,
        [
            {"op": "test", "path": "/data/k", "value": "v"},
            {"op": "add", "path": "/data/added", "value": "1"},
            {"op": "replace", "path": "/data/k", "value": "w"},
            {"op": "copy", "from": "/data/k", "path": "/data/copied"},
            {"op": "move", "from": "/data/added", "path": "/data/moved"},
            {"op": "remove", "path": "/data/copied"},
            {"op": "add", "path": "/metadata/finalizers/-", "value": "x.io/c"},
            {"op": "add", "path": "/metadata/finalizers/1", "value": "x.io/b"},
            {"op": "replace", "path": "/metadata/labels/app~1name", "value": "b"},
        ],
    )
    assert out["data"] == {"k": "w", "moved": "1"}
    assert out["metadata"]["finalizers"] == ["x.io/a", "x.io/b", "x.io/c"]
    assert out["metadata"]["labels"] == {"app/name": "b"}


@pytest.mark.usefixtures("target")
@pytest.mark.parametrize(
    "operation",
    [
        {"op": "test", "path": "/data/k", "value": "other"},
        {"op": "remove", "path": "/data/missing"},
        {"op": "add", "path": "/data/missing/deeper", "value": "1"},
        {"op": "add", "path": "/metadata/finalizers/5", "value": "x.io/z"},
        {"op": "remove", "path": "/metadata/finalizers/7"},
        {"op": "replace", "path": "/metadata/finalizers/3", "value": "x.io/z"},
        {"op": "move", "from": "/data/missing", "path": "/data/there"},
        {"op": "bogus", "path": "/data/k"},
        {"op": "move", "path": "/data/there"},
    ],
)
def test_an_operation_that_does_not_apply_is_unprocessable(
    k8s_api: client.ApiClient, core: client.CoreV1Api, namespace: str, operation: dict[str, Any]
) -> None:
    before = core.read_namespaced_config_map("target", namespace)
    with pytest.raises(client.ApiException) as info:
        _patch(k8s_api, namespace, [{"op": "add", "path": "/data/first", "value": "1"}, operation])
    status = json.loads(info.value.body)
    # kube keeps nothing of the library's reason: the generic words of any 422 it did not word itself
    assert (info.value.status, status["reason"]) == (422, "Invalid")
    assert status["message"] == "the server rejected our request due to an error in our request"
    after = core.read_namespaced_config_map("target", namespace)
    assert after.metadata.resource_version == before.metadata.resource_version  # nothing of it was applied


@pytest.mark.usefixtures("target")
def test_a_patch_that_is_not_a_list_of_operations_is_a_bad_request(k8s_api: client.ApiClient, namespace: str) -> None:
    with pytest.raises(client.ApiException) as info:
        _patch(k8s_api, namespace, {"op": "add", "path": "/data/x", "value": "1"})
    assert (info.value.status, json.loads(info.value.body)["reason"]) == (400, "BadRequest")


@pytest.mark.usefixtures("target")
def test_replacing_a_member_the_object_lacks_adds_it(k8s_api: client.ApiClient, namespace: str) -> None:
    """RFC 6902 says such a replace fails; kube's JSON patch library (evanphx/json-patch v4) adds the member."""
    out = _patch(k8s_api, namespace, [{"op": "replace", "path": "/data/missing", "value": "1"}])
    assert out["data"] == {"k": "v", "missing": "1"}
