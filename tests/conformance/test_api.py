"""Discovery, CRUD and object metadata semantics, through the official client."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from .conftest import pod_spec, raw_request, wait_for


def _raw(k8s_api: client.ApiClient, method: str, path: str, body: Any = None, content_type: str | None = None) -> Any:
    headers = {"Accept": "application/json"}
    if content_type:
        headers["Content-Type"] = content_type
    return raw_request(k8s_api, method, path, body, headers)


def test_version_and_discovery(k8s_api: client.ApiClient) -> None:
    version = client.VersionApi(k8s_api).get_code()
    assert version.major == "1"
    core = client.CoreApi(k8s_api).get_api_versions()
    assert "v1" in core.versions
    groups = {g.name: g for g in client.ApisApi(k8s_api).get_api_versions().groups}
    for group in ("apps", "coordination.k8s.io", "rbac.authorization.k8s.io", "apiextensions.k8s.io", "events.k8s.io"):
        assert group in groups, group
    resources = {r.name: r for r in client.CoreV1Api(k8s_api).get_api_resources().resources}
    assert {
        "pods",
        "pods/status",
        "pods/binding",
        "services",
        "configmaps",
        "events",
        "serviceaccounts",
        "nodes",
    } <= set(resources)
    assert resources["pods"].namespaced
    assert not resources["nodes"].namespaced
    assert "po" in resources["pods"].short_names
    apps = {r.name for r in client.AppsV1Api(k8s_api).get_api_resources().resources}
    assert {"deployments", "deployments/scale", "replicasets", "replicasets/scale"} <= apps
    leases = {r.name for r in client.CoordinationV1Api(k8s_api).get_api_resources().resources}
    assert "leases" in leases


def test_create_get_metadata(core: client.CoreV1Api, namespace: str) -> None:
    created = core.create_namespaced_config_map(namespace, {"metadata": {"name": "one"}, "data": {"a": "1"}})
    meta = created.metadata
    assert meta.uid
    assert meta.creation_timestamp
    assert meta.resource_version
    fetched = core.read_namespaced_config_map("one", namespace)
    assert fetched.metadata.uid == meta.uid
    assert fetched.data == {"a": "1"}


def test_generate_name_and_already_exists(core: client.CoreV1Api, namespace: str) -> None:
    a = core.create_namespaced_config_map(namespace, {"metadata": {"generateName": "gen-"}})
    b = core.create_namespaced_config_map(namespace, {"metadata": {"generateName": "gen-"}})
    assert a.metadata.name.startswith("gen-")
    assert b.metadata.name.startswith("gen-")
    assert a.metadata.name != b.metadata.name
    with pytest.raises(client.ApiException) as info:
        core.create_namespaced_config_map(namespace, {"metadata": {"name": a.metadata.name}})
    assert info.value.status == 409
    status = json.loads(info.value.body)
    assert status["kind"] == "Status"
    assert status["reason"] == "AlreadyExists"
    assert status["code"] == 409
    assert status["details"]["name"] == a.metadata.name
    assert status["details"]["kind"] == "configmaps"


def test_not_found_status(core: client.CoreV1Api, namespace: str) -> None:
    with pytest.raises(client.ApiException) as info:
        core.read_namespaced_pod("missing", namespace)
    status = json.loads(info.value.body)
    assert (info.value.status, status["reason"], status["message"]) == (404, "NotFound", 'pods "missing" not found')


def test_create_in_missing_namespace_is_not_found(core: client.CoreV1Api) -> None:
    with pytest.raises(client.ApiException) as info:
        core.create_namespaced_config_map("no-such-namespace-ttj", {"metadata": {"name": "x"}})
    assert info.value.status == 404


def test_resource_versions_and_conflict(core: client.CoreV1Api, namespace: str) -> None:
    first = core.create_namespaced_config_map(namespace, {"metadata": {"name": "rv"}, "data": {"v": "1"}})
    stale = first.metadata.resource_version
    second = core.patch_namespaced_config_map("rv", namespace, {"data": {"v": "2"}})
    assert int(second.metadata.resource_version) > int(stale)
    body = {"metadata": {"name": "rv", "resourceVersion": stale}, "data": {"v": "3"}}
    with pytest.raises(client.ApiException) as info:
        core.replace_namespaced_config_map("rv", namespace, body)
    assert info.value.status == 409
    assert json.loads(info.value.body)["reason"] == "Conflict"
    body["metadata"]["resourceVersion"] = second.metadata.resource_version
    third = core.replace_namespaced_config_map("rv", namespace, body)
    assert third.data == {"v": "3"}
    listed = core.list_namespaced_config_map(namespace)
    assert int(listed.metadata.resource_version) >= int(third.metadata.resource_version)


def test_no_op_update_keeps_resource_version(core: client.CoreV1Api, namespace: str) -> None:
    first = core.create_namespaced_config_map(namespace, {"metadata": {"name": "noop"}, "data": {"v": "1"}})
    again = core.patch_namespaced_config_map("noop", namespace, {"data": {"v": "1"}})
    assert again.metadata.resource_version == first.metadata.resource_version


def test_patch_types(k8s_api: client.ApiClient, namespace: str) -> None:
    containers = [
        {"name": "a", "image": "busybox", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
        {"name": "b", "image": "busybox"},
    ]
    deployment = {
        "metadata": {"name": "p", "labels": {"app": "x"}},
        "spec": {
            "selector": {"matchLabels": {"app": "x"}},
            "replicas": 0,  # no pods: a real Deployment controller would start them
            "template": {"metadata": {"labels": {"app": "x"}}, "spec": pod_spec(containers=containers)},
        },
    }
    client.AppsV1Api(k8s_api).create_namespaced_deployment(namespace, deployment)
    base = f"/apis/apps/v1/namespaces/{namespace}/deployments/p"
    # strategic merge: containers and env merge by name
    strategic = {
        "spec": {
            "template": {
                "spec": {"containers": [{"name": "a", "image": "busybox:2", "env": [{"name": "B", "value": "3"}]}]}
            }
        }
    }
    out = _raw(k8s_api, "PATCH", base, strategic, "application/strategic-merge-patch+json")
    by_name = {c["name"]: c for c in out["spec"]["template"]["spec"]["containers"]}
    assert set(by_name) == {"a", "b"}
    assert by_name["a"]["image"] == "busybox:2"
    assert {e["name"]: e["value"] for e in by_name["a"]["env"]} == {"A": "1", "B": "3"}
    # JSON merge patch: null removes a key
    out = _raw(
        k8s_api, "PATCH", base, {"metadata": {"labels": {"app": None, "tier": "t"}}}, "application/merge-patch+json"
    )
    assert out["metadata"]["labels"] == {"tier": "t"}
    # JSON patch
    ops = [
        {"op": "add", "path": "/metadata/annotations", "value": {"k": "v"}},
        {"op": "test", "path": "/metadata/name", "value": "p"},
    ]
    out = _raw(k8s_api, "PATCH", base, ops, "application/json-patch+json")
    assert out["metadata"]["annotations"] == {"k": "v"}
    # conditions merge by type through the status subresource
    core = client.CoreV1Api(k8s_api)
    core.create_namespaced_pod(namespace, {"metadata": {"name": "p"}, "spec": pod_spec()})
    pod = f"/api/v1/namespaces/{namespace}/pods/p"
    status = {
        "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Initialized", "status": "True"}]}
    }
    _raw(k8s_api, "PATCH", pod + "/status", status, "application/strategic-merge-patch+json")
    status = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    out = _raw(k8s_api, "PATCH", pod + "/status", status, "application/strategic-merge-patch+json")
    conditions = {c["type"]: c["status"] for c in out["status"]["conditions"]}
    assert conditions["Ready"] == "True"
    assert conditions["Initialized"] == "True"
    # a running pod's spec is immutable apart from images and a few fields
    with pytest.raises(client.ApiException) as info:
        core.patch_namespaced_pod("p", namespace, {"spec": {"restartPolicy": "Never"}})
    assert info.value.status == 422


def test_pod_status_subresource_and_binding(core: client.CoreV1Api, namespace: str) -> None:
    pod = core.create_namespaced_pod(namespace, {"metadata": {"name": "b"}, "spec": pod_spec()})
    assert pod.status.phase == "Pending"
    # writes to the main resource ignore status
    core.patch_namespaced_pod("b", namespace, {"status": {"phase": "Running"}, "metadata": {"labels": {"x": "y"}}})
    assert core.read_namespaced_pod("b", namespace).status.phase == "Pending"
    core.patch_namespaced_pod_status("b", namespace, {"status": {"phase": "Running"}})
    assert core.read_namespaced_pod("b", namespace).status.phase == "Running"
    node = f"node-{namespace}"  # no kubelet runs it
    core.create_namespaced_binding(
        namespace,
        {"metadata": {"name": "b"}, "target": {"apiVersion": "v1", "kind": "Node", "name": node}},
        _preload_content=False,
    )
    assert core.read_namespaced_pod("b", namespace).spec.node_name == node


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("tier=web", {"a", "b"}),
        ("tier!=web", {"c", "d"}),
        ("tier in (web,db)", {"a", "b", "c"}),
        ("tier notin (web)", {"c", "d"}),
        ("canary", {"b"}),
        ("!canary", {"a", "c", "d"}),
        ("tier=web,canary", {"b"}),
    ],
)
def test_label_selectors(core: client.CoreV1Api, namespace: str, selector: str, expected: set[str]) -> None:
    labels = {"a": {"tier": "web"}, "b": {"tier": "web", "canary": "1"}, "c": {"tier": "db"}, "d": {}}
    for name, value in labels.items():
        core.create_namespaced_config_map(namespace, {"metadata": {"name": name, "labels": value}})
    found = {c.metadata.name for c in core.list_namespaced_config_map(namespace, label_selector=selector).items}
    assert found & set(labels) == expected  # a namespace is never empty: kube-root-ca.crt is there too


def test_field_selectors_and_all_namespaces(core: client.CoreV1Api, namespace: str) -> None:
    spec = pod_spec()
    core.create_namespaced_pod(namespace, {"metadata": {"name": "f1", "labels": {"sel": namespace}}, "spec": spec})
    core.create_namespaced_pod(namespace, {"metadata": {"name": "f2", "labels": {"sel": namespace}}, "spec": spec})
    core.patch_namespaced_pod_status("f2", namespace, {"status": {"phase": "Running"}})
    names = lambda pods: {p.metadata.name for p in pods.items}  # noqa: E731
    assert names(core.list_namespaced_pod(namespace, field_selector="metadata.name=f1")) == {"f1"}
    assert names(core.list_namespaced_pod(namespace, field_selector="status.phase=Running")) == {"f2"}
    assert names(core.list_namespaced_pod(namespace, field_selector="status.phase!=Running")) == {"f1"}
    assert names(core.list_namespaced_pod(namespace, field_selector="spec.nodeName=")) == {"f1", "f2"}
    everywhere = core.list_pod_for_all_namespaces(label_selector=f"sel={namespace}")
    assert names(everywhere) == {"f1", "f2"}
    assert everywhere.metadata.resource_version
    by_ns = core.list_pod_for_all_namespaces(field_selector=f"metadata.namespace={namespace}")
    assert names(by_ns) == {"f1", "f2"}


def test_unsupported_field_labels_are_refused(core: client.CoreV1Api, namespace: str) -> None:
    """kube-apiserver selects on a few fields per kind only (metadata.name and .namespace for most); a kind
    with field labels of its own words the refusal differently from one with only the default two."""
    only_metadata = '"data.x" is not a known field selector: only "metadata.name", "metadata.namespace"'
    for list_call, label, message in (
        (core.list_namespaced_config_map, "data.x", only_metadata),
        (core.list_namespaced_pod, "spec.priority", "field label not supported: spec.priority"),
        (core.list_namespaced_event, "message", "field label not supported: message"),
    ):
        with pytest.raises(client.ApiException) as info:
            list_call(namespace, field_selector=f"{label}=1")
        assert info.value.status == 400
        assert json.loads(info.value.body)["message"] == message
    nodes = core.list_node(field_selector="spec.unschedulable=false").items
    assert all(not node.spec.unschedulable for node in nodes)


def test_every_namespace_holds_the_root_ca_configmap(core: client.CoreV1Api, namespace: str) -> None:
    """kube-controller-manager publishes ``kube-root-ca.crt`` in every namespace, and puts it back."""

    def published() -> Any:
        found = core.list_namespaced_config_map(namespace, field_selector="metadata.name=kube-root-ca.crt").items
        return found[0] if found else None

    first = wait_for(published, what="kube-root-ca.crt")
    assert set(first.data) == {"ca.crt"}
    ca = first.data["ca.crt"]
    assert ca == "" or ca.startswith("-----BEGIN CERTIFICATE-----")  # empty where the API serves plain HTTP
    core.delete_namespaced_config_map("kube-root-ca.crt", namespace)
    again = wait_for(
        lambda: (cm := published()) is not None and cm.metadata.uid != first.metadata.uid and cm,
        what="kube-root-ca.crt to be published again",
    )
    assert again.data == {"ca.crt": ca}
    core.patch_namespaced_config_map("kube-root-ca.crt", namespace, {"data": {"ca.crt": "changed"}})
    wait_for(lambda: published().data == {"ca.crt": ca}, what="kube-root-ca.crt's content to be restored")


def test_list_pagination(core: client.CoreV1Api, namespace: str) -> None:
    for i in range(5):
        core.create_namespaced_config_map(namespace, {"metadata": {"name": f"page-{i}"}})
    seen: list[str] = []
    token = None
    while True:
        page = core.list_namespaced_config_map(namespace, limit=2, _continue=token)
        seen.extend(c.metadata.name for c in page.items)
        token = page.metadata._continue
        if not token:
            break
    assert sorted(n for n in seen if n.startswith("page-")) == [f"page-{i}" for i in range(5)]


def test_other_resources_crud(k8s_api: client.ApiClient, namespace: str) -> None:
    coordination = client.CoordinationV1Api(k8s_api)
    # raw JSON: the typed client writes MicroTimes with isoformat() ("+00:00", no fraction), which kube refuses
    lease = raw_request(
        k8s_api,
        "POST",
        f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases",
        {
            "metadata": {"name": "job-chief"},
            "spec": {
                "holderIdentity": "pod-a",
                "leaseDurationSeconds": 15,
                "leaseTransitions": 0,
                "renewTime": "2026-11-21T10:00:00.000000Z",
                "acquireTime": "2026-11-21T10:00:00.000000Z",
            },
        },
    )
    assert lease["spec"]["holderIdentity"] == "pod-a"
    coordination.patch_namespaced_lease(
        "job-chief", namespace, {"spec": {"holderIdentity": "pod-b", "leaseTransitions": 1}}
    )
    assert coordination.read_namespaced_lease("job-chief", namespace).spec.lease_transitions == 1
    rbac = client.RbacAuthorizationV1Api(k8s_api)
    rbac.create_namespaced_role(
        namespace, {"metadata": {"name": "r"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "rb"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}],
        },
    )
    assert [r.metadata.name for r in rbac.list_namespaced_role_binding(namespace).items] == ["rb"]
    core = client.CoreV1Api(k8s_api)
    core.create_namespaced_service(
        namespace,
        {"metadata": {"name": "svc"}, "spec": {"clusterIP": "None", "selector": {"a": "b"}, "ports": [{"port": 2222}]}},
    )
    assert core.read_namespaced_service("svc", namespace).spec.cluster_ip == "None"
    core.create_namespaced_event(
        namespace,
        {
            "metadata": {"name": "ev1"},
            "involvedObject": {"kind": "Pod", "name": "x", "namespace": namespace},
            "reason": "Test",
            "message": "hello",
            "type": "Normal",
        },
    )
    assert core.list_namespaced_event(namespace, field_selector="involvedObject.name=x").items[0].reason == "Test"
    events = client.EventsV1Api(k8s_api)
    raw_request(
        k8s_api,
        "POST",
        f"/apis/events.k8s.io/v1/namespaces/{namespace}/events",
        {
            "metadata": {"name": "ev2"},
            "eventTime": "2026-11-21T10:00:00.000000Z",
            "reportingController": "ttj/test",
            "reportingInstance": "t",
            "action": "Tested",
            "reason": "Test",
            "type": "Normal",
            "regarding": {"kind": "Pod", "name": "x", "namespace": namespace},
        },
    )
    assert events.read_namespaced_event("ev2", namespace).reason == "Test"
    # every namespace gets one (a real cluster's service account controller adds it shortly after)
    wait_for(lambda: core.list_namespaced_service_account(namespace, field_selector="metadata.name=default").items)


def test_deployment_generation_and_scale(k8s_api: client.ApiClient, namespace: str) -> None:
    apps = client.AppsV1Api(k8s_api)
    body = {
        "metadata": {"name": "d"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "d"}},
            "template": {"metadata": {"labels": {"app": "d"}}, "spec": pod_spec()},
        },
    }
    created = apps.create_namespaced_deployment(namespace, body)
    assert created.metadata.generation == 1
    apps.patch_namespaced_deployment("d", namespace, {"metadata": {"labels": {"x": "y"}}})
    assert apps.read_namespaced_deployment("d", namespace).metadata.generation == 1
    apps.patch_namespaced_deployment_scale("d", namespace, {"spec": {"replicas": 3}})
    scaled = apps.read_namespaced_deployment("d", namespace)
    assert scaled.spec.replicas == 3
    assert scaled.metadata.generation == 2
    scale = apps.read_namespaced_deployment_scale("d", namespace)
    assert scale.spec.replicas == 3
    assert scale.status.selector == "app=d"
    apps.patch_namespaced_deployment_status("d", namespace, {"status": {"replicas": 3}})
    assert apps.read_namespaced_deployment("d", namespace).metadata.generation == 2
