"""The pure parts of the local API server's access control: reading a request as kube's RequestInfo, matching
RBAC rules, the escalation check's rule coverage, and the Pod Security checks. End-to-end behaviour against a
server is pinned by tests/conformance/test_rbac.py and test_pod_security.py."""

from __future__ import annotations

from typing import Any

import pytest

from ttj_localcluster.apiserver.pod_security import violations
from ttj_localcluster.apiserver.rbac import missing_rules, rule_allows
from ttj_localcluster.apiserver.requestinfo import request_attributes


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", "/api/v1/namespaces/ns/pods", {}, ("list", "", "ns", "pods", "", "")),
        ("GET", "/api/v1/namespaces/ns/pods", {"watch": "true"}, ("watch", "", "ns", "pods", "", "")),
        ("GET", "/api/v1/watch/namespaces/ns/pods", {}, ("watch", "", "ns", "pods", "", "")),
        ("POST", "/api/v1/namespaces/ns/pods", {}, ("create", "", "ns", "pods", "", "")),
        ("DELETE", "/api/v1/namespaces/ns/pods", {}, ("deletecollection", "", "ns", "pods", "", "")),
        ("GET", "/api/v1/namespaces/ns/pods/p/log", {}, ("get", "", "ns", "pods", "log", "p")),
        ("PATCH", "/apis/transient.training/v1alpha1/namespaces/ns/transienttrainingjobs/j/status", {},
         ("patch", "transient.training", "ns", "transienttrainingjobs", "status", "j")),
        ("POST", "/api/v1/namespaces/ns/serviceaccounts/sa/token", {},
         ("create", "", "ns", "serviceaccounts", "token", "sa")),
        # a namespace is an object in itself: its name is also the request's namespace
        ("GET", "/api/v1/namespaces/ns", {}, ("get", "", "ns", "namespaces", "", "ns")),
        ("PUT", "/api/v1/namespaces/ns/finalize", {}, ("update", "", "ns", "namespaces", "finalize", "ns")),
        ("GET", "/api/v1/nodes", {}, ("list", "", "", "nodes", "", "")),
        ("GET", "/apis/coordination.k8s.io/v1/namespaces/ns/leases",
         {"fieldSelector": "metadata.name=job-chief", "watch": "1"},
         ("watch", "coordination.k8s.io", "ns", "leases", "", "job-chief")),
    ],
)  # fmt: skip
def test_resource_requests_read_as_kube_reads_them(
    method: str, path: str, query: dict[str, str], expected: tuple[str, ...]
) -> None:
    info = request_attributes(method, path, query)
    assert info.resource_request
    assert (info.verb, info.api_group, info.namespace, info.resource, info.subresource, info.name) == expected


@pytest.mark.parametrize("path", ["/version", "/apis", "/apis/apps/v1", "/api/v1", "/metrics", "/ttj-local/faults"])
def test_non_resource_requests(path: str) -> None:
    info = request_attributes("GET", path, {})
    assert not info.resource_request
    assert (info.verb, info.path) == ("get", path)


def allows(rule: dict[str, Any], method: str, path: str) -> bool:
    return rule_allows(rule, request_attributes(method, path, {}))


def test_rules_match_subresources_names_and_url_prefixes() -> None:
    scale = {"apiGroups": ["*"], "resources": ["*/scale"], "verbs": ["get"]}
    assert allows(scale, "GET", "/apis/apps/v1/namespaces/n/deployments/d/scale")
    assert not allows(scale, "GET", "/apis/apps/v1/namespaces/n/deployments/d")
    named = {"apiGroups": [""], "resources": ["pods"], "resourceNames": ["a"], "verbs": ["get", "delete"]}
    assert allows(named, "DELETE", "/api/v1/namespaces/n/pods/a")
    assert not allows(named, "DELETE", "/api/v1/namespaces/n/pods/b")
    assert not allows(named, "GET", "/api/v1/namespaces/n/pods/a/log")
    urls = {"nonResourceURLs": ["/healthz", "/apis/*"], "verbs": ["get"]}
    assert allows(urls, "GET", "/apis/apps")
    assert allows(urls, "GET", "/healthz")
    assert not allows(urls, "GET", "/healthz/etcd")
    assert not allows(urls, "POST", "/healthz")


def test_escalation_coverage_is_per_permission() -> None:
    held = [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "watch", "patch"]},
        {"apiGroups": ["apps"], "resources": ["*"], "verbs": ["*"]},
    ]
    named = {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["x"]}
    assert missing_rules(held, [{**named, "verbs": ["get", "watch", "patch"]}]) == []
    assert missing_rules(held, [{"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["update"]}]) == []
    assert missing_rules(held, [{**named, "verbs": ["get", "delete"]}]) == [{**named, "verbs": ["delete"]}]
    # holding one name does not cover every name, nor does a named rule cover a wildcard
    one = [{**named, "verbs": ["get"]}]
    assert missing_rules(one, [{**named, "resourceNames": [], "verbs": ["get"]}]) != []
    assert missing_rules(held, [{"apiGroups": ["*"], "resources": ["leases"], "verbs": ["get"]}]) != []


def pod(**container_security: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "a", "securityContext": container_security}, {"name": "b"}]}}


def test_pod_security_levels() -> None:
    assert violations(pod(privileged=True), "privileged") == []
    assert violations(pod(), "baseline") == []
    assert violations(pod(privileged=True), "baseline") == [
        'privileged (container "a" must not set securityContext.privileged=true)'
    ]
    restricted = violations(pod(), "restricted")
    assert restricted[0] == (
        'allowPrivilegeEscalation != false (containers "a", "b" must set '
        "securityContext.allowPrivilegeEscalation=false)"
    )
    assert [v.split(" (")[0] for v in restricted] == [
        "allowPrivilegeEscalation != false",
        "unrestricted capabilities",
        "runAsNonRoot != true",
        "seccompProfile",
    ]
    volume = {"spec": {"containers": [], "volumes": [{"name": "h", "hostPath": {"path": "/"}}]}}
    assert violations(volume, "restricted") == [
        'hostPath volumes (volume "h")',
        'restricted volume types (volume "h" uses restricted volume type "hostPath")',
    ]
