"""``pods/eviction``: the delete that asks disruption budgets first (``kubectl drain``, the cluster autoscaler)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from ttj_localcluster.cluster import LocalCluster

from .conftest import pod_spec, raw_request

HOLD = "ttj.test/hold"


def _eviction(name: str, **options: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}
    if options:
        body["deleteOptions"] = options
    return body


def _evict(k8s_api: client.ApiClient, namespace: str, name: str, **options: Any) -> Any:
    path = f"/api/v1/namespaces/{namespace}/pods/{name}/eviction"
    headers = {"Accept": "application/json", "Content-Type": "application/json"}
    return raw_request(k8s_api, "POST", path, _eviction(name, **options), headers)


@pytest.fixture
def running(core: client.CoreV1Api, namespace: str) -> Iterator[str]:
    """A pod the API takes for running (its status says so), held by a finalizer so that its deletion shows."""
    core.create_namespaced_pod(
        namespace, {"metadata": {"name": "victim", "labels": {"app": "v"}, "finalizers": [HOLD]}, "spec": pod_spec()}
    )
    core.patch_namespaced_pod_status("victim", namespace, {"status": {"phase": "Running"}})
    yield "victim"
    try:
        core.patch_namespaced_pod("victim", namespace, {"metadata": {"finalizers": None}})
    except client.ApiException as exc:
        if exc.status != 404:
            raise


def test_eviction_is_a_pod_subresource_of_kind_eviction(k8s_api: client.ApiClient) -> None:
    resources = {r.name: r for r in client.CoreV1Api(k8s_api).get_api_resources().resources}
    eviction = resources["pods/eviction"]
    assert (eviction.kind, eviction.group, eviction.version, eviction.verbs) == ("Eviction", "policy", "v1", ["create"])


def test_an_eviction_deletes_the_pod_gracefully(
    k8s_api: client.ApiClient,
    core: client.CoreV1Api,
    namespace: str,
    running: str,
    local_cluster: LocalCluster | None,
) -> None:
    answer = _evict(k8s_api, namespace, running)
    assert (answer["kind"], answer["status"]) == ("Status", "Success")
    pod = core.read_namespaced_pod(running, namespace)
    assert pod.metadata.deletion_timestamp is not None
    disruption = [c for c in pod.status.conditions or [] if c.type == "DisruptionTarget"]
    # kube 1.26+ (PodDisruptionConditions on) and the local cluster say why; an older kube says nothing.
    assert [(c.status, c.reason, c.message) for c in disruption] in (
        [("True", "EvictionByEvictionAPI", "Eviction API: evicting")],
        *([[]] if local_cluster is None else []),
    )


def test_an_eviction_a_disruption_budget_forbids_is_refused_with_429(
    k8s_api: client.ApiClient, core: client.CoreV1Api, namespace: str, running: str
) -> None:
    client.PolicyV1Api(k8s_api).create_namespaced_pod_disruption_budget(
        namespace,
        {"metadata": {"name": "keep"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "v"}}}},
    )
    with pytest.raises(client.ApiException) as info:
        _evict(k8s_api, namespace, running)
    assert info.value.status == 429
    body = json.loads(info.value.body)
    assert (body["reason"], body["message"]) == (
        "TooManyRequests",
        "Cannot evict pod as it would violate the pod's disruption budget.",
    )
    assert core.read_namespaced_pod(running, namespace).metadata.deletion_timestamp is None


def test_evicting_a_pod_that_does_not_exist_is_404(k8s_api: client.ApiClient, namespace: str) -> None:
    with pytest.raises(client.ApiException) as info:
        _evict(k8s_api, namespace, "nobody")
    assert info.value.status == 404
