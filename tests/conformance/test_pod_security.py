"""Pod Security admission from namespace labels (``pod-security.kubernetes.io/enforce``), as kube-apiserver's
PodSecurity plugin refuses pods: 403 with ``violates PodSecurity "<level>:<version>": <reason> (<detail>), ...``.

Pods are created with dryRun=All (admission runs, nothing is stored or scheduled), so that the same tests hold on
a real cluster with kubelets."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

ENFORCE = "pod-security.kubernetes.io/enforce"


@pytest.fixture
def labelled_namespace(k8s_api: client.ApiClient) -> Iterator[Callable[..., str]]:
    core = client.CoreV1Api(k8s_api)
    made: list[str] = []

    def make(**labels: str) -> str:
        name = f"conf-psa-{uuid.uuid4().hex[:8]}"
        core.create_namespace({"metadata": {"name": name, "labels": {"ttj-conformance": "true", **labels}}})
        made.append(name)
        return name

    yield make
    for name in made:
        core.delete_namespace(name)


def pod(name: str = "p", pod_security: dict[str, Any] | None = None, **container_security: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "registry.k8s.io/pause:3.9", "command": ["/pause"]}
    if container_security:
        container["securityContext"] = container_security
    spec: dict[str, Any] = {"containers": [container]}
    if pod_security:
        spec["securityContext"] = pod_security
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def refusal(core: client.CoreV1Api, namespace: str, body: dict[str, Any]) -> str:
    with pytest.raises(client.ApiException) as info:
        core.create_namespaced_pod(namespace, body, dry_run="All")
    assert info.value.status == 403, info.value.body
    status = json.loads(info.value.body)
    assert status["reason"] == "Forbidden"
    return str(status["message"])


def test_restricted_refuses_a_bare_pod_naming_every_missing_setting(
    k8s_api: client.ApiClient, labelled_namespace: Callable[..., str]
) -> None:
    namespace = labelled_namespace(**{ENFORCE: "restricted"})
    message = refusal(client.CoreV1Api(k8s_api), namespace, pod("bare"))
    assert message == (
        'pods "bare" is forbidden: violates PodSecurity "restricted:latest": '
        'allowPrivilegeEscalation != false (container "main" must set securityContext.allowPrivilegeEscalation=false), '
        'unrestricted capabilities (container "main" must set securityContext.capabilities.drop=["ALL"]), '
        'runAsNonRoot != true (pod or container "main" must set securityContext.runAsNonRoot=true), '
        'seccompProfile (pod or container "main" must set securityContext.seccompProfile.type to "RuntimeDefault" '
        'or "Localhost")'
    )


def test_restricted_admits_a_locked_down_pod_and_pod_level_settings_count(
    k8s_api: client.ApiClient, labelled_namespace: Callable[..., str]
) -> None:
    core = client.CoreV1Api(k8s_api)
    namespace = labelled_namespace(**{ENFORCE: "restricted"})
    core.create_namespaced_pod(namespace, pod("locked", **RESTRICTED), dry_run="All")
    pod_level = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    core.create_namespaced_pod(
        namespace,
        pod("pod-level", pod_level, allowPrivilegeEscalation=False, capabilities={"drop": ["ALL"]}),
        dry_run="All",
    )
    message = refusal(core, namespace, pod("root", **{**RESTRICTED, "runAsUser": 0}))
    assert message.endswith('runAsUser=0 (container "main" must not set runAsUser=0)')
    added = {**RESTRICTED, "capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]}}
    message = refusal(core, namespace, pod("caps", **added))
    assert 'must not include "NET_ADMIN" in securityContext.capabilities.add' in message


def test_baseline_refuses_privileged_and_host_namespaces_but_admits_a_bare_pod(
    k8s_api: client.ApiClient, labelled_namespace: Callable[..., str]
) -> None:
    core = client.CoreV1Api(k8s_api)
    namespace = labelled_namespace(**{ENFORCE: "baseline", f"{ENFORCE}-version": "v1.32"})
    core.create_namespaced_pod(namespace, pod("bare"), dry_run="All")
    assert refusal(core, namespace, pod("priv", privileged=True)) == (
        'pods "priv" is forbidden: violates PodSecurity "baseline:v1.32": '
        'privileged (container "main" must not set securityContext.privileged=true)'
    )
    host = pod("host")
    host["spec"]["hostNetwork"] = True
    assert refusal(core, namespace, host).endswith("host namespaces (hostNetwork=true)")


def test_privileged_and_unlabelled_namespaces_admit_anything(
    k8s_api: client.ApiClient, labelled_namespace: Callable[..., str]
) -> None:
    core = client.CoreV1Api(k8s_api)
    for namespace in (labelled_namespace(**{ENFORCE: "privileged"}), labelled_namespace()):
        core.create_namespaced_pod(namespace, pod("priv", privileged=True), dry_run="All")


def warning_of(api: client.ApiClient, path: str, body: dict[str, Any]) -> str | None:
    """POST with dryRun=All; the response's Warning header (kube's 299 warnings), which kubectl prints."""
    serialized = api.param_serialize(
        "POST",
        f"{path}?dryRun=All",
        header_params={"Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*serialized)
    response.read()
    assert response.status == 201, response.data
    warning = response.getheader("Warning")
    return str(warning) if warning is not None else None


def test_warn_label_warns_on_pods_and_workload_templates_without_refusing(
    k8s_api: client.ApiClient, labelled_namespace: Callable[..., str]
) -> None:
    namespace = labelled_namespace(**{"pod-security.kubernetes.io/warn": "baseline"})
    privileged = pod("priv", privileged=True)
    expected = (
        '299 - "would violate PodSecurity \\"baseline:latest\\": '
        'privileged (container \\"main\\" must not set securityContext.privileged=true)"'
    )
    assert warning_of(k8s_api, f"/api/v1/namespaces/{namespace}/pods", privileged) == expected
    template = {"metadata": {"labels": {"app": "x"}}, "spec": privileged["spec"]}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"app": "x"}}, "template": template},
    }
    assert warning_of(k8s_api, f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment) == expected
    assert warning_of(k8s_api, f"/api/v1/namespaces/{namespace}/pods", pod("fine")) is None
    # enforce does not apply to workload templates: the Deployment is admitted, its pods would be refused
    enforcing = labelled_namespace(**{ENFORCE: "baseline"})
    assert warning_of(k8s_api, f"/apis/apps/v1/namespaces/{enforcing}/deployments", deployment) is None


def test_a_pod_update_is_checked_again_unless_it_only_touches_exempt_fields(
    k8s_api: client.ApiClient, labelled_namespace: Callable[..., str]
) -> None:
    core = client.CoreV1Api(k8s_api)
    namespace = labelled_namespace()
    core.create_namespaced_pod(namespace, pod("priv", privileged=True))
    core.patch_namespace(namespace, {"metadata": {"labels": {ENFORCE: "baseline"}}})
    core.patch_namespaced_pod("priv", namespace, {"metadata": {"labels": {"touched": "yes"}}})  # metadata: exempt
    with pytest.raises(client.ApiException) as info:
        core.patch_namespaced_pod(
            "priv", namespace, {"spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}
        )
    assert info.value.status == 403
    assert json.loads(info.value.body)["message"] == (
        'pods "priv" is forbidden: violates PodSecurity "baseline:latest": '
        'privileged (container "main" must not set securityContext.privileged=true)'
    )
