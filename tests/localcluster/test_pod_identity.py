"""Pods act as their service account: on a local cluster authorizing by RBAC, the kubelet gives each pod a
kubeconfig with a token the API server issued for the pod's ServiceAccount (bound to the pod), and RBAC decides
what the pod's processes may do; a pod that does not mount a token has none."""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config

from ttj_localcluster.cluster import LocalCluster
from ttj_localcluster.nodes.fleet import NodeFleet
from ttj_localcluster.nodes.pools import NodePool
from ttj_localcluster.nodes.scheduler import Scheduler

from .conftest import wait_for

WHO_AM_I = textwrap.dedent(
    """
    import json, os, sys
    if "KUBECONFIG" not in os.environ:
        print("NO-TOKEN", flush=True)
        sys.exit(0)
    from kubernetes import client, config
    config.load_kube_config()
    try:
        client.CoreV1Api().read_namespaced_pod(os.environ["ME"], os.environ["NS"])
        print("READ-OK", flush=True)
    except client.ApiException as exc:
        print("DENIED", exc.status, json.loads(exc.body)["message"], flush=True)
    """
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[client.ApiClient]:
    fleet = NodeFleet(
        [NodePool(name="cpu", nodes=1)], run_pods=True, pod_network=False, state_dir=tmp_path_factory.mktemp("state")
    )
    with LocalCluster(addons=[fleet, Scheduler(seed=1)], authorization_mode="RBAC") as local:
        api = config.new_client_from_config(config_file=local.kubeconfig_path)
        yield api
        api.close()


@pytest.fixture
def namespace(cluster: client.ApiClient) -> Iterator[str]:
    name = f"identity-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(cluster)
    core.create_namespace({"metadata": {"name": name}})
    core.create_namespaced_service_account(name, {"metadata": {"name": "reader"}})
    yield name
    core.delete_namespace(name)


def run(api: client.ApiClient, namespace: str, name: str, **spec: Any) -> str:
    """Runs WHO_AM_I in a pod; its output."""
    env = [
        {"name": "ME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]
    container = {"name": "main", "image": "python", "command": ["python", "-c", WHO_AM_I], "env": env}
    body = {"metadata": {"name": name}, "spec": {"containers": [container], "restartPolicy": "Never", **spec}}
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, body)
    wait_for(
        lambda: core.read_namespaced_pod(name, namespace).status.phase in ("Succeeded", "Failed"),
        timeout=60,
        what=f"pod {name} to finish",
    )
    return str(core.read_namespaced_pod_log(name, namespace))


def test_a_pod_acts_as_its_service_account(cluster: client.ApiClient, namespace: str) -> None:
    denied = run(cluster, namespace, "before", serviceAccountName="reader")
    assert denied.strip() == (
        f'DENIED 403 pods "before" is forbidden: User "system:serviceaccount:{namespace}:reader" cannot get '
        f'resource "pods" in API group "" in the namespace "{namespace}"'
    )
    rbac = client.RbacAuthorizationV1Api(cluster)
    rbac.create_namespaced_role(
        namespace,
        {"metadata": {"name": "pod-reader"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]},
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "pod-reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )
    assert run(cluster, namespace, "after", serviceAccountName="reader").strip() == "READ-OK"
    # the default account of the namespace is not bound
    assert run(cluster, namespace, "other").startswith("DENIED 403")


def test_no_token_without_automount(cluster: client.ApiClient, namespace: str) -> None:
    assert run(cluster, namespace, "no-token", automountServiceAccountToken=False).strip() == "NO-TOKEN"
    client.CoreV1Api(cluster).patch_namespaced_service_account(
        "reader", namespace, {"automountServiceAccountToken": False}
    )
    assert run(cluster, namespace, "account-says-no", serviceAccountName="reader").strip() == "NO-TOKEN"


def test_a_pod_naming_a_missing_account_is_refused(cluster: client.ApiClient, namespace: str) -> None:
    body = {"metadata": {"name": "orphan"}, "spec": {"serviceAccountName": "ghost", "containers": [{"name": "c"}]}}
    with pytest.raises(client.ApiException) as info:
        client.CoreV1Api(cluster).create_namespaced_pod(namespace, body)
    assert info.value.status == 403
    assert f"error looking up service account {namespace}/ghost" in info.value.body
