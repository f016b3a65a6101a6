"""The API server's validation of what ttj writes: NetworkPolicies, and ttj's own pods and PS Deployments
(every generated manifest is accepted; a broken one is refused with the field named). Runs on the local
cluster and on a real one (KUBECONFIG)."""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.api.test_pod_template import TEMPLATE
from tests.pod_prerequisites import named_objects, pod_spec_of
from tests.unit.planner.builders import job
from ttj.api.models import JobRef, TransientTrainingJobSpec
from ttj.planner import children

GOOD_POLICY: dict[str, Any] = {
    "apiVersion": "networking.k8s.io/v1",
    "kind": "NetworkPolicy",
    "metadata": {"name": "p"},
    "spec": {
        "podSelector": {"matchLabels": {"app": "a"}},
        "policyTypes": ["Ingress"],
        "ingress": [
            {"from": [{"podSelector": {"matchLabels": {"app": "a"}}}], "ports": [{"protocol": "TCP", "port": 2222}]},
            {
                "from": [{"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Exists"}]}}],
                "ports": [{"port": "metrics"}, {"port": 8000, "endPort": 8010}],
            },
            {"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}]},
        ],
    },
}


def policy_with(path: list[Any], value: Any) -> dict[str, Any]:
    body = copy.deepcopy(GOOD_POLICY)
    node = body
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return body


