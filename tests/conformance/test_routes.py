"""The URL layout: which paths name which resources, and the Status answers for the ones that name nothing."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from kubernetes import client

from ttj_localcluster.cluster import LocalCluster

from .conftest import raw_request


def _status_of(k8s_api: client.ApiClient, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
    with pytest.raises(client.ApiException) as info:
        raw_request(k8s_api, method, path, body, {"Accept": "application/json", "Content-Type": "application/json"})
    return info.value.status, json.loads(info.value.body)


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/namespaces/{ns}/widgets",  # no such resource
        "/apis/apps/v1/namespaces/{ns}/widgets",
        "/api/v1/namespaces/{ns}/nodes",  # a cluster-scoped resource inside a namespace
        "/api/v1/configmaps/name",  # a namespaced object without its namespace
        "/api/v1/namespaces/{ns}/configmaps/name/status",  # a subresource the resource does not have
        "/api/v1/namespaces/{ns}/configmaps/name/status/more",
        "/apis/apps/v2/deployments",  # a version not served
    ],
)
def test_paths_that_name_nothing_are_not_found(k8s_api: client.ApiClient, namespace: str, path: str) -> None:
    code, status = _status_of(k8s_api, "GET", path.format(ns=namespace))
    assert (code, status["kind"], status["reason"]) == (404, "Status", "NotFound")


@pytest.mark.usefixtures("ttj_crd")
@pytest.mark.parametrize(
    "path",
    [
        "/apis/no.such.group/v1/namespaces/{ns}/widgets",  # a group no one serves
        "/apis/no.such.group/v1",
        "/apis/transient.training/v1alpha1/namespaces/{ns}/widgets",  # a CRD's group, no such resource
        "/apis/transient.training/v9/namespaces/{ns}/transienttrainingjobs",  # a version the CRD does not serve
        "/apis/transient.training/v1alpha1/transienttrainingjobs/name",  # a namespaced object without its namespace
    ],
)
def test_paths_outside_the_built_in_groups_are_not_found_in_plain_text(
    k8s_api: client.ApiClient, namespace: str, path: str
) -> None:
    """kube-apiserver's built-in groups answer with a Status; any other group's path goes to its CRD handler,
    which leaves what it does not serve to the end of the handler chain: Go's plain-text 404."""
    serialized = k8s_api.param_serialize(
        "GET", path.format(ns=namespace), header_params={"Accept": "application/json"}, auth_settings=["BearerToken"]
    )
    response = k8s_api.call_api(*serialized)
    response.read()
    assert response.status == 404
    assert response.getheader("Content-Type").startswith("text/plain")
    assert response.data == b"404 page not found\n"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("PUT", "/api/v1/namespaces/{ns}/configmaps"),  # collections are not replaced or patched
        ("PATCH", "/api/v1/namespaces/{ns}/configmaps"),
        ("POST", "/api/v1/namespaces/{ns}/configmaps/existing"),  # objects are created in their collection
    ],
)
def test_methods_a_path_does_not_take_are_not_allowed(
    core: client.CoreV1Api, k8s_api: client.ApiClient, namespace: str, method: str, path: str
) -> None:
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "existing"}})
    code, status = _status_of(k8s_api, method, path.format(ns=namespace), {"metadata": {"name": "existing"}})
    assert (code, status["kind"], status["reason"]) == (405, "Status", "MethodNotAllowed")


def test_a_namespace_status_is_the_namespace_s_own(k8s_api: client.ApiClient, namespace: str) -> None:
    """``namespaces/NAME/status`` is a subresource of the namespace, not a resource called status in it."""
    out = raw_request(k8s_api, "GET", f"/api/v1/namespaces/{namespace}/status")
    assert (out["kind"], out["metadata"]["name"], out["status"]["phase"]) == ("Namespace", namespace, "Active")


def test_cluster_scoped_objects_have_no_namespace_in_their_path(k8s_api: client.ApiClient, namespace: str) -> None:
    rbac = client.RbacAuthorizationV1Api(k8s_api)
    name = f"{namespace}-reader"
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": []})
    try:
        path = f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}"
        assert raw_request(k8s_api, "GET", path)["metadata"]["name"] == name
        listed = raw_request(k8s_api, "GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles")
        assert name in {item["metadata"]["name"] for item in listed["items"]}
        assert "namespace" not in raw_request(k8s_api, "GET", path)["metadata"]
    finally:
        rbac.delete_cluster_role(name)


def test_the_watch_path_prefix_streams_events(
    core: client.CoreV1Api, k8s_api: client.ApiClient, namespace: str
) -> None:
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "seen"}})
    for path in (
        f"/api/v1/watch/namespaces/{namespace}/configmaps",
        f"/api/v1/watch/namespaces/{namespace}/configmaps/seen",
    ):
        serialized = k8s_api.param_serialize(
            "GET",
            path,
            query_params=[("timeoutSeconds", 1)],
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        response = k8s_api.call_api(*serialized)
        response.read()
        events = [json.loads(line) for line in response.data.splitlines() if line.strip()]
        names = [(e["type"], e["object"]["metadata"]["name"]) for e in events]
        assert [n for n in names if n[1] != "kube-root-ca.crt"] == [("ADDED", "seen")], path


def test_local_paths_with_a_trailing_slash_are_redirected(local_cluster: LocalCluster | None) -> None:
    """Only the local server is asked: how a real one treats a trailing slash depends on its handler chain."""
    if local_cluster is None:
        pytest.skip("the local API server's path normalisation")
    with urllib.request.urlopen(f"{local_cluster.url}/api/v1/namespaces/default/") as response:
        assert response.url.endswith("/api/v1/namespaces/default")
        assert json.loads(response.read())["metadata"]["name"] == "default"
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(f"{local_cluster.url}/api/v1/namespaces/default/configmaps/x/status/")
    assert info.value.code == 404