BAD_POLICIES = {
    "port out of range": (
        policy_with(["spec", "ingress", 0, "ports", 0, "port"], 70000),
        "spec.ingress[0].ports[0].port",
    ),
    "protocol": (
        policy_with(["spec", "ingress", 0, "ports", 0, "protocol"], "ICMP"),
        "spec.ingress[0].ports[0].protocol",
    ),
    "named port with endPort": (
        policy_with(["spec", "ingress", 1, "ports", 0], {"port": "metrics", "endPort": 9000}),
        "spec.ingress[1].ports[0].endPort",
    ),
    "endPort below port": (
        policy_with(["spec", "ingress", 1, "ports", 1], {"port": 8000, "endPort": 7000}),
        "spec.ingress[1].ports[1].endPort",
    ),
    "cidr": (policy_with(["spec", "ingress", 2, "from", 0, "ipBlock", "cidr"], "10.0.0.0/99"), "ipBlock.cidr"),
    "except outside cidr": (
        policy_with(["spec", "ingress", 2, "from", 0, "ipBlock", "except"], ["192.168.0.0/16"]),
        "ipBlock.except[0]",
    ),
    "ipBlock and selector": (
        policy_with(["spec", "ingress", 2, "from", 0], {"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}),
        "spec.ingress[2].from[0]",
    ),
    "selector operator": (
        policy_with(["spec", "ingress", 1, "from", 0, "namespaceSelector", "matchExpressions", 0, "operator"], "Is"),
        "matchExpressions[0].operator",
    ),
    "label value": (
        policy_with(["spec", "podSelector", "matchLabels", "app"], "-bad-"),
        "spec.podSelector.matchLabels",
    ),
    "policy type": (policy_with(["spec", "policyTypes"], ["Sideways"]), "spec.policyTypes[0]"),
}


def test_a_network_policy_is_stored(k8s_api: client.ApiClient, namespace: str) -> None:
    created = client.NetworkingV1Api(k8s_api).create_namespaced_network_policy(namespace, GOOD_POLICY)
    assert created.spec.ingress[0].ports[0].port == 2222
    assert created.metadata.generation == 1


@pytest.mark.parametrize(("body", "field"), list(BAD_POLICIES.values()), ids=list(BAD_POLICIES))
def test_a_broken_network_policy_is_refused(k8s_api: client.ApiClient, namespace: str, body: Any, field: str) -> None:
    with pytest.raises(client.ApiException) as refused:
        client.NetworkingV1Api(k8s_api).create_namespaced_network_policy(namespace, body)
    assert refused.value.status == 422
    assert field in str(refused.value.body)


def ttj_manifests(namespace: str, **spec: Any) -> list[dict[str, Any]]:
    manifest = job(**spec)
    manifest["metadata"]["namespace"] = namespace
    parsed = TransientTrainingJobSpec.model_validate(manifest["spec"])
    objects = [
        children.worker_pod(JobRef.of(manifest), parsed, 0, 1),
        children.ps_deployment(JobRef.of(manifest), parsed, 0),
    ]
    objects.append(children.network_policy(JobRef.of(manifest)))
    for obj in objects:
        obj["metadata"].pop("ownerReferences", None)  # no job object behind them here
        obj["metadata"].pop("finalizers", None)
    return objects


def service_accounts(core: client.CoreV1Api, namespace: str, *manifests: dict[str, Any]) -> None:
    """The accounts the pods name, as kube-apiserver's ServiceAccount admission wants them to exist."""
    for obj in named_objects(pod_spec_of(m) for m in manifests):
        if obj["kind"] == "ServiceAccount":
            core.create_namespaced_service_account(namespace, obj)


@contextlib.contextmanager
def priority_classes(k8s_api: client.ApiClient, *manifests: dict[str, Any]) -> Iterator[None]:
    """The PriorityClasses the pods name, as the Priority admission plugin wants them to exist; removed after
    (they are cluster-wide) unless they were there before."""
    scheduling = client.SchedulingV1Api(k8s_api)
    made = []
    for obj in named_objects(pod_spec_of(m) for m in manifests):
        if obj["kind"] != "PriorityClass":
            continue
        try:
            scheduling.create_priority_class(obj)
            made.append(obj["metadata"]["name"])
        except client.ApiException as exc:
            if exc.status != 409:
                raise
    try:
        yield
    finally:
        for name in made:
            scheduling.delete_priority_class(name)


@pytest.mark.parametrize(
    "spec",
    [{}, {"workers": {"template": TEMPLATE, "provisioning": "on-demand"}, "parameterServers": {"template": TEMPLATE}}],
    ids=["plain", "with templates"],
)
def test_ttjs_children_are_accepted(k8s_api: client.ApiClient, namespace: str, spec: dict[str, Any]) -> None:
    core, apps = client.CoreV1Api(k8s_api), client.AppsV1Api(k8s_api)
    pod, deployment, policy = ttj_manifests(namespace, **spec)
    service_accounts(core, namespace, pod, deployment)
    with priority_classes(k8s_api, pod, deployment):
        core.create_namespaced_pod(namespace, pod)
        apps.create_namespaced_deployment(namespace, deployment)
    client.NetworkingV1Api(k8s_api).create_namespaced_network_policy(namespace, policy)


#: A broken field, and where kube-apiserver says so: the field path of a 422 Invalid's cause.
BAD_PODS = {
    "negative quantity": (["containers", 0, "resources"], {"requests": {"memory": "-1"}}, "requests[memory]"),
    "request over limit": (
        ["containers", 0, "resources"],
        {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}},
        "spec.containers[0].resources.requests",
    ),
    "env name": (["containers", 0, "env", 0, "name"], "A=B", "env[0].name"),
    "mount of no volume": (["containers", 0, "volumeMounts", 0, "name"], "nope", "volumeMounts[0].name"),
    "volume name": (["volumes", 0, "name"], "Bad_Name", "volumes[0].name"),
    "toleration": (["tolerations", 0], {"operator": "Equal", "value": "x"}, "tolerations[0].operator"),
    "node selector key": (["nodeSelector"], {"bad key": "x"}, "spec.nodeSelector"),
    "no image": (["containers", 0, "image"], "", "containers[0].image"),
    "image with whitespace": (["containers", 0, "image"], " trainer:1", "containers[0].image"),
}


def _broken_pod(k8s_api: client.ApiClient, namespace: str, path: list[Any], value: Any) -> dict[str, Any]:
    pod = ttj_manifests(namespace)[0]
    service_accounts(client.CoreV1Api(k8s_api), namespace, pod)
    node = pod["spec"]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return pod


@pytest.mark.parametrize(("path", "value", "field"), list(BAD_PODS.values()), ids=list(BAD_PODS))
def test_a_broken_pod_is_refused(
    k8s_api: client.ApiClient, namespace: str, path: list[Any], value: Any, field: str
) -> None:
    pod = _broken_pod(k8s_api, namespace, path, value)
    with pytest.raises(client.ApiException) as refused:
        client.CoreV1Api(k8s_api).create_namespaced_pod(namespace, pod)
    assert refused.value.status == 422
    status = json.loads(refused.value.body)
    assert status["reason"] == "Invalid"
    assert any(cause["field"].endswith(field) for cause in status["details"]["causes"]), status


def test_a_quantity_that_does_not_parse_fails_the_decoding(k8s_api: client.ApiClient, namespace: str) -> None:
    """kube-apiserver decodes the body into its Go type first: a quantity Go cannot parse is a 400, not a 422."""
    pod = _broken_pod(k8s_api, namespace, ["containers", 0, "resources"], {"requests": {"cpu": "banana"}})
    with pytest.raises(client.ApiException) as refused:
        client.CoreV1Api(k8s_api).create_namespaced_pod(namespace, pod)
    assert refused.value.status == 400
    status = json.loads(refused.value.body)
    assert status["reason"] == "BadRequest"
    assert status["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: '
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )
